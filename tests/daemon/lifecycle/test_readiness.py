"""What SERVING means, judged without runsc: the global flags against the host
(`readiness.host_problems`, `readiness.flag_problems`). Each problem is one every Run
would meet at its first runsc call; the e2e suites (tests/worker) show the daemon
saying it, NOT_SERVING and /readyz 503, for real."""

from __future__ import annotations

from ateom.daemon.lifecycle.readiness import flag_problems, host_problems
from ateom.runsc.host import CgroupMount, read_cgroup_mounts
from ateom.runsc.probe import RunscInfo

RO = (CgroupMount("/sys/fs/cgroup/memory", "cgroup", True),)
RW = (CgroupMount("/sys/fs/cgroup", "cgroup2", False),)


def test_a_read_only_cgroupfs_without_ignore_cgroups_is_not_ready() -> None:
    [problem] = host_problems([], RO)
    assert "cgroupfs is read-only (/sys/fs/cgroup/memory)" in problem
    assert "--ignore-cgroups" in problem
    [problem] = host_problems(["--network=none"], ())
    assert "cgroupfs is not mounted" in problem
    assert host_problems(["--network=none", "--ignore-cgroups"], RO) == []
    assert host_problems(["--network=none", "-ignore-cgroups=true"], ()) == []
    assert host_problems(["--network=none"], RW) == []
    assert host_problems(["--network=none"], None) == []  # unreadable: not judged


def test_runscs_default_network_is_no_problem_ateom_makes_each_actor_one() -> None:
    assert host_problems(["--ignore-cgroups"], RW) == []
    assert host_problems(["--network=sandbox"], RW) == []
    assert host_problems(["--network", "host"], RW) == []


def test_an_overlay_in_the_node_agents_bundle_is_not_ready() -> None:
    info = RunscInfo("/usr/bin/runsc", "release-20260817.0",
                     frozenset({"overlay2", "network"}))
    [problem] = flag_problems(info, ["--overlay2=root:self"])
    assert problem.startswith("--runsc-global-flag --overlay2=root:self: the 'self' medium")
    assert flag_problems(info, ["--overlay2=root:memory"]) == []
    assert flag_problems(info, ["--overlay2", "root:self"])  # a valued flag's own value


def test_this_machines_cgroup_mounts_are_read(tmp_path) -> None:  # type: ignore[no-untyped-def]
    mountinfo = tmp_path / "mountinfo"
    mountinfo.write_text(
        "30 24 0:26 / /sys/fs/cgroup/cpu ro,nosuid - cgroup cgroup rw,cpu\n"
        "31 24 0:27 / /sys/fs/cgroup/unified rw,nosuid - cgroup2 cgroup2 rw\n"
        "32 24 0:28 / /proc rw - proc proc rw\n")
    assert read_cgroup_mounts(str(mountinfo)) == (
        CgroupMount("/sys/fs/cgroup/cpu", "cgroup", True),
        CgroupMount("/sys/fs/cgroup/unified", "cgroup2", False))
