"""Metrics: driven through the daemon's seams, read back by scraping and parsing."""

from __future__ import annotations

import shutil
import socket
import subprocess
import urllib.request
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from ateom.daemon.rpc.metrics import Metrics, attach_to_daemon
from ateom.daemon.rpc.metrics_endpoint import (
    parse_listen_address,
    start_daemon_metrics,
    start_metrics_server,
)
from ateom.errors import AteomError, ErrorCode, ResolutionError
from ateom.gpuinfo.placement import (
    GpuPlacer,
    GpuRequest,
    PlacementRefused,
    PlacementSnapshot,
    PodGpu,
)
from ateom.settings import parse_placement


def samples(text: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, frozenset(s.labels.items()))] = s.value
    return out


def value(text: str, name: str, **labels: str) -> float:
    return samples(text).get((name, frozenset(labels.items())), 0.0)


def test_rpc_counts_and_latency_by_service_method_and_code() -> None:
    m = Metrics()
    m.observe_rpc("Ateom.RunWorkload", "OK", 0.2)
    m.observe_rpc("Ateom.RunWorkload", "OK", 0.4)
    m.observe_rpc("Ateom.RunWorkload", "RESOURCE_EXHAUSTED", 0.001)
    m.observe_rpc("Inspect.GetStatus", "OK", 0.001)
    text = m.scrape().decode()
    run = {"service": "Ateom", "method": "RunWorkload"}
    assert value(text, "ateom_rpc_requests_total", **run, code="OK") == 2
    assert value(text, "ateom_rpc_requests_total", **run, code="RESOURCE_EXHAUSTED") == 1
    assert value(text, "ateom_rpc_requests_total", service="Inspect", method="GetStatus",
                 code="OK") == 1
    assert value(text, "ateom_rpc_duration_seconds_count", **run, code="OK") == 2
    assert value(text, "ateom_rpc_duration_seconds_sum", **run, code="OK") == pytest.approx(0.6)
    assert value(text, "ateom_rpc_duration_seconds_bucket", **run, code="OK", le="0.25") == 1


def test_no_created_series_and_the_process_own_figures() -> None:
    m = Metrics()
    m.observe_rpc("Ateom.RunWorkload", "OK", 0.2)
    m.observe_phase("validate", 0.001)
    names = {name for name, _ in samples(m.scrape().decode())}
    assert not [n for n in names if n.endswith("_created")]
    assert {"process_cpu_seconds_total", "process_resident_memory_bytes",
            "process_open_fds", "python_info"} <= names


def test_rpc_context_takes_the_code_from_the_error() -> None:
    m = Metrics()
    with m.rpc("S.Run"):
        pass
    with pytest.raises(ResolutionError), m.rpc("S.Run"):
        raise ResolutionError({"nvidia.com/gpu=9": "no such device"})
    with pytest.raises(RuntimeError), m.rpc("S.Run"):
        raise RuntimeError("bug")
    with m.rpc("S.Terminate") as call:
        call.code = ErrorCode.NOT_FOUND.value
    text = m.scrape().decode()
    name = "ateom_rpc_requests_total"
    assert value(text, name, service="S", method="Run", code="OK") == 1
    assert value(text, name, service="S", method="Run", code="FAILED_PRECONDITION") == 1
    assert value(text, name, service="S", method="Run", code="INTERNAL") == 1
    assert value(text, name, service="S", method="Terminate", code="NOT_FOUND") == 1


def test_phase_durations_with_outcome() -> None:
    m = Metrics()
    m.observe_phase("runsc.create", 0.3, True)
    with m.phase("inject"):
        pass
    with pytest.raises(OSError), m.phase("runsc.start"):
        raise OSError("runsc exited 1")
    text = m.scrape().decode()
    name = "ateom_phase_duration_seconds_count"
    assert value(text, name, phase="runsc.create", outcome="ok") == 1
    assert value(text, name, phase="inject", outcome="ok") == 1
    assert value(text, name, phase="runsc.start", outcome="error") == 1
    assert value(text, name, phase="runsc.start", outcome="ok") == 0


def test_hosted_actors_gauge_set_or_read_at_scrape_time() -> None:
    m = Metrics()
    text = m.scrape().decode()
    assert ("ateom_hosted_actors", frozenset()) in samples(text)
    m.track_hosted_actors(lambda: 1)
    assert value(m.scrape().decode(), "ateom_hosted_actors") == 1
    actors: dict[str, object] = {}
    m.track_hosted_actors(lambda: len(actors))
    assert value(m.scrape().decode(), "ateom_hosted_actors") == 0
    actors["uid-1"] = object()
    actors["uid-2"] = object()
    assert value(m.scrape().decode(), "ateom_hosted_actors") == 2


