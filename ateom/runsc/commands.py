"""runsc command lines (pure) and running them (shell).

Every call is ``runsc -log-format json --alsologtostderr -root <actor state
dir> [-log FILE] [global flags...] <subcommand> <its flags> <container>``.
GPU flags (`--nvproxy` and its driver options) go on every call for a GPU
sandbox (`RunscTarget.gpu`): nvproxy must be on when the sandbox is created
or restored, and runsc decides per call from its flags how to treat the spec
it reads (a sub-container's create or restore without them reads its NVIDIA
devices as a non-GPU sandbox would).
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import structlog

from ateom.errors import AteomError, ErrorCode
from ateom.process.exits import alive as process_alive
from ateom.process.reaper import Completed, Reaper
from ateom.runsc.probe import RunscInfo
from ateom.settings import NvproxyOptions

log = structlog.get_logger("ateom.runsc")

LOG_TAIL_BYTES = 2048

# The fd table runsc is started with (`Reaper.spawn(fd_table=)`). The sandbox
# runsc boots moves its stdio to fds 253-255 (release-2026) or 256-258
# (0.0~20240729) once its Go runtime runs threads; a table that small (64, as
# the daemon's children get) grows then, waiting for an RCU grace period, on
# every create and restore (docs/performance.md, "The turn").
# Started with 512 entries, runsc forks its sandbox and gofer with 512 too.
FD_TABLE = 512

# runsc's control calls (state, list, kill, delete, events --stats) answer in
# milliseconds. Each reads the actor's state files and most ask its sandbox over
# the control socket; a sandbox whose processes are stopped (SIGSTOP, a frozen
# cgroup, a wedged sentry) never answers, and runsc then waits for good: on
# release-20260817 every one of them hangs on it, `delete --force` included
# (docs/operations.md, "What ateom promises under faults"). So each is bounded
# by this, not by --runsc-timeout (which is for boots and saves); a sandbox that
# does not answer in time is killed by pid (`ateom.daemon.sandbox.teardown`).
CONTROL_TIMEOUT = 3.0


@dataclass(frozen=True, slots=True)
class RunscTarget:
    """One actor's view of runsc: which binary, which state root, which flags."""

    info: RunscInfo
    root: str  # the actor's -root directory
    global_flags: tuple[str, ...] = ()
    nvproxy: NvproxyOptions = field(default_factory=NvproxyOptions)
    gpu: bool = False  # a GPU sandbox: the nvproxy flags on every call


# runsc names a sandbox's control socket after its root container's id in the
# abstract socket namespace ("runsc-sandbox.<id>"), which is shared by the whole
# network namespace, not scoped by -root: two actors whose sandbox roots are
# both "_pause" collide ("address already in use"), and so does a new actor
# whose predecessor's sandbox is still exiting. So the root's runsc id carries
# the actor uid. Abstract socket names are capped at 107 bytes, hence the
# hash for long uids.
_MAX_ROOT_ID = 64


def sandbox_root_id(uid: str, pause: str) -> str:
    """The runsc container id of an actor's sandbox root (pure)."""
    plain = f"{uid}{pause}" if pause.startswith("_") else f"{uid}_{pause}"
    if len(plain) <= _MAX_ROOT_ID:
        return plain
    digest = hashlib.sha256(uid.encode()).hexdigest()[:12]
    keep = _MAX_ROOT_ID - len(pause) - len(digest) - 2
    return f"{uid[:keep]}-{digest}_{pause.lstrip('_')}"


def _base(t: RunscTarget, log_file: str | None) -> list[str]:
    argv = [t.info.path, "-log-format", "json", "--alsologtostderr", "-root", t.root]
    if log_file:
        argv += ["-log", log_file]
    argv += list(t.global_flags)
    if t.gpu:
        argv += nvproxy_flags(t)
    return argv


def nvproxy_flags(t: RunscTarget) -> list[str]:
    """The GPU flags for a sandbox with GPUs; options only when set by the operator."""
    flags = ["--nvproxy"]
    if t.nvproxy.driver_version:
        flags.append(f"--nvproxy-driver-version={t.nvproxy.driver_version}")
    if t.nvproxy.capabilities:
        flags.append(f"--nvproxy-allowed-driver-capabilities={t.nvproxy.capabilities}")
    return flags


