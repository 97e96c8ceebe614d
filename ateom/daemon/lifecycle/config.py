"""DaemonConfig: every `ateom serve` flag, each with an ``ATEOM_*`` environment twin.

A flag given on the command line wins over its environment twin, which wins
over the default. Repeatable flags take their twin as a list: spec dirs split
on ``:`` (like PATH), runsc global flags on whitespace.
"""

from __future__ import annotations

import argparse
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from ateom.dataplane.routes import parse_address
from ateom.errors import AteomError, ErrorCode
from ateom.runsc.commands import global_flag
from ateom.settings import (
    ACTORS_ROOT_ENV,
    CUDA_CHECKPOINT_ENV,
    CUDA_CHECKPOINT_TIMEOUT_ENV,
    DEFAULT_CUDA_CHECKPOINT_TIMEOUT,
    DEFAULT_DRIVER_ROOT,
    DEFAULT_GPU_GLOB,
    DEFAULT_GPU_PLACEMENT,
    DEFAULT_PROC_ROOT,
    DEFAULT_RUN_DIR,
    DEFAULT_SPEC_DIRS,
    DEFAULT_TOOLKIT_DIR,
    DRIVER_ROOT_ENV,
    GPU_GLOB_ENV,
    GPU_PLACEMENT_ENV,
    NVPROXY_CAPABILITIES_ENV,
    NVPROXY_DRIVER_VERSION_ENV,
    PROC_ROOT_ENV,
    RUN_DIR_ENV,
    RUNSC_GLOBAL_FLAGS_ENV,
    SPEC_DIRS_ENV,
    TOOLKIT_DIR_ENV,
    GpuSettings,
    NodeSettings,
    as_typed,
    parse_placement,
)
from ateom.worker.atunnel import AtunnelSettings
from ateom.worker.capacity import DEFAULT_CAPACITY_DIR
from ateom.worker.layout import DEFAULT_BASE_DIR, WorkerLayout, check_pod_uid

DEFAULT_SOCKET = "/run/ateom/ateom.sock"
# Started as a Substrate worker (--pod-uid), the kubelet's readiness probe asks here.
DEFAULT_WORKER_READINESS_ADDRESS = "0.0.0.0:8080"
# Substrate sets POD_UID from the Pod's metadata.uid, and passes --pod-uid=$(POD_UID).
POD_UID_ENV = "POD_UID"
DEFAULT_PAUSE_CONTAINER = "_pause"
# gRPC threads no lifecycle call may take: Health (the Pod's liveness probe)
# and Inspect answer even while every lifecycle slot waits on a slow runsc.
RESERVED_RPC_THREADS = 3


