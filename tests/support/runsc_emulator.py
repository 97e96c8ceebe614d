"""runsc as one gVisor release behaves, in front of a real runsc (executable).

``python -m tests.support.runsc_emulator CONFIG ARGS...`` is what the
``runsc`` script `install_runsc` writes runs. Per call:

1. `interpret` answers what the release only prints (``--version``, ``help``,
   ``flags``, usage errors, ``nvproxy list-supported-drivers``) byte for byte;
2. otherwise the command runs through the real runsc (Debian's, probed:
   `runsc_real`) with the flags that build lacks left out (`real_argv`), stdio
   inherited (the sandbox keeps them);
3. around that, what the release does that the real build cannot
   (``create``/``run``/``restore``: nvproxy decision and driver check;
   ``checkpoint``: cuda-checkpoint inside the sandbox, the live-client panic,
   GPU identities; ``restore``: driver-changed refusal, GPU remap);
4. one JSON line per call goes to the record file (`RunscCall`).

A sandbox whose root spec lists NVIDIA device nodes runs on the real build's
own nvproxy where it has one, pinned to the newest driver it knows (there is no
GPU here; the emulator applies the emulated release's driver rules itself).
Where the real build cannot do what the release would (a multi-container
restore on Debian's 2022 build), the emulator says so on stderr, starting
"runsc emulator (tests.support):", and exits 128.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import traceback
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

from tests.support import runsc_emu_cuda as cuda
from tests.support import runsc_emu_gpu as gpu
from tests.support import runsc_emu_save as save
from tests.support import runsc_emu_state as st
from tests.support.runsc_emu_cli import EXIT_FAILURE, Answer, Invocation, interpret, real_argv
from tests.support.runsc_real import newest_driver, profile_from_json, restores_subcontainers
from tests.support.runsc_release import FlagParse, Release, load_release

REFUSAL = "runsc emulator (tests.support): "
_FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT,
              signal.SIGUSR1, signal.SIGUSR2)
# Flags the emulator's own helper calls (exec, ps, state) leave out: their
# logs are not the command's.
_HELPER_DROPS = ("log", "alsologtostderr", "debug", "debug-log")
# The emulated release's nvproxy flags never reach a real build that runs the
# sandbox on its own nvproxy: the emulator pins that build's driver instead.
_NVPROXY_FLAGS = ("nvproxy", "nvproxy-driver-version", "nvproxy-allow-unsupported-driver")


class Emulator:
    """One call of the emulated runsc."""

    def __init__(self, config: st.EmuConfig) -> None:
        self.config = config
        self.release = load_release(config.release_file)
        self._real: Release | None = None
        self.record: dict[str, Any] = {
            "release": self.release.tag, "argv": [], "command": None, "container": None,
            "ran": [], "stripped": [], "nvproxy": None, "notes": [], "exit_code": None,
        }

    @property
    def real(self) -> Release:
        """The probed real runsc, read when a command runs (answers do not need it)."""
        if self._real is None:
            with open(self.config.real_profile, "rb") as f:
                self._real = profile_from_json(json.load(f))
        return self._real

    @property
    def real_restores_subcontainers(self) -> bool:
        return restores_subcontainers(self.real)

    def wants_real_nvproxy(self, spec: dict[str, Any], emulated_on: bool) -> bool:
        """Whether the real build runs a sandbox booting from `spec` on its nvproxy."""
        if "nvproxy" not in self.real.flags or newest_driver(self.real) is None:
            return False
        return emulated_on or gpu.lists_nvidia_devices(spec)

    # --- running the real runsc ---------------------------------------------

    def _real_nvproxy(self, inv: Invocation) -> bool:
        if inv.command in ("create", "run", "restore") and inv.container:
            own = st.read_container_state(self.root(inv), inv.container)
            return bool(own and own.real_nvproxy)
        cid = inv.container if inv.command not in ("list", "help", "flags") else None
        own = st.read_container_state(self.root(inv), cid) if cid else None
        if own is None:
            return False
        head = st.read_container_state(self.root(inv), own.sandbox)
        return bool(head and head.real_nvproxy)

    def _argv(self, inv: Invocation, drop: Sequence[str] = ()) -> list[str]:
        pinned: list[str] = []
        if self._real_nvproxy(inv):
            drop = (*drop, *_NVPROXY_FLAGS)
            pinned = ["--nvproxy", f"--nvproxy-driver-version={newest_driver(self.real)}"]
        call = real_argv(inv, self.real, drop_global=drop)
        return [self.config.real_runsc, *pinned, *call.argv]

    def run_real(self, inv: Invocation) -> int:
        """Run `inv` through the real runsc, stdio inherited, signals forwarded."""
        argv = self._argv(inv)
        self.record["ran"].append(argv)
        child = subprocess.Popen(argv)
        saved = {s: signal.signal(s, lambda n, _f: child.send_signal(n)) for s in _FORWARDED}
        try:
            return child.wait()
        finally:
            for s, handler in saved.items():
                signal.signal(s, handler)

    def _helper(self, inv: Invocation, command: str, *args: str) -> list[str]:
        helper = Invocation(inv.global_flags, command, None, tuple(args))
        argv = self._argv(helper, _HELPER_DROPS)
        self.record["ran"].append(argv)
        return argv

    # Helper calls get pipes, never /dev/null: runsc exec chowns its stdio to
    # the sandbox user (nobody), which would take /dev/null from root.
    def _capture(self, inv: Invocation, command: str, *args: str) -> tuple[int, str]:
        done = subprocess.run(self._helper(inv, command, *args), input="",
                              capture_output=True, text=True, check=False)
        return done.returncode, done.stdout

    def start_exec(self, inv: Invocation) -> cuda.StartExec:
        def start(container: str, argv: Sequence[str]) -> subprocess.Popen[bytes]:
            child = subprocess.Popen(self._helper(inv, "exec", container, *argv),
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT)
            if child.stdin is not None:  # it reads nothing (the sentry gives it /dev/null)
                child.stdin.close()
                child.stdin = None
            return child
        return start

    # --- what runsc prints --------------------------------------------------

    def fail(self, inv: Invocation, msg: str) -> int:
        """util.Fatalf: the message on stderr and as a JSON line in -log; exit 128."""
        sys.stderr.write(msg + "\n")
        st.log_line(inv.global_flags.value("log"), "error", msg)
        self.record["notes"].append(msg)
        return EXIT_FAILURE

    def refuse(self, inv: Invocation, why: str) -> int:
        return self.fail(inv, REFUSAL + why)

    def warn(self, inv: Invocation, msg: str) -> None:
        """log.Warningf: to -log, and stderr with --alsologtostderr."""
        st.log_line(inv.global_flags.value("log"), "warning", msg)
        if inv.global_flags.is_true("alsologtostderr"):
            sys.stderr.write(msg + "\n")
        self.record["notes"].append("warning: " + msg)

    # --- commands -----------------------------------------------------------

    def run(self, argv: Sequence[str]) -> int:
        self.record["argv"] = list(argv)
        outcome = interpret(self.release, argv)
        if isinstance(outcome, Answer):
            sys.stdout.write(outcome.stdout)
            sys.stderr.write(outcome.stderr)
            self.record["notes"].append("answered from the release file")
            return outcome.exit_code
        self.record["command"], self.record["container"] = outcome.command, outcome.container
        self.record["stripped"] = list(real_argv(outcome, self.real).stripped)
        missing = outcome.command if outcome.command != "help" else (outcome.args or ("",))[0]
        if missing in self.release.top_level_commands - self.real.top_level_commands:
            return self.refuse(outcome, f"{self.release.tag}'s {missing!r} command is not "
                                f"emulated: the real runsc {self.real.tag} has no such command")
        handlers: dict[str, Callable[[Invocation], int]] = {
            "create": self._create, "run": self._create, "delete": self._delete,
            "checkpoint": partial(save.checkpoint, self), "restore": partial(save.restore, self)}
        return handlers.get(outcome.command, self.run_real)(outcome)

    def root(self, inv: Invocation) -> str:
        return os.path.abspath(inv.global_flags.value("root") or st.DEFAULT_ROOT)

    def _create(self, inv: Invocation) -> int:
        cid = inv.container
        spec = st.read_spec(inv.flag("bundle") or os.getcwd())
        if cid is None or spec is None:
            return self.run_real(inv)  # the real runsc reports the usage or spec error
        root, sandbox = self.root(inv), st.sandbox_of(spec, cid)
        if sandbox == cid:
            on, driver, error = self.sandbox_nvproxy(inv, spec)
            self.record["nvproxy"] = on
            if error:
                return self.fail(inv, f"creating container: {error}")
            real_nvproxy = self.wants_real_nvproxy(spec, on)
        else:
            parent = st.read_container_state(root, sandbox)
            on = bool(parent and parent.nvproxy)
            driver = parent.driver_version if parent else None
            real_nvproxy = bool(parent and parent.real_nvproxy)
        self.record["nvproxy"] = on
        st.write_container_state(root, st.ContainerState(
            cid, sandbox, inv.flag("bundle") or os.getcwd(), on,
            on and gpu.gpu_requested(self.release, spec, inv.global_flags), driver,
            real_nvproxy))
        code = self.run_real(inv)
        if code != 0 and inv.command == "create":
            st.remove_state(root, cid)
        return code

    def sandbox_nvproxy(self, inv: Invocation, spec: dict[str, Any]
                         ) -> tuple[bool, str | None, str]:
        """(nvproxy on, driver in use, error) for a sandbox booting from `spec`."""
        flags: FlagParse = inv.global_flags
        on, why, warning = gpu.nvproxy_decision(self.release, flags, spec)
        if warning:
            self.warn(inv, warning)
        if not on:
            return False, None, ""
        self.record["notes"].append(f"nvproxy: {why}")
        host = st.read_host_driver(self.config)
        error, warning = gpu.driver_check(self.release, flags, host)
        if warning:
            self.warn(inv, warning)
        return True, gpu.driver_in_use(flags, host), error

    def _delete(self, inv: Invocation) -> int:
        code = self.run_real(inv)
        root = self.root(inv)
        for cid in inv.args:
            st.remove_state(root, cid)
            st.remove_state(root, f"restore-{cid}")
        return code

    def kill_sandbox(self, inv: Invocation, sandbox: str) -> None:
        """The sentry's death: SIGKILL the sandbox process ``runsc state`` names."""
        code, out = self._capture(inv, "state", sandbox)
        try:
            pid = int(json.loads(out[out.index("{"):])["pid"]) if code == 0 else -1
        except (ValueError, KeyError):
            pid = -1
        if pid > 0:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                return
            deadline = time.monotonic() + 5
            while os.path.exists(f"/proc/{pid}") and time.monotonic() < deadline:
                time.sleep(0.02)
        self.record["notes"].append(f"sandbox {sandbox} killed")

    def gpu_clients(self, inv: Invocation, members: Sequence[st.ContainerState]
                     ) -> list[cuda.Proc]:
        """(container, pid) of every process of the sandbox's GPU containers."""
        procs: list[cuda.Proc] = []
        for member in members:
            if member.gpu:
                code, out = self._capture(inv, "ps", "-format", "json", member.container)
                if code == 0:
                    procs += [(member.container, pid) for pid in st.pids_from_ps(out)]
        return procs



def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args:
        sys.stderr.write("usage: python -m tests.support.runsc_emulator CONFIG [runsc args]\n")
        return 2
    emulator = Emulator(st.EmuConfig.read(args[0]))
    code = 125  # the emulator itself failed: its traceback is on stderr
    try:
        code = emulator.run(args[1:])
    except Exception:
        traceback.print_exc()
        emulator.record["notes"].append("emulator error: " + traceback.format_exc()[-2000:])
    finally:
        emulator.record["exit_code"] = code
        st.append_record(emulator.config.record, emulator.record)
        sys.stdout.flush()
    return code


if __name__ == "__main__":
    sys.exit(main())
