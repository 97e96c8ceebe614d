"""ateom serve's flags, their env twins and their checks."""

from __future__ import annotations

import argparse

import pytest

from ateom.daemon.lifecycle import config as daemon_config
from ateom.errors import AteomError, ErrorCode
from tests.support.pure import code

# -- config -------------------------------------------------------------------

def _parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    daemon_config.add_flags(parser)
    return parser.parse_args(argv)


def test_flags_env_twins_and_precedence() -> None:
    env = {"ATEOM_ACTORS_ROOT": "/env/root", "ATEOM_MAX_ACTORS": "3",
           "ATEOM_RUNSC_GLOBAL_FLAGS": "--network=none --ignore-cgroups",
           "ATEOM_CDI_SPEC_DIRS": "/a:/b", "ATEOM_SHUTDOWN_GRACE": "2.5",
           "ATEOM_SOCKET": "/env.sock"}
    cfg = daemon_config.from_args(_parse(["--socket", "/flag.sock"]), env)
    assert cfg.socket == "/flag.sock"  # flag beats env
    assert cfg.actors_root == "/env/root" and cfg.max_actors == 3
    assert cfg.runsc_global_flags == ("--network=none", "--ignore-cgroups")
    assert cfg.node.spec_dirs == ("/a", "/b") and cfg.shutdown_grace == 2.5
    cfg = daemon_config.from_args(_parse([
        "--actors-root", "/r", "--runsc-global-flag=--network=none",
        "--runsc-global-flag=--ignore-cgroups", "--spec-dir", "/x", "--spec-dir", "/y"]), {})
    assert cfg.runsc_global_flags == ("--network=none", "--ignore-cgroups")
    assert cfg.node.spec_dirs == ("/x", "/y")
    assert (cfg.socket, cfg.max_actors, cfg.listen) == ("/run/ateom/ateom.sock", 1, "")


def test_every_flag_has_an_env_twin() -> None:
    # Settings other parts of ateom read too keep those parts' names.
    shared = {"--spec-dir": "ATEOM_CDI_SPEC_DIRS", "--driver-root": "ATEOM_NVIDIA_DRIVER_ROOT",
              "--toolkit-dir": "ATEOM_NVIDIA_TOOLKIT_DIR",
              "--runsc-global-flag": "ATEOM_RUNSC_GLOBAL_FLAGS"}
    for flag, env, *_ in daemon_config._FLAGS:
        assert env == shared.get(flag, "ATEOM_" + flag[2:].upper().replace("-", "_"))
    assert set(shared) <= {f for f, *_ in daemon_config._FLAGS}


def test_shared_settings_have_one_name_and_one_default() -> None:
    from ateom import settings
    from ateom.cdi import registry
    from ateom.inject import options

    env = {"ATEOM_ACTORS_ROOT": "/r", "ATEOM_CDI_SPEC_DIRS": "/s1::/s2",
           "ATEOM_NVIDIA_DRIVER_ROOT": "/drv", "ATEOM_NVIDIA_TOOLKIT_DIR": "/tk"}
    cfg = daemon_config.from_args(_parse([]), env)
    assert cfg.node.spec_dirs == registry.default_spec_dirs(env) == ("/s1", "/s2")
    assert (cfg.node.driver_root, cfg.node.toolkit_dir) == ("/drv", "/tk")
    # The daemon's old spellings are gone, not silently read.
    cfg = daemon_config.from_args(_parse([]), {"ATEOM_ACTORS_ROOT": "/r",
                                                "ATEOM_SPEC_DIRS": "/old",
                                                "ATEOM_DRIVER_ROOT": "/old"})
    assert cfg.node.spec_dirs == settings.DEFAULT_SPEC_DIRS == registry.default_spec_dirs({})
    assert cfg.node.driver_root == settings.DEFAULT_DRIVER_ROOT == daemon_config.DEFAULT_DRIVER_ROOT
    assert cfg.node.toolkit_dir == settings.DEFAULT_TOOLKIT_DIR == daemon_config.DEFAULT_TOOLKIT_DIR
    assert options.gvisor_nvidia_options(cfg.node).library_dirs == ("/usr/local/nvidia/lib64",)
    cfg = daemon_config.from_args(
        _parse(["--driver-root", "/flag-drv", "--toolkit-dir", "/flag-tk"]), env)
    assert (cfg.node.driver_root, cfg.node.toolkit_dir) == ("/flag-drv", "/flag-tk")