def global_flag(flags: Sequence[str], name: str, *, boolean: bool = False) -> str | None:
    """The value runsc reads for its global flag `name` from `flags`, the last one
    winning as in Go's flag package: ``-name=v`` or ``--name=v``; ``-name v`` for a
    valued flag; a bare ``-name`` is "true" for a boolean one. None when absent (pure)."""
    value = None
    for i, token in enumerate(flags):
        key, eq, given = token.lstrip("-").partition("=")
        if not token.startswith("-") or key != name:
            continue
        if eq:
            value = given
        elif boolean:
            value = "true"
        elif i + 1 < len(flags):
            value = flags[i + 1]
    return value


def ignores_cgroups(flags: Sequence[str]) -> bool:
    """Whether runsc runs with ``--ignore-cgroups`` (pure)."""
    return global_flag(flags, "ignore-cgroups", boolean=True) in ("true", "1", "t", "T",
                                                                  "TRUE")


def _flag_name(token: str) -> str:
    return token.lstrip("-").partition("=")[0]


def overlay_flags(default: str, global_flags: Sequence[str],
                  filestore_dir: str) -> tuple[str, ...]:
    """The ``--overlay2`` ateom gives one actor's runsc calls (pure).

    runsc's default (``root:self``, since 2023) keeps the rootfs overlay's upper layer
    in a filestore file inside the rootfs, that is in the node agent's bundle, and
    `runsc delete` removes it there after the sandbox has gone: after a Checkpoint's
    answer, when the bundle is the node agent's again (it moves the snapshot away and
    recreates the dirs at once). ``root:dir=<filestore_dir>`` keeps the same overlay,
    its file in ateom's own run dir. `default` is the runsc's (`RunscInfo.
    overlay_default`); an operator's own ``--overlay2`` (global flags) stands as given
    (`overlay_problem` refuses ``self``), and a build without a ``self`` default
    (Debian's 2022 one: ``none``) gets nothing."""
    if any(_flag_name(f) == "overlay2" for f in global_flags):
        return ()
    mount, _, medium = default.partition(":")
    if medium != "self":
        return ()
    return (f"--overlay2={mount}:dir={filestore_dir}",)


def overlay_problem(global_flags: Sequence[str]) -> str:
    """Why an operator's ``--overlay2`` cannot be used ("" when it can; pure): the
    ``self`` medium writes into the node agent's bundle after ateom has answered."""
    for i, token in enumerate(global_flags):
        if _flag_name(token) != "overlay2":
            continue
        value = token.partition("=")[2] if "=" in token else (
            global_flags[i + 1] if i + 1 < len(global_flags) else "")
        if value.partition(",")[0].partition(":")[2] == "self":
            return (f"--runsc-global-flag {token}: the 'self' medium keeps each rootfs"
                    " overlay's file in the node agent's bundle, which runsc deletes after"
                    " the actor has gone, when the bundle is the node agent's again; leave"
                    " --overlay2 to ateom (root:dir=<run dir>/filestore/<uid>) or use"
                    " 'memory', 'dir=…' or 'none'")
    return ""


def create_argv(
    t: RunscTarget, name: str, bundle: str, pid_file: str, *, log_file: str | None
) -> list[str]:
    return [*_base(t, log_file), "create", "-bundle", bundle, "-pid-file", pid_file, name]


def start_argv(t: RunscTarget, name: str, *, log_file: str | None = None) -> list[str]:
    return [*_base(t, log_file), "start", name]


def checkpoint_argv(
    t: RunscTarget, name: str, image_path: str, *, log_file: str | None = None,
    flags: Sequence[str] = (),
) -> list[str]:
    """`flags`: the checkpoint command's own extras (GPU: --cuda-checkpoint-path=...).

    Options chosen from benchmarks/bench_turn_options.py (docs/performance.md):
    ``-exclude-committed-zero-pages`` where the runsc has it (a smaller image or
    the same, never slower there); not ``-direct`` (slower to write, and the
    restore then reads from disk) nor ``-compression`` (twice the time for no
    gain on an actor's memory, and a compressed image cannot restore in the
    background)."""
    argv = _base(t, log_file)
    # Newer runsc refuses to save a sandbox with connected sockets unless told.
    if t.info.supports("allow-connected-on-save"):
        argv.append("-allow-connected-on-save")
    options = (["-exclude-committed-zero-pages"]
               if t.info.supports("checkpoint:exclude-committed-zero-pages") else [])
    return [*argv, "checkpoint", *options, *flags, "-image-path", image_path, name]