@dataclass(frozen=True, slots=True)
class DaemonConfig:
    actors_root: str
    socket: str = DEFAULT_SOCKET
    listen: str = ""
    tls_cert: str = ""
    tls_key: str = ""
    tls_client_ca: str = ""
    runsc: str = "runsc"
    runsc_dir: str = ""
    runsc_global_flags: tuple[str, ...] = ()
    max_actors: int = 1
    warm_networks: int = 4
    stats_interval: float = 10.0
    node: NodeSettings = field(default_factory=NodeSettings)
    gpu: GpuSettings = field(default_factory=GpuSettings)
    shutdown_grace: float = 10.0
    kill_grace: float = 5.0
    log_format: str = "json"
    log_level: str = "info"
    run_dir: str = DEFAULT_RUN_DIR
    pause_container: str = DEFAULT_PAUSE_CONTAINER
    runsc_timeout: float = 120.0
    metrics_listen: str = ""
    lock_wait: float = 300.0
    log_max_bytes: int = 16 * 1024 * 1024
    log_retention: float = 3600.0
    # Started as Substrate's controller starts a worker (`ateom.worker`).
    pod_uid: str = ""
    base_dir: str = DEFAULT_BASE_DIR
    readiness_listen_address: str = ""
    capacity_dir: str = DEFAULT_CAPACITY_DIR
    otlp_relay_socket: str = ""
    atunnel: AtunnelSettings = field(default_factory=AtunnelSettings)
    env: Mapping[str, str] = field(default_factory=dict)

    @property
    def accepted_not_served(self) -> tuple[str, ...]:
        """Flags Substrate's controller gives that this daemon takes but does not serve
        yet, as ``--flag=value`` (GetStatus, ``ateom doctor``, the start-up log)."""
        unserved = dict(self.atunnel.unserved())
        if self.otlp_relay_socket:
            unserved["--otlp-relay-socket"] = self.otlp_relay_socket
        return tuple(f"{flag}={value}" for flag, value in unserved.items())

    @property
    def layout(self) -> WorkerLayout | None:
        """The base dir's layout for this Pod; None when not started with a pod uid."""
        return WorkerLayout(self.base_dir, self.pod_uid) if self.pod_uid else None

    @property
    def rpc_threads(self) -> int:
        """The gRPC server's worker threads."""
        return self.lifecycle_slots + RESERVED_RPC_THREADS

    @property
    def lifecycle_slots(self) -> int:
        """Ateom-service calls (lifecycle, stats) that may run at once; the rest of
        the threads are kept for Health and Inspect."""
        return max(8, self.max_actors * 4)

    @property
    def state_root(self) -> str:
        """Parent of each actor's runsc ``-root`` directory."""
        return os.path.join(self.run_dir, "actors")

    @property
    def log_root(self) -> str:
        """Parent of each actor's per-container stdio and runsc logs."""
        return os.path.join(self.run_dir, "logs")

    @property
    def actor_networks(self) -> bool:
        """Whether each actor gets a network of its own (`ateom.network`): unless the
        operator runs runsc with ``--network=none`` or ``host`` (their choice, kept)."""
        return global_flag(self.runsc_global_flags, "network") not in ("none", "host")

    @property
    def egress_port(self) -> int | None:
        """The egress relay's port (`--atunnel-egress-listen-address`), where actors'
        redirected TCP lands; None when no egress is served."""
        try:
            return parse_address(self.atunnel.egress_listen_address)[1] or None
        except ValueError:  # none given, or refused by `check_config`
            return None

    @property
    def filestore_root(self) -> str:
        """Parent of each actor's rootfs overlay filestore dir (`runsc.commands.
        overlay_flags`): ateom's, not the node agent's bundle."""
        return os.path.join(self.run_dir, "filestore")

    @property
    def generated_cdi_dir(self) -> str:
        """Where `nvidia-ctk cdi generate` writes when no nvidia.com/gpu spec exists."""
        return os.path.join(self.run_dir, "cdi")