@pytest.mark.parametrize("argv, env", [
    ([], {}), (["--actors-root", "rel"], {}), (["--actors-root", "/r", "--max-actors", "0"], {}),
    (["--actors-root", "/r"], {"ATEOM_MAX_ACTORS": "many"}),
    (["--actors-root", "/r", "--log-level", "nonsense"], {}),
    (["--actors-root", "/r"], {"ATEOM_LOG_LEVEL": "verbose"}),
    (["--actors-root", "/r", "--runsc-timeout", "0"], {}),
    (["--actors-root", "/r", "--socket", ""], {}),
    (["--actors-root", "/r", "--pause-container", "../x"], {}),
    (["--actors-root", "/r", "--pause-container", ""], {}),
])
def test_bad_config(argv: list[str], env: dict[str, str]) -> None:
    assert code(daemon_config.from_args, _parse(argv), env) is ErrorCode.INVALID_ARGUMENT


# -- started as Substrate's controller starts a worker ------------------------

POD = "7d1c2b3a-0000-4000-8000-00000000abcd"
# Exactly the arguments Substrate's WorkerPool controller gives the worker container
# (its buildDeploymentApplyConfig), with $(POD_UID) expanded as the kubelet does.
CONTROLLER_ARGS = [
    f"--pod-uid={POD}",
    "--atunnel-listen-address=:443",
    "--atunnel-connect-listen-address=:8443",
    "--atunnel-credential-bundle=/run/podidentity.podcert.ate.dev/credential-bundle.pem",
    "--atunnel-trust-bundle=/run/podidentity.podcert.ate.dev/trust-bundle.pem",
    "--atunnel-client-identity=spiffe://cluster.local/ns/ate-system/sa/atenet-router",
    "--atunnel-egress-listen-address=0.0.0.0:15001",
    "--atunnel-egress-trust-bundle=/run/servicedns.podcert.ate.dev/trust-bundle.pem",
]


def test_the_controllers_arguments_make_a_worker_on_the_shared_base_dir() -> None:
    cfg = daemon_config.from_args(_parse(CONTROLLER_ARGS), {"POD_UID": POD})
    assert cfg.pod_uid == POD
    assert cfg.socket == f"/var/lib/ateom-gvisor/ateoms/{POD}/ateom.sock"
    assert cfg.actors_root == "/var/lib/ateom-gvisor/actors"
    assert cfg.readiness_listen_address == "0.0.0.0:8080"
    assert cfg.atunnel.listen_address == ":443"
    assert cfg.atunnel.egress_trust_bundle.endswith("servicedns.podcert.ate.dev/trust-bundle.pem")
    assert cfg.accepted_not_served == ()  # every flag the controller gives is served
    assert cfg.egress_port == 15001 and cfg.atunnel.problems() == []


def test_pod_uid_from_the_environment_alone_and_the_operators_paths_win() -> None:
    cfg = daemon_config.from_args(_parse([]), {"POD_UID": POD, "ATEOM_BASE_DIR": "/b"})
    assert (cfg.socket, cfg.actors_root) == (f"/b/ateoms/{POD}/ateom.sock", "/b/actors")
    cfg = daemon_config.from_args(_parse(["--socket", "/s.sock", "--pod-uid", POD,
                                          "--readiness-listen-address=127.0.0.1:9"]),
                                  {"ATEOM_ACTORS_ROOT": "/r"})
    assert (cfg.socket, cfg.actors_root, cfg.readiness_listen_address) == (
        "/s.sock", "/r", "127.0.0.1:9")
    # Without a pod uid: today's standalone daemon, nothing served on 8080.
    cfg = daemon_config.from_args(_parse(["--actors-root", "/r"]), {})
    assert (cfg.pod_uid, cfg.readiness_listen_address, cfg.accepted_not_served) == ("", "", ())


def test_substrates_other_worker_flags_are_taken() -> None:
    cfg = daemon_config.from_args(_parse([
        *CONTROLLER_ARGS, "--log-level=warn", "--max-actors=40",
        "--otlp-relay-socket=/run/otlp.sock", "--readiness-listen-address=0.0.0.0:8081",
        "--atunnel-broker-identity=spiffe://cluster.local/ns/ate-system/sa/atelet"]), {})
    assert (cfg.log_level, cfg.max_actors) == ("warning", 40)
    assert "--otlp-relay-socket=/run/otlp.sock" in cfg.accepted_not_served
    assert cfg.readiness_listen_address == "0.0.0.0:8081"


@pytest.mark.parametrize(("argv", "env", "said"), [
    (["--pod-uid=../x"], {}, "--pod-uid '../x'"),
    ([], {"POD_UID": "a/b"}, "$POD_UID 'a/b'"),
    (["--pod-uid", POD, "--base-dir", "rel"], {}, "--base-dir 'rel'"),
    ([], {}, "--actors-root (or $ATEOM_ACTORS_ROOT) is required, unless --pod-uid"),
])
def test_a_bad_worker_setting_is_refused_naming_it(argv: list[str], env: dict[str, str],
                                                   said: str) -> None:
    with pytest.raises(AteomError) as err:
        daemon_config.from_args(_parse(argv), env)
    assert err.value.code is ErrorCode.INVALID_ARGUMENT
    assert str(err.value).startswith(said), str(err.value)