def test_soname_cache_hits_and_misses_read_from_the_injectors_cache(tmp_path: Path) -> None:
    if shutil.which("gcc") is None:
        pytest.skip("gcc not installed: builds the ELF library the cache reads")
    from ateom.inject.soname import SonameCache
    from tests.support import build_fake_driver_libs

    libcuda = build_fake_driver_libs(tmp_path)[0]
    cache = SonameCache()
    m = Metrics()
    m.track_soname_cache(cache)
    name = "ateom_injection_soname_cache_lookups_total"
    assert value(m.scrape().decode(), name, result="hit") == 0
    for _ in range(3):
        assert cache.lookup(str(libcuda.path)).soname == "libcuda.so.1"
    text = m.scrape().decode()
    assert value(text, name, result="miss") == 1
    assert value(text, name, result="hit") == 2


def test_attach_to_daemon_observes_its_rpc_and_phase_seams() -> None:
    import grpc

    from ateom.daemon.calls.phases import PHASE_OBSERVERS, phase
    from ateom.daemon.rpc.handler import RPC_OBSERVERS, rpc

    class Context:
        def abort(self, code: grpc.StatusCode, details: str) -> None:
            raise RuntimeError(f"{code.name}: {details}")

        def time_remaining(self) -> float | None:
            return None  # the client set no deadline

    class Servicer:
        @rpc("Ateom.RunWorkload")
        def RunWorkload(self, request: object, context: object) -> str:
            with phase("runsc.create", container="app"):
                pass
            with phase("runsc.start", container="app"):
                pass
            return "ok"

        @rpc("Ateom.TerminateWorkload")
        def TerminateWorkload(self, request: object, context: object) -> None:
            raise AteomError("actor x: not hosted", code=ErrorCode.NOT_FOUND)

    m = Metrics()
    detach = attach_to_daemon(m)
    try:
        assert Servicer().RunWorkload(object(), Context()) == "ok"
        with pytest.raises(RuntimeError, match="NOT_FOUND"):
            Servicer().TerminateWorkload(object(), Context())
    finally:
        detach()
    assert m.observe_rpc not in RPC_OBSERVERS and m.observe_phase not in PHASE_OBSERVERS
    text = m.scrape().decode()
    assert value(text, "ateom_rpc_requests_total", service="Ateom", method="RunWorkload",
                 code="OK") == 1
    assert value(text, "ateom_rpc_requests_total", service="Ateom", method="TerminateWorkload",
                 code="NOT_FOUND") == 1
    for p in ("runsc.create", "runsc.start"):
        assert value(text, "ateom_phase_duration_seconds_count", phase=p, outcome="ok") == 1


def test_two_metrics_objects_do_not_share_counters() -> None:
    a, b = Metrics(), Metrics()
    a.observe_rpc("S.Run", "OK", 0.1)
    assert value(b.scrape().decode(), "ateom_rpc_requests_total", service="S", method="Run",
                 code="OK") == 0


def test_build_info() -> None:
    from ateom import __version__

    text = Metrics().scrape().decode()
    assert value(text, "ateom_build_info", version=__version__) == 1


def test_server_serves_a_parsable_scrape_that_moves() -> None:
    m = Metrics()
    server = start_metrics_server("127.0.0.1:0", m)
    try:
        url = f"http://127.0.0.1:{server.port}/metrics"

        def scrape() -> str:
            with urllib.request.urlopen(url, timeout=5) as resp:
                assert resp.status == 200
                assert resp.headers["Content-Type"].startswith("text/plain")
                return resp.read().decode()

        before = scrape()
        assert value(before, "ateom_hosted_actors") == 0
        # What the daemon's seams report while one actor runs.
        with m.rpc("Ateom.RunWorkload"):
            with m.phase("inject"):
                pass
            with m.phase("runsc.create"):
                pass
            with m.phase("runsc.start"):
                pass
            m.track_hosted_actors(lambda: 1)
        after = scrape()
        assert value(after, "ateom_rpc_requests_total", service="Ateom", method="RunWorkload",
                     code="OK") == 1
        assert value(after, "ateom_hosted_actors") == 1
        for phase in ("inject", "runsc.create", "runsc.start"):
            assert (
                value(after, "ateom_phase_duration_seconds_count", phase=phase, outcome="ok") == 1
            )
    finally:
        server.close()
    with pytest.raises(OSError):
        urllib.request.urlopen(url, timeout=2)


def test_server_reports_a_taken_port() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(AteomError, match="cannot listen") as info:
            start_metrics_server(f"127.0.0.1:{port}", Metrics())
        assert info.value.code is ErrorCode.UNAVAILABLE


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("0.0.0.0:9464", ("0.0.0.0", 9464)),
        (":9464", ("0.0.0.0", 9464)),
        ("[::1]:80", ("::1", 80)),
        ("localhost:0", ("localhost", 0)),
    ],
)
def test_parse_listen_address(text: str, expected: tuple[str, int]) -> None:
    assert parse_listen_address(text) == expected