# (flag, env twin, kind, default, help). kind: str|int|float|list-colon|list-space.
_FLAGS: tuple[tuple[str, str, str, object, str], ...] = (
    ("--socket", "ATEOM_SOCKET", "str", DEFAULT_SOCKET, "unix socket to serve gRPC on"),
    ("--listen", "ATEOM_LISTEN", "str", "",
     "also serve on TCP HOST:PORT, over TLS only (needs --tls-cert, --tls-key, --tls-client-ca)"),
    ("--tls-cert", "ATEOM_TLS_CERT", "str", "", "PEM server certificate (chain) for --listen"),
    ("--tls-key", "ATEOM_TLS_KEY", "str", "", "PEM private key of --tls-cert (unencrypted)"),
    ("--tls-client-ca", "ATEOM_TLS_CLIENT_CA", "str", "",
     "PEM CA certificate(s): --listen serves only clients with a certificate they signed"),
    ("--actors-root", ACTORS_ROOT_ENV, "str", "", "every ActorDirs path must be under it"),
    ("--runsc", "ATEOM_RUNSC", "str", "runsc", "the runsc binary ateom executes"),
    ("--runsc-dir", "ATEOM_RUNSC_DIR", "str", "",
     "a request's runsc_path may name a binary under this directory"),
    ("--runsc-global-flag", RUNSC_GLOBAL_FLAGS_ENV, "list-space", (),
     "global runsc flag added to every call (repeatable), e.g. --network=none"),
    ("--max-actors", "ATEOM_MAX_ACTORS", "int", 1, "actors hosted at once"),
    ("--stats-interval", "ATEOM_STATS_INTERVAL", "float", 10.0,
     "seconds between two background stats samples of one actor (GetActiveWorkloadStats)"),
    ("--warm-networks", "ATEOM_WARM_NETWORKS", "int", 4,
     "actor networks kept made ahead of the Runs and Restores that take them (0: none)"),
    ("--spec-dir", SPEC_DIRS_ENV, "list-colon", DEFAULT_SPEC_DIRS,
     "CDI spec directory (repeatable; later dirs override earlier)"),
    ("--gpu-glob", GPU_GLOB_ENV, "str", DEFAULT_GPU_GLOB,
     "the Pod has GPUs when this glob matches"),
    ("--nvproxy-driver-version", NVPROXY_DRIVER_VERSION_ENV, "str", "",
     "passed to runsc --nvproxy-driver-version when set"),
    ("--nvproxy-capabilities", NVPROXY_CAPABILITIES_ENV, "str", "",
     "passed to runsc --nvproxy-allowed-driver-capabilities when set"),
    ("--shutdown-grace", "ATEOM_SHUTDOWN_GRACE", "float", 10.0,
     "seconds in-flight calls get after SIGTERM before hosted actors are terminated"),
    ("--kill-grace", "ATEOM_KILL_GRACE", "float", 5.0,
     "seconds between SIGTERM and SIGKILL when terminating an actor"),
    ("--log-format", "ATEOM_LOG_FORMAT", "str", "json", "json or console"),
    ("--log-level", "ATEOM_LOG_LEVEL", "str", "info", "debug, info, warning, error"),
    ("--run-dir", RUN_DIR_ENV, "str", DEFAULT_RUN_DIR,
     "runsc state, logs and generated CDI specs live here"),
    ("--pause-container", "ATEOM_PAUSE_CONTAINER", "str", DEFAULT_PAUSE_CONTAINER,
     "name of the sandbox's root container bundle"),
    ("--driver-root", DRIVER_ROOT_ENV, "str", DEFAULT_DRIVER_ROOT,
     "NVIDIA driver root (bin/, lib64/): nvidia-ctk's library search path and the"
     " LD_LIBRARY_PATH entry injected into GPU containers"),
    ("--toolkit-dir", TOOLKIT_DIR_ENV, "str", DEFAULT_TOOLKIT_DIR,
     "NVIDIA container toolkit dir: the trusted nvidia-cdi-hook(.real) kept hooks run,"
     " and the first place nvidia-ctk(.real) is looked for"),
    ("--runsc-timeout", "ATEOM_RUNSC_TIMEOUT", "float", 120.0,
     "seconds one runsc command may take before it is killed"),
    ("--metrics-listen", "ATEOM_METRICS_LISTEN", "str", "",
     "serve Prometheus metrics on HOST:PORT (off unless set)"),
    ("--gpu-placement", GPU_PLACEMENT_ENV, "str", DEFAULT_GPU_PLACEMENT,
     "how actors share the Pod's GPUs: exclusive (whole GPUs, one actor each), shared"
     " (every actor may use every GPU), shared:N (at most N actors per GPU)"),
    ("--proc-root", PROC_ROOT_ENV, "str", DEFAULT_PROC_ROOT,
     "where the NVIDIA kernel module's GPU facts are read (<root>/driver/nvidia/...)"),
    ("--cuda-checkpoint", CUDA_CHECKPOINT_ENV, "str", "",
     "NVIDIA cuda-checkpoint binary for GPU checkpoints (default: looked for in the"
     " driver root's bin/, the toolkit dir, then $PATH)"),
    ("--cuda-checkpoint-timeout", CUDA_CHECKPOINT_TIMEOUT_ENV, "float",
     DEFAULT_CUDA_CHECKPOINT_TIMEOUT,
     "seconds a GPU actor's checkpoint (runsc running cuda-checkpoint, then saving)"
     " may take before it is killed"),
    ("--lock-wait", "ATEOM_LOCK_WAIT", "float", 300.0,
     "seconds a call waits for another call on the same actor before giving up"
     " (UNAVAILABLE); never past the caller's gRPC deadline"),
    ("--log-max-bytes", "ATEOM_LOG_MAX_BYTES", "int", 16 * 1024 * 1024,
     "size at which a container's log is rotated (one previous file kept)"),
    ("--log-retention", "ATEOM_LOG_RETENTION", "float", 3600.0,
     "seconds an actor's logs are kept once it is no longer hosted"),
    # As Substrate's WorkerPool controller starts a worker (docs/operations.md).
    ("--pod-uid", "ATEOM_POD_UID", "str", "",
     "the worker Pod's uid (also read from $POD_UID): the socket becomes"
     " <base dir>/ateoms/<pod uid>/ateom.sock and the actors root <base dir>/actors,"
     " unless --socket or --actors-root say otherwise"),
    ("--base-dir", "ATEOM_BASE_DIR", "str", DEFAULT_BASE_DIR,
     "the node's dir shared with the node agent (with --pod-uid)"),
    ("--readiness-listen-address", "ATEOM_READINESS_LISTEN_ADDRESS", "str", "",
     "serve HTTP GET /readyz on HOST:PORT: 200 when an actor can run now, else 503 with"
     f" why (with --pod-uid: {DEFAULT_WORKER_READINESS_ADDRESS} unless set; off otherwise)"),
    ("--capacity-dir", "ATEOM_CAPACITY_DIR", "str", DEFAULT_CAPACITY_DIR,
     "the downward-API files with the worker's CPU (cpu_milli) and memory (memory_bytes)"
     " limits"),
    ("--otlp-relay-socket", "ATEOM_OTLP_RELAY_SOCKET", "str", "",
     "accepted from Substrate's controller; traces are not exported yet (ateom doctor"
     " says so)"),
    ("--atunnel-listen-address", "ATEOM_ATUNNEL_LISTEN_ADDRESS", "str", "",
     "the router's HTTPS ingress, mutual TLS, routed by Host to actors (e.g. :443)"),
    ("--atunnel-connect-listen-address", "ATEOM_ATUNNEL_CONNECT_LISTEN_ADDRESS", "str", "",
     "CONNECT tunnels to actors' ports, mutual TLS (e.g. :8443)"),
    ("--atunnel-credential-bundle", "ATEOM_ATUNNEL_CREDENTIAL_BUNDLE", "str", "",
     "the Pod's key and certificate chain in one PEM (ingress and egress TLS; re-read"
     " when it changes)"),
    ("--atunnel-trust-bundle", "ATEOM_ATUNNEL_TRUST_BUNDLE", "str", "",
     "CAs an ingress client's certificate must chain to"),
    ("--atunnel-client-identity", "ATEOM_ATUNNEL_CLIENT_IDENTITY", "str", "",
     "the SPIFFE id ingress admits (default: Substrate's router's)"),
    ("--atunnel-egress-listen-address", "ATEOM_ATUNNEL_EGRESS_LISTEN_ADDRESS", "str", "",
     "the egress relay: actors' outbound TCP is redirected here and carried to their"
     " egress_gateway (e.g. 0.0.0.0:15001)"),
    ("--atunnel-egress-trust-bundle", "ATEOM_ATUNNEL_EGRESS_TRUST_BUNDLE", "str", "",
     "CAs the egress gateway's certificate must chain to"),
    ("--atunnel-broker-identity", "ATEOM_ATUNNEL_BROKER_IDENTITY", "str", "",
     "the SPIFFE id of a relocated install's broker (accepted; not used yet)"),
)


