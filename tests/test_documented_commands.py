"""Every command the README and docs/ show runs as written.

The commands are read from the pages themselves (fenced shell blocks and inline code),
not copied here, so a page that names a flag a verb lost, a benchmark that no longer
starts, or a script that moved fails this test. Each `ateom` verb and each benchmark
is run with ``--help`` (cheap, no root, no runsc) and every flag the page gives it must
be one its help lists; the fixture builder runs with the page's own arguments; a
``bash scripts/…`` is checked to exist (CI runs the two README ones whole).
"""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
_PROGRAMS = re.compile(r"^(?:python3?|ateom|bash) ")
# A flag as a page writes it: --spec-dir, -n (not a dash inside a word, a path or a value).
_FLAG = re.compile(r"(?<![\w/.=-])(--?[A-Za-z][\w-]*)")
_VERBS = "|".join(("cdi", "inject", "serve", "doctor", "health", "checkpoint-info"))


def shell_blocks(markdown: str) -> list[str]:
    """The fenced blocks whose language is a shell's (or none), each as its text."""
    blocks, current, language = [], [], None
    for line in markdown.splitlines():
        fence = re.match(r"^\s*```(\S*)", line)
        if fence and language is None:
            language = fence.group(1)
            current = []
        elif fence:
            if language in ("", "sh", "bash", "shell", "console"):
                blocks.append("\n".join(current))
            language = None
        elif language is not None:
            current.append(line)
    return blocks


def documented_commands() -> list[tuple[str, str]]:
    """(page, command) for every ateom, benchmark or script command the pages show."""
    found: dict[tuple[str, str], None] = {}
    for page in PAGES:
        text = page.read_text()
        lines: list[str] = []
        for block in shell_blocks(text):
            joined = re.sub(r"\\\n\s*", " ", block)  # continuation lines, as a shell reads them
            lines += [ln.strip().removeprefix("$ ") for ln in joined.splitlines()]
        # Inline code: only what reads as a command (a known verb, a benchmark), not prose
        # that happens to sit between two code spans.
        lines += re.findall(rf"`((?:python3? benchmarks/|ateom (?:{_VERBS}|--version))[^`]*)`",
                            text)
        for line in lines:
            command = line.split(" #", 1)[0].strip()
            if _PROGRAMS.match(command) and "../shared" not in command:
                found[(page.name, command)] = None
    return list(found)


COMMANDS = documented_commands()


def _verb_and_flags(command: str) -> tuple[list[str], list[str]]:
    """(`ateom`'s verb words, the flags given) of a documented ateom command."""
    words = command.replace("…", " ").replace("[", " ").replace("]", " ").split()[1:]
    verb: list[str] = []
    for w in words:
        if not re.fullmatch(r"[a-z][a-z-]*", w):
            break
        verb.append(w)
    return verb, _FLAG.findall(command)


def _run(argv: list[str], timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=timeout,
                          check=False, env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin",
                                            "PYTHONPATH": str(REPO), "HOME": "/root"})


def test_the_pages_show_commands_of_every_kind() -> None:
    kinds = {c.split()[0] + (" " + c.split()[1].split("/")[0] if c.startswith("python") else "")
             for _, c in COMMANDS}
    assert {"ateom", "bash", "python benchmarks"} <= kinds, kinds
    assert len(COMMANDS) > 30


@pytest.mark.parametrize(("page", "command"),
                         [c for c in COMMANDS if c[1].startswith("ateom ")])
def test_every_documented_ateom_command_has_its_verb_and_flags(page: str, command: str) -> None:
    verb, flags = _verb_and_flags(command)
    if not verb and flags == ["--version"]:
        done = _run([sys.executable, "-m", "ateom", "--version"])
        assert done.returncode == 0 and done.stdout.startswith("ateom "), done.stderr
        return
    assert verb, f"{page}: {command!r} names no verb"
    # Words past the verb a page writes in prose ("ateom cdi validate / devices") are not
    # verbs: help of the longest known prefix.
    while verb:
        done = _run([sys.executable, "-m", "ateom", *verb, "--help"])
        if done.returncode == 0:
            break
        verb.pop()
    assert done.returncode == 0 and verb, f"{page}: {command!r}: {done.stderr}"
    for flag in flags:
        assert flag in done.stdout, f"{page}: {command!r}: {flag} is not a flag of ateom {verb}"


@pytest.mark.parametrize(("page", "command"),
                         [c for c in COMMANDS if re.match(r"python3? benchmarks/", c[1])])
def test_every_documented_benchmark_starts_and_takes_its_flags(page: str, command: str) -> None:
    script = command.split()[1]
    assert (REPO / script).is_file(), f"{page}: {script} does not exist"
    done = _run([sys.executable, script, "--help"])
    assert done.returncode == 0, f"{page}: {command!r}: {done.stderr[-2000:]}"
    assert "Traceback" not in done.stderr
    for flag in _FLAG.findall(command.split(maxsplit=2)[2] if len(command.split()) > 2 else ""):
        assert flag in done.stdout, f"{page}: {command!r}: {flag} is not a flag of {script}"


@pytest.mark.parametrize(("page", "command"),
                         [c for c in COMMANDS if c[1].startswith("bash ")])
def test_every_documented_script_exists(page: str, command: str) -> None:
    script = shlex.split(command)[1]
    assert (REPO / script).is_file(), f"{page}: {script} does not exist"


def test_the_fixture_builder_runs_with_the_pages_own_arguments(tmp_path: Path) -> None:
    [command, *_] = [c for _, c in COMMANDS if "benchmarks/gpu_fixture.py" in c]
    argv = shlex.split(command)
    out = tmp_path / "fx"
    argv = [sys.executable, *[str(out) if a.startswith("/tmp/") else a for a in argv[1:]]]
    done = _run(argv, timeout=300)
    assert done.returncode == 0, done.stderr
    assert (out / "cdi" / "nvidia.json").is_file() and (out / "bundle" / "config.json").is_file()
    libs = list((out / "driver" / "lib64").iterdir())
    assert len(libs) == int(argv[argv.index("--libs") + 1])


def test_a_command_reads_as_its_verb_and_flags() -> None:
    assert _verb_and_flags("ateom cdi devices [--spec-dir DIR]… [--json]") == (
        ["cdi", "devices"], ["--spec-dir", "--json"])
    assert _verb_and_flags("ateom checkpoint-info /var/x/<uid>/checkpoint --here") == (
        ["checkpoint-info"], ["--here"])
    assert shell_blocks("```python\nateom x\n```\nateom prose\n```sh\nateom doctor\n```\n") == [
        "ateom doctor"]