@pytest.mark.parametrize("text", ["9464", "host:", "host:http", "h:70000"])
def test_parse_listen_address_rejects(text: str) -> None:
    with pytest.raises(AteomError, match="HOST:PORT"):
        parse_listen_address(text)


class StubService:
    """The two things the metrics read of the daemon's service."""

    def __init__(self, placer: GpuPlacer | None = None) -> None:
        self.actors = ["a", "b", "c"]
        self.placer = placer
        self.placement_policy = "exclusive"

    def placement_snapshot(self) -> PlacementSnapshot | None:
        return self.placer.snapshot() if self.placer is not None else None


def test_start_daemon_metrics_reads_the_service_and_unsubscribes_on_close() -> None:
    from ateom.daemon.calls.phases import PHASE_OBSERVERS, phase
    from ateom.daemon.calls.refusals import REFUSAL_OBSERVERS, refused

    placer = GpuPlacer([PodGpu(f"nvidia.com/gpu={i}", i) for i in range(2)],
                       parse_placement("exclusive"))
    server = start_daemon_metrics("127.0.0.1:0", StubService(placer))
    try:
        with phase("runsc.restore"):
            pass
        placer.choose("actor-1", GpuRequest(1))
        refused("checkpoint", "no_cuda_checkpoint")
        with urllib.request.urlopen(f"http://127.0.0.1:{server.port}/", timeout=5) as resp:
            text = resp.read().decode()
        assert value(text, "ateom_hosted_actors") == 3
        assert value(text, "ateom_phase_duration_seconds_count", phase="runsc.restore",
                     outcome="ok") == 1
        assert ("ateom_injection_soname_cache_lookups_total",
                frozenset({("result", "hit")})) in samples(text)
        assert value(text, "ateom_gpu_holders", gpu="0") == 1
        assert ("ateom_gpu_holders", frozenset({("gpu", "1")})) in samples(text)
        assert value(text, "ateom_gpu_placement_info", policy="exclusive") == 1
        assert value(text, "ateom_refusals_total", kind="checkpoint",
                     reason="no_cuda_checkpoint") == 1
        assert server.metrics.observe_phase in PHASE_OBSERVERS
        assert server.metrics.observe_refusal in REFUSAL_OBSERVERS
    finally:
        server.close()
    assert server.metrics.observe_phase not in PHASE_OBSERVERS
    assert server.metrics.observe_refusal not in REFUSAL_OBSERVERS


# -- refusals and GPU placement -------------------------------------------------


def test_refusals_are_counted_by_kind_and_reason_through_the_daemons_seam() -> None:
    from ateom.daemon.calls.refusals import REFUSAL_OBSERVERS, refused

    m = Metrics()
    detach = attach_to_daemon(m)
    try:
        refused("placement", "too_few_free")
        refused("placement", "too_few_free")
        refused("restore", "driver_changed")
    finally:
        detach()
    refused("placement", "too_few_free")  # after detach: not counted
    assert m.observe_refusal not in REFUSAL_OBSERVERS
    text = m.scrape().decode()
    name = "ateom_refusals_total"
    assert value(text, name, kind="placement", reason="too_few_free") == 2
    assert value(text, name, kind="restore", reason="driver_changed") == 1
    assert value(text, name, kind="placement", reason="cap_reached") == 0


def test_placement_refusals_from_the_placer_reach_the_counter() -> None:
    # What the daemon does on a refusal: the placer's reason slug, as the label.
    from ateom.daemon.calls.refusals import refused

    placer = GpuPlacer([PodGpu("nvidia.com/gpu=0", 0)], parse_placement("shared:1"))
    placer.choose("a", GpuRequest())
    m = Metrics()
    detach = attach_to_daemon(m)
    try:
        with pytest.raises(PlacementRefused) as err:
            placer.choose("b", GpuRequest())
        refused("placement", err.value.reason.value)
    finally:
        detach()
    assert value(m.scrape().decode(), "ateom_refusals_total", kind="placement",
                 reason="cap_reached") == 1