# Flags without which the daemon does not start (`check_config` says so).
_REQUIRED = ("--actors-root",)


def _default_note(flag: str, kind: str, default: object) -> str:
    """``required`` or ``default <value>``, the value as a person writes it in the flag
    or its twin (``/etc/cdi:/var/run/cdi``, ``none``), not as Python's repr."""
    if flag in _REQUIRED:
        return "required without --pod-uid"
    if isinstance(default, tuple):
        shown = (":" if kind == "list-colon" else " ").join(default)
    else:
        shown = str(default)
    return f"default {shown or 'none'}"


def add_flags(parser: argparse.ArgumentParser) -> None:
    """Add every serve flag; defaults are left None so `from_args` can apply env twins."""
    for flag, env, kind, default, help_text in _FLAGS:
        note = _default_note(flag, kind, default)
        kw: dict[str, object] = {"default": None, "help": f"{help_text} [${env}; {note}]"}
        if kind.startswith("list"):
            kw["action"] = "append"
        elif kind == "int":
            kw["type"] = int
        elif kind == "float":
            kw["type"] = float
        if flag == "--log-format":
            kw["choices"] = ("json", "console")
        parser.add_argument(flag, **kw)  # type: ignore[arg-type]


def _from_env(kind: str, raw: str, env_name: str) -> object:
    try:
        if kind == "int":
            return int(raw)
        if kind == "float":
            return float(raw)
    except ValueError:
        raise AteomError(
            f"${env_name}={raw!r}: not a number", code=ErrorCode.INVALID_ARGUMENT
        ) from None
    if kind == "list-colon":
        return tuple(p for p in raw.split(":") if p)
    if kind == "list-space":
        return tuple(raw.split())
    return raw


