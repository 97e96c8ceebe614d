"""The release model and command-line interpretation, against the release files (pure)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.support.runsc_emu_cli import Answer, Invocation, interpret, real_argv
from tests.support.runsc_release import (
    DEBIAN,
    RELEASES,
    FlagDef,
    Release,
    go_sprintf,
    load_release,
    parse_go_flags,
    release_file,
    short_usage,
)

EXPECTED = ("20221219", "20230529", "20240422", "20240930", "20260525", "20260608",
            "20260706", "20260817")
NEWEST = EXPECTED[-1]


def raw(name: str) -> dict[str, Any]:
    with open(release_file(name), "rb") as f:
        data: dict[str, Any] = json.load(f)
    return data


@pytest.fixture(scope="module", params=EXPECTED)
def release(request: pytest.FixtureRequest) -> Release:
    return load_release(request.param)


def answer(release: Release, *argv: str) -> Answer:
    out = interpret(release, argv)
    assert isinstance(out, Answer), out
    return out


def invocation(release: Release, *argv: str) -> Invocation:
    out = interpret(release, argv)
    assert isinstance(out, Invocation), out
    return out


def test_every_release_file_is_listed_and_loads() -> None:
    assert RELEASES == EXPECTED
    tags = [load_release(r).tag for r in RELEASES]
    assert tags == [f"release-{r}.0" for r in EXPECTED]
    with pytest.raises(ValueError):
        release_file("latest")


def test_version_is_the_release_files_rendering(release: Release) -> None:
    fmt = raw(release.name)["output_formats"]["version"]
    expected = fmt["example_debian_bookworm"] or fmt["example_official_build"]
    for flag in ("--version", "-version", "--version=true"):
        assert answer(release, flag) == Answer(stdout=expected)
    assert expected.startswith("runsc version ") and expected.endswith(f"spec: {fmt['SPEC']}\n")
    # Debian's own version string for its release; the tag for the others.
    assert ("0.0~20221219.0" in expected) == (release.name == DEBIAN)


def test_flags_and_help_print_what_the_file_renders(release: Release) -> None:
    data = raw(release.name)
    assert answer(release, "flags") == Answer(stderr=data["runsc_flags_output"])
    assert answer(release, "help") == Answer(stdout=data["top_level_help_output"])
    for name, cmd in data["commands"].items():
        if cmd.get("present", True) and name not in release.twice_registered:
            expected = cmd.get("help_output_via_runsc_help", cmd.get("help_output"))
            if expected is not None:
                assert answer(release, "help", name) == Answer(stdout=expected), name


def test_help_flag_is_long_help_only_where_runsc_defines_it(release: Release) -> None:
    for flag in ("-h", "-help", "--help"):
        got = answer(release, flag)
        if "help" in {f["name"] for f in raw(release.name)["cli_flags"]}:
            assert got == Answer(stdout=release.top_level_help)
        else:  # flag.ErrHelp: the commander's usage on stderr, exit 0 (Debian)
            assert got == Answer(stderr=short_usage(release))


def test_command_help_flag_per_release(release: Release) -> None:
    data = raw(release.name)["commands"]["checkpoint"]
    got = answer(release, "checkpoint", "-help")
    assert got.exit_code == 128 and got.stdout == ""
    if release.preparses_command_flags:
        assert got.stderr == (data["help_output"]
                              + 'failed to parse flags for "checkpoint": flag: help requested\n')
    else:
        assert got.stderr == data["help_output"]


def test_short_usage_lists_the_groups_without_the_blurb(release: Release) -> None:
    usage = short_usage(release)
    assert usage.startswith("Usage: runsc <flags> <subcommand> <subcommand args>\n\nSubcommands:\n")
    assert usage.endswith('\n\nUse "runsc flags" for a list of top-level flags\n')
    assert "gVisor container runtime" not in usage and "Additional help topics" not in usage
    assert "\tcheckpoint       checkpoint current state" in usage


def _lacks(release: Release) -> tuple[str, str]:
    """A top-level and a checkpoint flag the newest release has and `release` lacks."""
    newest = load_release(NEWEST)
    top = sorted(set(newest.flags) - set(release.flags))
    ckpt = sorted(set(newest.commands["checkpoint"].flags)
                  - set(release.commands["checkpoint"].flags))
    return (top[0] if top else "", ckpt[0] if ckpt else "")


@pytest.mark.parametrize("name", EXPECTED[:-1])
def test_a_missing_top_level_flag_is_refused_with_usage_exit_2(name: str) -> None:
    release = load_release(name)
    top, _ = _lacks(release)
    for form in (f"-{top}", f"--{top}", f"--{top}=1"):
        got = answer(release, form, "list")
        assert got == Answer(stderr=f"flag provided but not defined: -{top}\n"
                             + short_usage(release), exit_code=2)


@pytest.mark.parametrize("name", EXPECTED[:-1])
def test_a_missing_command_flag_is_refused_exit_128(name: str) -> None:
    release = load_release(name)
    _, flag = _lacks(release)
    got = answer(release, "checkpoint", f"--{flag}=x", "c1")
    said = f"flag provided but not defined: -{flag}\n"
    usage = release.commands["checkpoint"].help_output
    tail = (f'failed to parse flags for "checkpoint": flag provided but not defined: -{flag}\n'
            if release.preparses_command_flags else "")
    assert got == Answer(stderr=said + usage + tail, exit_code=128)


def test_gpu_flags_follow_the_release_files_features(release: Release) -> None:
    features = raw(release.name)["gpu_launcher_features"]
    cases = {"nvproxy_flag": ("--nvproxy", "list"),
             "nvproxy_driver_version_flag": ("--nvproxy-driver-version=550.90.07", "list"),
             "restore_background_flag": ("restore", "--background", "c1"),
             "checkpoint_cuda_checkpoint_path": ("checkpoint", "--cuda-checkpoint-path=/x", "c1"),
             "checkpoint_cuda_checkpoint_sequential": ("checkpoint",
                                                       "--cuda-checkpoint-sequential", "c1")}
    for feature, argv in cases.items():
        accepted = isinstance(interpret(release, argv), Invocation)
        assert accepted == features[feature], (feature, argv)
    drivers = interpret(release, ["nvproxy", "list-supported-drivers"])
    if features["nvproxy_list_supported_drivers_cmd"]:
        supported = raw(release.name)["nvproxy"]["driver_versions"]["supported"]
        assert drivers == Answer(stdout="".join(v + "\n" for v in supported))
    else:  # an unknown command: usage, 128
        assert drivers == Answer(stderr=short_usage(release), exit_code=128)


def test_unknown_and_missing_commands(release: Release) -> None:
    assert answer(release, "bogus") == Answer(stderr=short_usage(release), exit_code=128)
    assert answer(release) == Answer(stderr=short_usage(release), exit_code=128)
    assert answer(release, "--version=false") == Answer(stderr=short_usage(release),
                                                        exit_code=128)
    assert answer(release, "platforms") == Answer(stderr=short_usage(release), exit_code=128)


FLAGS = {"b": FlagDef("b", "bool", "false", ""), "s": FlagDef("s", "string", "", ""),
         "n": FlagDef("n", "int", "0", ""), "d": FlagDef("d", "duration", "0s", "")}


@pytest.mark.parametrize(("argv", "used", "rest", "terminated"), [
    (["-b", "x"], [("b", "true")], ["x"], False),
    (["--b=false", "x"], [("b", "false")], ["x"], False),
    (["-s", "v", "-s=w", "x", "-b"], [("s", "v"), ("s", "w")], ["x", "-b"], False),
    (["--s", "-b", "x"], [("s", "-b")], ["x"], False),  # a non-bool flag takes the next word
    (["-n", "0x1F", "-d", "1.5s", "--", "-b"], [("n", "0x1F"), ("d", "1.5s")], ["-b"], True),
    (["x", "--", "-b"], [], ["x", "--", "-b"], False),  # the first non-flag ends the flags
    (["-", "-b"], [], ["-", "-b"], False),  # a lone dash is an argument
    ([], [], [], False),
])
def test_go_flag_parsing(argv: list[str], used: list[tuple[str, str]], rest: list[str],
                         terminated: bool) -> None:
    got = parse_go_flags(argv, FLAGS)
    assert not got.error and not got.help
    assert [(u.name, u.value) for u in got.used] == used and list(got.rest) == rest
    assert got.terminated == terminated


@pytest.mark.parametrize(("argv", "error"), [
    (["-x"], "flag provided but not defined: -x"),
    (["--b=maybe"], 'invalid boolean value "maybe" for -b: parse error'),
    (["-s"], "flag needs an argument: -s"),
    (["-n", "ten"], 'invalid value "ten" for flag -n: parse error'),
    (["-d=5"], 'invalid value "5" for flag -d: parse error'),
    (["---b"], "bad flag syntax: ---b"),
    (["-=b"], "bad flag syntax: -=b"),
])
def test_go_flag_errors(argv: list[str], error: str) -> None:
    assert parse_go_flags(argv, FLAGS).error == error


def test_undefined_help_is_flag_errhelp() -> None:
    for form in ("-h", "--help"):
        got = parse_go_flags([form, "x"], FLAGS)
        assert got.help and not got.error


def test_real_argv_leaves_out_what_debian_lacks_computed_from_its_file() -> None:
    newest, debian = load_release(NEWEST), load_release(DEBIAN)
    inv = invocation(newest, "-log-format", "json", "--root", "/r", "--nvproxy",
                     "--nvproxy-driver-version=580.65.06", "-allow-connected-on-save",
                     "restore", "-bundle", "/b", "-image-path", "/i", "-background",
                     "--direct", "-detach", "c1")
    call = real_argv(inv, debian)
    assert call.argv == ("-log-format", "json", "--root", "/r", "restore", "-bundle", "/b",
                         "-image-path", "/i", "-detach", "c1")
    assert call.stripped == ("nvproxy", "nvproxy-driver-version", "allow-connected-on-save",
                             "restore:background", "restore:direct")
    for name in call.stripped:
        flag = name.split(":")[-1]
        table = debian.commands["restore"].flags if ":" in name else debian.flags
        assert flag not in table
    ckpt = invocation(newest, "checkpoint", "--cuda-checkpoint-path", "/x", "--compression=none",
                      "-image-path", "/i", "c1")
    assert real_argv(ckpt, debian).argv == ("checkpoint", "-image-path", "/i", "c1")
    # Flags Debian has pass exactly as written, a "--" too.
    ex = invocation(newest, "exec", "--", "c1", "ls", "-l")
    assert real_argv(ex, debian).argv == ("exec", "--", "c1", "ls", "-l")


def test_go_sprintf_fills_verbs() -> None:
    assert go_sprintf("was %v, now %v", "580.65.06", "590.48.01") == "was 580.65.06, now 590.48.01"
    assert go_sprintf("%q failed with exit status %d; output: %q", 'a "b"', 1, "x\n") == (
        '"a \\"b\\"" failed with exit status 1; output: "x\\n"')
    assert go_sprintf("can't remap %d saved devices to %d restored devices", 2, 1) == (
        "can't remap 2 saved devices to 1 restored devices")
    assert go_sprintf("100%% %s", "x") == "100% x"


def test_release_messages_are_the_releases_own() -> None:
    new, old = load_release(NEWEST), load_release("20240930")
    assert new.message("disallowed driver capabilities").count('"%v"') == 2
    assert old.message("disallowed driver capabilities").count("'%v'") == 2
    assert old.message("can't save with live nvproxy clients")
    with pytest.raises(KeyError):
        load_release(DEBIAN).message("nvidia driver version changed")