def test_gpu_holders_follow_the_placer_at_scrape_time() -> None:
    placer = GpuPlacer([PodGpu(f"nvidia.com/gpu={i}", i) for i in (0, 1, 2)],
                       parse_placement("shared:2"))
    m = Metrics()
    m.track_placement(placer.snapshot, "shared:2")
    text = m.scrape().decode()
    assert [value(text, "ateom_gpu_holders", gpu=str(i)) for i in (0, 1, 2)] == [0, 0, 0]
    assert ("ateom_gpu_holders", frozenset({("gpu", "2")})) in samples(text)
    assert value(text, "ateom_gpu_placement_info", policy="shared:2") == 1
    placer.choose("a", GpuRequest())
    placer.choose("b", GpuRequest(1))
    text = m.scrape().decode()
    assert [value(text, "ateom_gpu_holders", gpu=str(i)) for i in (0, 1, 2)] == [2, 1, 1]
    placer.vacate("a")
    text = m.scrape().decode()
    assert [value(text, "ateom_gpu_holders", gpu=str(i)) for i in (0, 1, 2)] == [1, 0, 0]


def test_the_policy_but_no_holders_before_the_pods_gpus_are_known() -> None:
    m = Metrics()
    m.track_placement(lambda: None, "shared:3")
    text = m.scrape().decode()
    assert "ateom_gpu_holders" not in {name for name, _ in samples(text)}
    assert value(text, "ateom_gpu_placement_info", policy="shared:3") == 1


def test_a_failing_placement_source_leaves_the_rest_of_the_scrape() -> None:
    def broken() -> PlacementSnapshot | None:
        raise RuntimeError("placer gone")

    m = Metrics()
    m.track_hosted_actors(lambda: 2)
    m.track_placement(broken, "exclusive")
    text = m.scrape().decode()
    assert value(text, "ateom_hosted_actors") == 2
    assert "ateom_gpu_holders{" not in text


def test_the_documented_phases_cover_every_phase_the_daemon_times() -> None:
    # Every `phase("name"` literal in the daemon is in PHASES (and so in the docs,
    # which test_operations_doc holds to the scrape); cuda-checkpoint is the GPU save.
    import re

    from ateom.daemon.rpc.metrics import PHASES

    daemon = Path(__file__).resolve().parents[2] / "ateom" / "daemon"
    used = {m.group(1) for f in daemon.rglob("*.py")
            for m in re.finditer(r'\bphase\(\s*"([^"]+)"', f.read_text())}
    assert used, "no phase literals found: the pattern no longer matches the daemon"
    assert used <= set(PHASES), used - set(PHASES)
    assert "cuda-checkpoint" in PHASES
    doc = (daemon.parents[1] / "docs" / "operations.md").read_text()
    row = next(ln for ln in doc.splitlines() if ln.startswith("| `ateom_phase_duration_seconds`"))
    for name in PHASES:
        assert f"`{name}`" in row, name


PROMTOOL = shutil.which("promtool")


def promtool_check(exposition: str) -> subprocess.CompletedProcess[str]:
    assert PROMTOOL is not None
    return subprocess.run([PROMTOOL, "check", "metrics"], input=exposition, text=True,
                          capture_output=True, timeout=60, check=False)


@pytest.mark.skipif(PROMTOOL is None, reason="promtool not installed (scripts/install_promtool.sh "
                    "fetches it): Prometheus' own check of the exposition did not run")
def test_prometheus_own_checker_finds_nothing_in_a_full_scrape(tmp_path: Path) -> None:
    """Every family the daemon exposes, each with a series, through `promtool check
    metrics` (Prometheus' linter: names, suffixes, help, types)."""
    from ateom.inject.soname import SonameCache

    placer = GpuPlacer([PodGpu(f"nvidia.com/gpu={i}", i) for i in range(2)],
                       parse_placement("exclusive"))
    placer.choose("a", GpuRequest(1))
    m = Metrics()
    m.observe_rpc("Ateom.RunWorkload", "OK", 0.2)
    m.observe_rpc("Inspect.GetStatus", "OK", 0.001)
    m.observe_phase("runsc.create", 0.03)
    m.observe_refusal("placement", "too_few_free")
    m.observe_sandbox_exit("on_its_own")
    m.track_hosted_actors(lambda: 1)
    m.track_placement(placer.snapshot, "exclusive")
    m.track_soname_cache(SonameCache())
    text = m.scrape().decode()
    names = {name for name, _ in samples(text)}
    assert {"ateom_rpc_requests_total", "ateom_phase_duration_seconds_bucket",
            "ateom_refusals_total", "ateom_sandbox_exits_total", "ateom_gpu_holders",
            "ateom_gpu_placement_info", "ateom_injection_soname_cache_lookups_total",
            "process_cpu_seconds_total"} <= names
    checked = promtool_check(text)
    assert checked.returncode == 0 and not checked.stdout.strip(), checked.stdout + checked.stderr
    # The checker does find what it should (a gauge named like a counter).
    bad = promtool_check("# HELP x_total A gauge.\n# TYPE x_total gauge\nx_total 1\n")
    assert bad.returncode != 0 and "_total" in bad.stdout + bad.stderr