# Flags whose twins `ateom.settings` reads (NodeSettings/GpuSettings.from_env, as
# `ateom doctor` and `ateom checkpoint-info` do): flag attr -> the value's field.
_NODE_FLAGS = {"driver_root": "driver_root", "toolkit_dir": "toolkit_dir",
               "spec_dir": "spec_dirs", "gpu_glob": "gpu_glob"}
_GPU_FLAGS = {"cuda_checkpoint": "cuda_checkpoint",
              "cuda_checkpoint_timeout": "cuda_checkpoint_timeout",
              "gpu_placement": "placement", "proc_root": "proc_root"}
_NVPROXY_FLAGS = {"nvproxy_driver_version": "driver_version",
                  "nvproxy_capabilities": "capabilities"}


def from_args(args: argparse.Namespace, environ: Mapping[str, str] | None = None) -> DaemonConfig:
    """Build the config: flag, else ATEOM_* twin, else default. Checks values (pure).

    The node's and the GPU settings' twins are read by `ateom.settings`, the one
    reader every CLI shares; the flags given go on top."""
    environ = os.environ if environ is None else environ
    values: dict[str, object] = {}
    typed: dict[str, str] = {}  # flag -> how the user gave it, for errors: --flag or $ENV
    given_flags: set[str] = set()  # given as a flag or by its twin (not defaulted)
    settings_flags = {**_NODE_FLAGS, **_GPU_FLAGS, **_NVPROXY_FLAGS}
    for flag, env, kind, default, _ in _FLAGS:
        attr = flag[2:].replace("-", "_")
        given = getattr(args, attr, None)
        typed[flag] = f"${env}" if given is None and env in environ else flag
        if given is not None or env in environ:
            given_flags.add(flag)
        if given is not None:
            value: object = tuple(given) if kind.startswith("list") else given
        elif attr in settings_flags:
            continue  # from ateom.settings below
        elif env in environ:
            value = _from_env(kind, environ[env], env)
        else:
            value = default
        values[attr] = value
    values["runsc_global_flags"] = values.pop("runsc_global_flag")
    # Substrate's workers spell it "warn".
    values["log_level"] = {"warn": "warning"}.get(str(values["log_level"]).lower(),
                                                   values["log_level"])
    values["atunnel"] = AtunnelSettings(**{
        attr.removeprefix("atunnel_"): str(values.pop(attr))
        for attr in [a for a in values if a.startswith("atunnel_")]})
    _as_a_worker(values, given_flags, typed, environ)

    def flags_for(fields: Mapping[str, str]) -> dict[str, Any]:
        return {name: values.pop(attr) for attr, name in fields.items() if attr in values}

    node = replace(NodeSettings.from_env(environ), **flags_for(_NODE_FLAGS))
    gpu = GpuSettings.from_env(environ)
    nvproxy = replace(gpu.nvproxy, **flags_for(_NVPROXY_FLAGS))
    gpu = replace(gpu, nvproxy=nvproxy, **flags_for(_GPU_FLAGS))
    config = DaemonConfig(**values, node=node, gpu=gpu,  # type: ignore[arg-type]
                          env=dict(environ))
    return check_config(config, typed.get)