def restore_argv(
    t: RunscTarget, name: str, bundle: str, image_path: str, pid_file: str, *,
    log_file: str | None,
) -> list[str]:
    argv = [*_base(t, log_file), "restore", "-bundle", bundle, "-image-path", image_path,
            "-pid-file", pid_file]
    if t.info.supports("restore:background"):
        argv.append("-background")
    return [*argv, "-detach", name]


def pause_argv(t: RunscTarget, name: str) -> list[str]:
    return [*_base(t, None), "pause", name]


def resume_argv(t: RunscTarget, name: str) -> list[str]:
    return [*_base(t, None), "resume", name]


def kill_argv(t: RunscTarget, name: str, sig: str) -> list[str]:
    return [*_base(t, None), "kill", name, sig]


def state_argv(t: RunscTarget, name: str) -> list[str]:
    return [*_base(t, None), "state", name]


def delete_argv(t: RunscTarget, name: str) -> list[str]:
    return [*_base(t, None), "delete", "-force", name]


def list_argv(t: RunscTarget) -> list[str]:
    return [*_base(t, None), "list", "-quiet"]


def events_stats_argv(t: RunscTarget, name: str) -> list[str]:
    return [*_base(t, None), "events", "--stats", name]


def read_tail(path: str, offset: int, limit: int = LOG_TAIL_BYTES) -> str:
    """Up to `limit` bytes written to `path` since `offset` (reads a file)."""
    try:
        with open(path, "rb") as f:
            size = f.seek(0, os.SEEK_END)
            start = max(offset, size - limit)
            f.seek(start)
            data = f.read(limit)
    except OSError:
        return ""
    return data.decode("utf-8", errors="replace")


def _size(path: str) -> int:
    try:
        return os.stat(path).st_size
    except OSError:
        return 0


def parse_json_lines(output: str) -> list[dict[str, object]]:
    """The JSON objects among runsc's output lines (it mixes logs in; pure)."""
    found = []
    for line in output.splitlines():
        line = line.strip()
        if line.startswith("{"):
            try:
                value = json.loads(line)
            except ValueError:
                continue
            if isinstance(value, dict):
                found.append(value)
    return found


def failure_reason(log_text: str, limit: int = 1024) -> str:
    """runsc's own one-line reason for failing, from its log (pure).

    runsc ends a failed command with a fatal message (a JSON ``msg`` with
    -log-format json, or a ``FATAL ERROR:`` line on stderr), often followed
    by a Go stack trace that fills the log's tail; the reason is the part
    before the trace.
    """
    reason = ""
    for line in log_text.splitlines():
        line = line.strip()
        if line.startswith("{"):
            try:
                msg = json.loads(line).get("msg", "")
            except (ValueError, AttributeError):
                continue
            if isinstance(msg, str) and msg:
                reason = msg
        elif "FATAL ERROR:" in line:
            reason = line.split("FATAL ERROR:", 1)[1]
    reason = reason.split("\ngoroutine ", 1)[0].strip()
    return reason[:limit]


class RunscError(AteomError):
    """A runsc command failed; carries runsc's reason and the tail of its own log."""

    code = ErrorCode.INTERNAL

    def __init__(self, command: str, container: str, returncode: int, tail: str,
                 reason: str = "", *, timed_out: bool = False) -> None:
        self.command = command
        self.container = container
        self.returncode = returncode
        self.tail = tail
        self.timed_out = timed_out
        self.reason = reason or failure_reason(tail)
        if timed_out:
            self.reason = f"killed after its time limit ({self.reason or 'no reason logged'})"
        why = f": {self.reason}" if self.reason else ""
        super().__init__(
            f"runsc {command} {container} failed (exit {returncode}){why}\n"
            f"its log ends:\n{tail}"
        )


class RunscTimeout(RunscError):
    """A runsc command did not finish within its bound and was killed. The message
    names the call, the actor and the bound: a control call that times out is a
    sandbox that does not answer."""

    def __init__(self, command: str, container: str, actor: str, limit: float,
                 tail: str = "") -> None:
        super().__init__(command, container, -9, tail, timed_out=True)
        self.actor = actor
        self.limit = limit
        self.message = (f"runsc {command} {container} of actor {actor} did not answer within"
                        f" {limit:g} s and was killed")

    def __str__(self) -> str:
        return self.message


