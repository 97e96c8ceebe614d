"""A fake runsc for argv and failure-path unit tests (never for behaviour of real runsc).

`install_fake_runsc(dir, ...)` writes an executable that answers `--version`,
`flags` and `help <cmd>` like runsc (with the flags you give it), records
every argv as a JSON line, keeps container state as files under -root, and
fails the calls listed in its fail file ("start app" fails `start app`),
writing a marker line to its -log and stderr first.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from pathlib import Path

SCRIPT = r'''#!{python}
import json, os, sys
RECORD = {record!r}
FAIL = {fail!r}
VERSION = {version!r}
GLOBAL_FLAGS = {global_flags!r}
RESTORE_FLAGS = {restore_flags!r}
CHECKPOINT_FLAGS = {checkpoint_flags!r}
TERM_STOPS = {term_stops!r}
argv = sys.argv[1:]
with open(RECORD, "a") as f:
    f.write(json.dumps(argv) + "\n")
if argv[:1] == ["--version"]:
    print("runsc version " + VERSION + "\nspec: 1.0.2")
    sys.exit(0)
if argv[:1] == ["flags"]:
    for flag in ["root", "log", "log-format", "alsologtostderr", "network", *GLOBAL_FLAGS]:
        print("  -" + flag + "\n    \tdoc")
    sys.exit(0)
if argv[:1] == ["help"]:
    flags = {{"restore": ["bundle", "image-path", "pid-file", "detach", *RESTORE_FLAGS],
              "create": ["bundle", "pid-file"],
              "checkpoint": ["image-path", *CHECKPOINT_FLAGS]}}
    for flag in flags.get(argv[1], []):
        print("  -" + flag + " string\n    \tdoc")
    sys.exit(0)
root = log = None
i = 0
while i < len(argv) and argv[i].startswith("-"):
    if argv[i] in ("-root", "-log", "-log-format"):
        if argv[i] == "-root": root = argv[i + 1]
        if argv[i] == "-log": log = argv[i + 1]
        i += 2
    else:
        i += 1
cmd, rest = argv[i], argv[i + 1:]
name = [a for a in rest if not a.startswith("-")]
opts = dict(zip(rest[::1], rest[1::1]))
if cmd == "list":
    target = ""
elif cmd == "kill":
    target = rest[0]
else:
    target = name[-1]
key = (cmd + " " + target).strip()
SLOW = FAIL.replace("fail.txt", "slow.txt")
if os.path.exists(SLOW) and key in open(SLOW).read().split("\n"):
    import time
    time.sleep(0.5)
# A gate: each call listed ("<call>\t<path>") waits until <path> exists (30 s at most).
HOLD = FAIL.replace("fail.txt", "hold.txt")
if os.path.exists(HOLD):
    import time
    for line in open(HOLD).read().split("\n"):
        if line.split("\t")[0] == key:
            deadline = time.monotonic() + 30
            while not os.path.exists(line.split("\t")[1]) and time.monotonic() < deadline:
                time.sleep(0.01)
# A rendezvous: each call listed waits until every listed call has started, so
# the calls finish only if whoever runs them lets them run at once (within the
# time given, else it fails, naming the calls it never saw start).
MEET = FAIL.replace("fail.txt", "meet.txt")
if os.path.exists(MEET) and key in open(MEET).read().split("\n"):
    import time
    meet = [k for k in open(MEET).read().split("\n") if k and not k.startswith("within ")]
    within = float(open(MEET).read().split("\n")[0].split()[1])
    mark = lambda k: MEET + "." + k.replace(" ", "_")
    open(mark(key), "w").close()
    deadline = time.monotonic() + within
    while not all(os.path.exists(mark(k)) for k in meet):
        if time.monotonic() > deadline:
            missing = [k for k in meet if not os.path.exists(mark(k))]
            print("fake runsc: " + key + " waited %g s for " % within + ", ".join(missing)
                  + " to start beside it", file=sys.stderr)
            sys.exit(1)
        time.sleep(0.01)
fails = open(FAIL).read().split("\n") if os.path.exists(FAIL) else []
if key in fails:
    msg = "fake runsc: " + key + " failed: boom marker"
    if log:
        with open(log, "a") as f: f.write("x" * 3000 + "\n" + msg + "\n")
    print(msg, file=sys.stderr)
    sys.exit(1)
state = lambda n: os.path.join(root, n + ".state")
os.makedirs(root, exist_ok=True)
def put(n, s):
    with open(state(n), "w") as f: f.write(s)
def get(n):
    try: return open(state(n)).read()
    except FileNotFoundError: return ""
if cmd in ("create", "restore"):
    if get(target):
        print("container already exists", file=sys.stderr); sys.exit(1)
    put(target, "created" if cmd == "create" else "running")
    # The sandbox's pid: a process alive while the test runs (the caller's), as a
    # real sandbox's is (ateom waits on it after a failed save).
    with open(opts["-pid-file"], "w") as f: f.write(str(os.getppid()))
    if cmd == "restore":
        pass
elif cmd == "start":
    put(target, "running")
elif cmd == "kill":
    if not get(target): sys.exit(1)
    if rest[1] == "KILL" or (rest[1] == "TERM" and TERM_STOPS):
        put(target, "stopped")
elif cmd == "delete":
    if get(target): os.remove(state(target))
elif cmd == "list":
    for n in sorted(os.listdir(root)):
        if n.endswith(".state"): print(n[:-6])
elif cmd == "state":
    s = get(target)
    if not s: sys.exit(1)
    # A live pid, as runsc names its sandbox's: the caller's (ateom checks it is alive).
    print(json.dumps({{"id": target, "status": s, "pid": os.getppid()}}, indent=2))
elif cmd == "checkpoint":
    image = opts["-image-path"]
    os.makedirs(os.path.join(image, "sub"), exist_ok=True)
    open(os.path.join(image, "checkpoint.img"), "w").write("img")
    open(os.path.join(image, "sub", "pages.img"), "w").write("img")
    put(target, "stopped")
elif cmd == "events":
    print(json.dumps({{"type": "stats", "id": target, "data": {{
        "cpu": {{"usage": {{"total": 5000000}}}},
        "memory": {{"usage": {{"usage": 1048576, "max": 2097152}}, "cache": 4096}}}}}}))
sys.exit(0)
'''


class FakeRunsc:
    def __init__(self, directory: Path, *, version: str = "fake-1",
                 global_flags: Sequence[str] = (), restore_flags: Sequence[str] = (),
                 checkpoint_flags: Sequence[str] = (), term_stops: bool = True) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self.path = directory / "runsc"
        self.record = directory / "record.jsonl"
        self.fail_file = directory / "fail.txt"
        self.path.write_text(SCRIPT.format(
            python=sys.executable, record=str(self.record), fail=str(self.fail_file),
            version=version, global_flags=list(global_flags),
            restore_flags=list(restore_flags), checkpoint_flags=list(checkpoint_flags),
            term_stops=term_stops,
        ))
        self.path.chmod(0o755)

    def fail(self, *calls: str) -> None:
        self.fail_file.write_text("\n".join(calls) + "\n")

    def slow(self, *calls: str) -> None:
        """These calls take 0.5 s."""
        (self.fail_file.parent / "slow.txt").write_text("\n".join(calls) + "\n")

    def hold(self, call: str, until: Path) -> None:
        """`call` waits until `until` exists (30 s at most), then goes on."""
        with open(self.fail_file.parent / "hold.txt", "a") as f:
            f.write(f"{call}\t{until}\n")

    def meet(self, *calls: str, within: float = 10.0) -> None:
        """These calls each wait (up to `within` s) until all of them have started:
        they succeed only when run at the same time."""
        (self.fail_file.parent / "meet.txt").write_text(
            "\n".join([f"within {within}", *calls]) + "\n")

    def calls(self) -> list[list[str]]:
        """Recorded argv (after the binary), probes excluded."""
        if not self.record.exists():
            return []
        out = [json.loads(line) for line in self.record.read_text().splitlines()]
        probes = (["--version"], ["flags"], ["help"], ["nvproxy"])
        return [a for a in out if a[:1] not in probes]

    def commands(self) -> list[str]:
        """'<subcommand> <container>' for each call (list as 'list')."""
        found = []
        for argv in self.calls():
            i = 0
            while argv[i].startswith("-"):
                i += 2 if argv[i] in ("-root", "-log", "-log-format") else 1
            cmd, rest = argv[i], argv[i + 1:]
            if cmd == "list":
                found.append("list")
            elif cmd == "kill":
                found.append(f"kill {rest[0]} {rest[1]}")
            else:
                found.append(f"{cmd} {rest[-1]}")
        return found