def _as_a_worker(values: dict[str, object], given: set[str], typed: dict[str, str],
                 environ: Mapping[str, str]) -> None:
    """Started as Substrate starts a worker (a pod uid, from --pod-uid or $POD_UID): the
    socket, the actors root and the readiness address default to the worker's
    (`ateom.worker.layout`) where neither the flag nor its twin was `given`."""
    if not values["pod_uid"] and environ.get(POD_UID_ENV):
        values["pod_uid"] = environ[POD_UID_ENV]
        typed["--pod-uid"] = f"${POD_UID_ENV}"
    uid = str(values["pod_uid"])
    if not uid:
        return
    check_pod_uid(uid, typed.get("--pod-uid", "--pod-uid"))
    layout = WorkerLayout(str(values["base_dir"]), uid)
    if "--socket" not in given:
        values["socket"] = layout.socket
    if "--actors-root" not in given:
        values["actors_root"] = layout.actors_root
    if "--readiness-listen-address" not in given:
        values["readiness_listen_address"] = DEFAULT_WORKER_READINESS_ADDRESS


LOG_LEVELS = ("debug", "info", "warning", "error")
# A unix socket's sun_path holds 108 bytes, its terminating NUL among them.
SOCKET_PATH_MAX = 107
# The pause container names a bundle dir and a runsc container id.
_SAFE_COMPONENT = re.compile(r"^[A-Za-z0-9._-]{1,63}$")