class Runsc:
    """Runs runsc for one actor: argv from the pure builders, stdio to log files.
    Every call is bounded: boots and saves by `timeout` (--runsc-timeout, or the
    caller's), control calls by `CONTROL_TIMEOUT`; one that overruns is killed
    and raised as `RunscTimeout`."""

    def __init__(self, target: RunscTarget, reaper: Reaper, log_dir: str, timeout: float,
                 log_names: dict[str, str] | None = None, *, actor: str = "",
                 control_timeout: float = CONTROL_TIMEOUT) -> None:
        self.target = target
        self.reaper = reaper
        self.log_dir = log_dir
        self.timeout = timeout
        self.control_timeout = control_timeout
        # For messages: whose sandbox this is (the state root's name by default).
        self.actor = actor or os.path.basename(target.root.rstrip("/"))
        # runsc id -> the file name stem of its logs (the sandbox root's logs
        # are named after its bundle, e.g. "_pause", not its uid-carrying id).
        self.log_names = dict(log_names or {})

    def stdio_log(self, name: str) -> str:
        """Where runsc and the container's own stdout/stderr go (O_APPEND)."""
        return os.path.join(self.log_dir, f"{self.log_names.get(name, name)}.log")

    def runsc_log(self, name: str) -> str:
        """runsc's -log for commands on container `name`."""
        return os.path.join(self.log_dir, f"{self.log_names.get(name, name)}.runsc.log")

    def _timed_out(self, command: str, name: str, limit: float, tail: str = "") -> RunscTimeout:
        log.warning("runsc_timed_out", command=command, container=name, actor=self.actor,
                    limit_s=limit)
        return RunscTimeout(command, name, self.actor, limit, tail)

    def _run(self, command: str, name: str, argv: Sequence[str], *, check: bool,
             timeout: float | None = None,
             meanwhile: Callable[[], None] | None = None) -> Completed:
        self._ensure_log_dir()
        stdio = self.stdio_log(name)
        own_log = self.runsc_log(name)
        offsets = (_size(stdio), _size(own_log))
        limit = timeout or self.timeout
        done = self.reaper.run(argv, log_path=stdio, timeout=limit,
                               meanwhile=meanwhile, fd_table=FD_TABLE)
        log.debug("runsc", command=command, container=name, returncode=done.returncode)
        if done.timed_out:
            tail = read_tail(own_log, offsets[1]) or read_tail(stdio, offsets[0])
            raise self._timed_out(command, name, limit, tail)
        if check and done.returncode != 0:
            # The command's own -log holds its error; stderr (alsologtostderr)
            # in the stdio log is the fallback for commands without -log.
            tail = read_tail(own_log, offsets[1]) or read_tail(stdio, offsets[0])
            reason = (failure_reason(read_tail(own_log, offsets[1], 1 << 20))
                      or failure_reason(read_tail(stdio, offsets[0], 1 << 20)))
            raise RunscError(command, name, done.returncode, tail, reason)
        return done

    def _ensure_log_dir(self) -> None:
        # An operator freeing space (or the log janitor) may have removed it
        # while the actor lived; a teardown must still be able to run runsc.
        os.makedirs(self.log_dir, mode=0o750, exist_ok=True)

    def _capture(self, command: str, name: str, argv: Sequence[str]) -> Completed:
        """stdout only: runsc's logs (stderr) go to the actor's runsc command log.
        A control call: bounded by `control_timeout`."""
        self._ensure_log_dir()
        done = self.reaper.run_capture(argv, timeout=self.control_timeout,
                                       stderr_path=os.path.join(self.log_dir, "runsc.log"))
        if done.timed_out:
            raise self._timed_out(command, name, self.control_timeout)
        return done

    def create(self, name: str, bundle: str, pid_file: str, *,
               meanwhile: Callable[[], None] | None = None) -> None:
        argv = create_argv(self.target, name, bundle, pid_file, log_file=self.runsc_log(name))
        self._run("create", name, argv, check=True, meanwhile=meanwhile)

    def start(self, name: str) -> None:
        self._run("start", name, start_argv(self.target, name, log_file=self.runsc_log(name)),
                  check=True)

    def checkpoint(self, name: str, image_path: str, *, flags: Sequence[str] = (),
                   timeout: float | None = None,
                   meanwhile: Callable[[], None] | None = None) -> None:
        argv = checkpoint_argv(self.target, name, image_path, log_file=self.runsc_log(name),
                               flags=flags)
        self._run("checkpoint", name, argv, check=True, timeout=timeout, meanwhile=meanwhile)

    def restore(self, name: str, bundle: str, image_path: str, pid_file: str, *,
                meanwhile: Callable[[], None] | None = None) -> None:
        argv = restore_argv(self.target, name, bundle, image_path, pid_file,
                            log_file=self.runsc_log(name))
        self._run("restore", name, argv, check=True, meanwhile=meanwhile)

    def pause(self, name: str) -> None:
        """Freeze the sandbox (`name`: its root) for a capture beside it; bounded as a
        control call."""
        self._run("pause", name, pause_argv(self.target, name), check=True,
                  timeout=self.control_timeout)

    def resume(self, name: str) -> None:
        self._run("resume", name, resume_argv(self.target, name), check=True,
                  timeout=self.control_timeout)

    def kill(self, name: str, sig: str, *, timeout: float | None = None) -> bool:
        """Signal the container through runsc (bounded by `timeout`, else
        `control_timeout`); whether runsc did. `RunscTimeout` when it did not answer."""
        done = self._run(f"kill {sig}", name, kill_argv(self.target, name, sig), check=False,
                         timeout=min(timeout or self.control_timeout, self.control_timeout))
        return done.returncode == 0

    def delete(self, name: str) -> bool:
        done = self._run("delete", name, delete_argv(self.target, name), check=False,
                         timeout=self.control_timeout)
        return done.returncode == 0

    def list(self) -> list[str] | None:
        """Container ids runsc knows under this actor's root ([] when the root is gone).

        None when runsc could not say: callers must then assume every container
        exists. `RunscTimeout` when it did not answer (a sandbox that does not).
        """
        if not os.path.isdir(self.target.root):
            return []
        done = self._capture("list", "", list_argv(self.target))
        if done.returncode != 0:
            log.warning("runsc_list_failed", root=self.target.root, returncode=done.returncode)
            return None
        return [line.strip() for line in done.output.splitlines()
                if line.strip() and not line.lstrip().startswith("{")]

    def state(self, name: str) -> dict[str, object]:
        """``runsc state`` of the container as JSON ({} when runsc could not say;
        `RunscTimeout` when it did not answer)."""
        done = self._capture("state", name, state_argv(self.target, name))
        if done.returncode != 0:
            return {}
        start = done.output.find("{\n")
        if start < 0:
            start = done.output.find("{")
        try:
            state = json.loads(done.output[start:]) if start >= 0 else {}
        except ValueError:
            found = [obj for obj in parse_json_lines(done.output) if "status" in obj]
            return found[0] if found else {}
        return state if isinstance(state, dict) else {}

    def status(self, name: str) -> str:
        """The container's status ("created", "running", "paused", "stopped"), or ""
        if unknown."""
        return str(self.state(name).get("status", ""))

    def not_running(self, name: str) -> str:
        """Why the container's sandbox does not really run ("" when it does): runsc
        must say "running" (not "paused", not "stopped") and the pid it names be
        alive. runsc's word alone is not enough: after a save (and a failed one
        that killed the sentry, as 0.0~20240729's does) ``runsc state`` still says
        "running", with a dead pid (reads /proc). `RunscTimeout` when runsc did
        not answer."""
        state = self.state(name)
        status, pid = str(state.get("status") or "unknown"), state.get("pid")
        if status != "running":
            return f"is {status}"
        if not (isinstance(pid, int) and pid > 0 and process_alive(pid)):
            return "has no live process (runsc state still says running)"
        return ""

    def stats(self, name: str) -> dict[str, object]:
        done = self._capture("events --stats", name, events_stats_argv(self.target, name))
        if done.returncode != 0:
            tail = read_tail(os.path.join(self.log_dir, "runsc.log"), 0)
            raise RunscError("events --stats", name, done.returncode, tail)
        for obj in parse_json_lines(done.output):
            if obj.get("type") == "stats":
                data = obj.get("data")
                return data if isinstance(data, dict) else {}
        raise RunscError("events --stats", name, 0, "no stats object in output")