def check_config(config: DaemonConfig,
                 typed: Callable[[str], str | None] = lambda flag: None) -> DaemonConfig:
    """Reject configs the daemon cannot serve with (pure). `typed(flag)` is how the
    user gave a flag (``$ATEOM_MAX_ACTORS`` for its twin; None: as the flag), so
    each error names what they wrote."""

    def bad(msg: str) -> AteomError:
        return AteomError(msg, code=ErrorCode.INVALID_ARGUMENT)

    def said(flag: str, value: object) -> str:
        return as_typed(typed(flag) or flag, value)

    for flag, path in (("--base-dir", config.base_dir), ("--capacity-dir", config.capacity_dir)):
        if not os.path.isabs(path):
            raise bad(f"{said(flag, path)}: must be an absolute path")
    if not config.actors_root:
        raise bad("--actors-root (or $ATEOM_ACTORS_ROOT) is required, unless --pod-uid"
                  " (or $POD_UID) makes it <base dir>/actors")
    if not os.path.isabs(config.actors_root):
        raise bad(f"{said('--actors-root', config.actors_root)}: must be an absolute path")
    if config.max_actors < 1:
        raise bad(f"{said('--max-actors', config.max_actors)}: must be >= 1")
    if not 0.1 <= config.stats_interval <= 3600:
        raise bad(f"{said('--stats-interval', config.stats_interval)}: must be 0.1-3600")
    if not 0 <= config.warm_networks <= 64:
        raise bad(f"{said('--warm-networks', config.warm_networks)}: must be 0-64")
    for flag, grace in (("--shutdown-grace", config.shutdown_grace),
                        ("--kill-grace", config.kill_grace)):
        if grace < 0:
            raise bad(f"{said(flag, grace)}: must be >= 0")
    if config.log_format not in ("json", "console"):
        raise bad(f"{said('--log-format', config.log_format)}: must be json or console")
    if config.log_level.lower() not in LOG_LEVELS:
        raise bad(f"{said('--log-level', config.log_level)}: must be one of"
                  f" {', '.join(LOG_LEVELS)}")
    if config.runsc_timeout <= 0:
        raise bad(f"{said('--runsc-timeout', config.runsc_timeout)}: must be > 0")
    gpu = config.gpu
    parse_placement(gpu.placement, field=typed("--gpu-placement") or "--gpu-placement")
    if gpu.cuda_checkpoint_timeout <= 0:
        raise bad(f"{said('--cuda-checkpoint-timeout', gpu.cuda_checkpoint_timeout)}:"
                  " must be > 0")
    if gpu.cuda_checkpoint and not os.path.isabs(gpu.cuda_checkpoint):
        raise bad(f"{said('--cuda-checkpoint', gpu.cuda_checkpoint)}: must be an absolute path")
    for flag, wait in (("--lock-wait", config.lock_wait),
                       ("--log-retention", config.log_retention)):
        if wait < 0:
            raise bad(f"{said(flag, wait)}: must be >= 0")
    if config.log_max_bytes < 4096:
        raise bad(f"{said('--log-max-bytes', config.log_max_bytes)}: must be at least 4096")
    if not _SAFE_COMPONENT.match(config.pause_container) or set(config.pause_container) == {"."}:
        raise bad(f"{said('--pause-container', config.pause_container)}: must be one path"
                  " component of letters, digits, '.', '_' or '-'")
    if not config.socket:
        raise bad(f"{typed('--socket') or '--socket'}: must not be empty")
    if len(os.fsencode(config.socket)) > SOCKET_PATH_MAX:
        raise bad(f"{said('--socket', config.socket)}: {len(os.fsencode(config.socket))} bytes;"
                  f" a unix socket's path is at most {SOCKET_PATH_MAX}")
    if config.runsc_dir and not os.path.isabs(config.runsc_dir):
        raise bad(f"{said('--runsc-dir', config.runsc_dir)}: must be an absolute path")
    check_tls_flags(config, typed)
    if problems := config.atunnel.problems():
        raise bad("; ".join(problems))
    return config


TLS_FLAGS = ("--tls-cert", "--tls-key", "--tls-client-ca")


def check_tls_flags(config: DaemonConfig,
                    typed: Callable[[str], str | None] = lambda flag: None) -> None:
    """--listen serves TCP only over TLS with client certificates: all three TLS flags
    with it, none without it (INVALID_ARGUMENT naming what is missing or stray; pure).
    The files themselves are read when the daemon starts listening."""
    paths = dict(zip(TLS_FLAGS, (config.tls_cert, config.tls_key, config.tls_client_ca),
                     strict=True))
    if not config.listen:
        given = [typed(flag) or flag for flag, path in paths.items() if path]
        if given:
            raise AteomError(f"{', '.join(given)}: only used with --listen (the unix socket"
                             " is plaintext)", code=ErrorCode.INVALID_ARGUMENT)
        return
    missing = [flag for flag, path in paths.items() if not path]
    if missing:
        raise AteomError(
            f"{as_typed(typed('--listen') or '--listen', config.listen)}: TCP is served only"
            f" over TLS with client certificates; missing {', '.join(missing)}",
            code=ErrorCode.INVALID_ARGUMENT)
