"""GPU placement: policy parsing, choice rules, refusals and their messages,
restore onto the same or matching GPUs, properties over random sequences, and concurrent use."""

from __future__ import annotations

import random
import sys
import threading
from collections.abc import Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ateom.errors import AteomError, ErrorCode
from ateom.gpuinfo.placement import (
    ALL_GPUS,
    GpuPlacer,
    GpuRequest,
    PlacementRefused,
    PlacementSnapshot,
    PodGpu,
    RefusalReason,
)
from ateom.settings import DEFAULT_PLACEMENT, PlacementPolicy, PlacementSettings, parse_placement

H100 = "10de:2330"
A100 = "10de:20b0"
EXCLUSIVE = PlacementSettings(PlacementPolicy.EXCLUSIVE)
SHARED = PlacementSettings(PlacementPolicy.SHARED)


def gpu(i: int, model: str = H100) -> PodGpu:
    return PodGpu(f"nvidia.com/gpu={i}", i, f"GPU-{i:08x}", model)


def pod(n: int, model: str = H100) -> list[PodGpu]:
    return [gpu(i, model) for i in range(n)]


def indices(gpus: Sequence[PodGpu]) -> list[int]:
    return [g.index for g in gpus]


def refused(placer: GpuPlacer, uid: str, request: GpuRequest) -> PlacementRefused:
    with pytest.raises(PlacementRefused) as err:
        placer.choose(uid, request)
    return err.value


# -- the flag ---------------------------------------------------------------------

@pytest.mark.parametrize(("value", "policy", "cap"), [
    ("exclusive", PlacementPolicy.EXCLUSIVE, 0),
    ("shared", PlacementPolicy.SHARED, 0),
    ("shared:4", PlacementPolicy.SHARED, 4),
    (" Shared:1 ", PlacementPolicy.SHARED, 1),
])
def test_parse_placement(value: str, policy: PlacementPolicy, cap: int) -> None:
    parsed = parse_placement(value)
    assert (parsed.policy, parsed.cap) == (policy, cap)
    assert parse_placement(str(parsed)) == parsed  # GetStatus shows what the flag takes


@pytest.mark.parametrize("value", ["", "packed", "exclusive:2", "shared:0", "shared:-1",
                                   "shared:x", "shared:", "shared:٣", "shared:4:4"])
def test_parse_placement_refuses_naming_the_flag(value: str) -> None:
    with pytest.raises(AteomError) as err:
        parse_placement(value, field="--gpu-placement")
    assert err.value.code is ErrorCode.INVALID_ARGUMENT
    assert err.value.message.startswith(f"--gpu-placement {value!r}: ")


@pytest.mark.parametrize(("policy", "cap"), [(PlacementPolicy.EXCLUSIVE, 2),
                                             (PlacementPolicy.SHARED, -1)])
def test_settings_refuse_a_cap_outside_shared(policy: PlacementPolicy, cap: int) -> None:
    with pytest.raises(AteomError) as err:
        PlacementSettings(policy, cap)
    assert err.value.code is ErrorCode.INVALID_ARGUMENT


def test_default_keeps_every_actor_on_every_gpu() -> None:
    assert DEFAULT_PLACEMENT == parse_placement("shared")
    placer = GpuPlacer(pod(4))
    for uid in "abcdefgh":
        assert indices(placer.choose(uid, GpuRequest()).gpus) == [0, 1, 2, 3]


# -- requests -----------------------------------------------------------------------

@pytest.mark.parametrize("kwargs", [
    {"count": 2, "names": ("nvidia.com/gpu=0",)},
    {"count": 1, "names": ("nvidia.com/gpu=0",), "exact_indices": (0,)},
    {"count": 2, "names": ("nvidia.com/gpu=0", "nvidia.com/gpu=0")},
    {"count": 2, "exact_indices": (1, 1)},
    {"count": 1, "exact_indices": (-1,)},
    {"count": -2},
])
def test_malformed_request_is_invalid(kwargs: dict[str, object]) -> None:
    with pytest.raises(AteomError) as err:
        GpuRequest(**kwargs)  # type: ignore[arg-type]
    assert err.value.code is ErrorCode.INVALID_ARGUMENT
    assert err.value.message.startswith("gpu request: ")


def test_request_builders_count_what_they_name() -> None:
    assert GpuRequest.named(["nvidia.com/gpu=3", "nvidia.com/gpu=1"]).count == 2
    assert GpuRequest.at_indices([5]).count == 1
    assert GpuRequest().count == ALL_GPUS


# -- exclusive --------------------------------------------------------------------

def test_exclusive_count_takes_lowest_free_indices() -> None:
    placer = GpuPlacer(pod(8), EXCLUSIVE)
    assert indices(placer.choose("a", GpuRequest(2)).gpus) == [0, 1]
    assert indices(placer.choose("b", GpuRequest(3)).gpus) == [2, 3, 4]
    placer.vacate("a")
    assert indices(placer.choose("c", GpuRequest(3)).gpus) == [0, 1, 5]


def test_exclusive_all_needs_every_gpu_free() -> None:
    placer = GpuPlacer(pod(3), EXCLUSIVE)
    placer.choose("a", GpuRequest(1))
    placer.choose("c", GpuRequest(1))
    err = refused(placer, "b", GpuRequest())
    assert err.code is ErrorCode.RESOURCE_EXHAUSTED
    assert err.reason is RefusalReason.TOO_FEW_FREE
    assert err.message == ("actor b: needs all 3 GPUs: 1 free (nvidia.com/gpu=0 held by a;"
                           " nvidia.com/gpu=1 held by c)")


def test_too_few_free_names_who_holds_what() -> None:
    placer = GpuPlacer(pod(3), EXCLUSIVE)
    placer.choose("a", GpuRequest(1))
    placer.choose("c", GpuRequest(1))
    err = refused(placer, "b", GpuRequest(2))
    assert err.reason is RefusalReason.TOO_FEW_FREE
    assert err.message == ("actor b: needs 2 GPUs: 1 free (nvidia.com/gpu=0 held by a;"
                           " nvidia.com/gpu=1 held by c)")


def test_refusal_merges_runs_of_one_holder() -> None:
    placer = GpuPlacer(pod(6), EXCLUSIVE)
    placer.choose("a", GpuRequest(4))
    placer.choose("c", GpuRequest(1))
    err = refused(placer, "b", GpuRequest(2))
    assert "(nvidia.com/gpu=0 to nvidia.com/gpu=3 held by a; nvidia.com/gpu=4 held by c)" \
        in err.message


def test_refusal_message_stays_bounded_on_64_gpus() -> None:
    placer = GpuPlacer(pod(64), EXCLUSIVE)
    for i in range(64):
        placer.choose(f"actor-{i:02d}-0f8c12ab34cd56ef", GpuRequest(1))
    err = refused(placer, "late", GpuRequest(1))
    assert len(err.message) < 800
    assert "nvidia.com/gpu=7 held by actor-07-0f8c12ab34cd56ef" in err.message
    assert "nvidia.com/gpu=8 " not in err.message
    assert err.message.endswith("; 56 GPUs more held by 56 actors)")


def test_exclusive_never_gives_one_gpu_twice_until_released() -> None:
    placer = GpuPlacer(pod(2), EXCLUSIVE)
    placer.choose("a", GpuRequest(2))
    refused(placer, "b", GpuRequest(1))
    assert indices(placer.vacate("a")) == [0, 1]
    assert indices(placer.choose("b", GpuRequest(1)).gpus) == [0]


# -- shared -----------------------------------------------------------------------

def test_shared_cap_refuses_once_gpus_are_full() -> None:
    placer = GpuPlacer(pod(2), parse_placement("shared:2"))
    placer.choose("a", GpuRequest())
    placer.choose("b", GpuRequest())
    err = refused(placer, "c", GpuRequest())
    assert err.code is ErrorCode.RESOURCE_EXHAUSTED
    assert err.reason is RefusalReason.CAP_REACHED
    assert err.message == ("actor c: needs all 2 GPUs: 0 under the cap of 2 actors per GPU"
                           " (nvidia.com/gpu=0 to nvidia.com/gpu=1 held by a, b)")
    placer.vacate("a")
    assert indices(placer.choose("c", GpuRequest()).gpus) == [0, 1]


def test_shared_count_spreads_over_least_held() -> None:
    placer = GpuPlacer(pod(4), parse_placement("shared:2"))
    got = [indices(placer.choose(f"u{i}", GpuRequest(1)).gpus) for i in range(8)]
    assert got == [[0], [1], [2], [3], [0], [1], [2], [3]]
    placer.vacate("u5")  # GPU 1 now has one holder, the others two
    assert indices(placer.choose("late", GpuRequest(1)).gpus) == [1]
    assert refused(placer, "more", GpuRequest(1)).reason is RefusalReason.CAP_REACHED


def test_shared_cap_message_names_few_holders_per_gpu() -> None:
    placer = GpuPlacer(pod(1), parse_placement("shared:5"))
    for uid in "abcde":
        placer.choose(uid, GpuRequest())
    err = refused(placer, "f", GpuRequest(1))
    assert "nvidia.com/gpu=0 held by a, b, c and 2 more)" in err.message


def test_shared_named_gpus_within_cap() -> None:
    placer = GpuPlacer(pod(4), parse_placement("shared:1"))
    placer.choose("a", GpuRequest.named(["nvidia.com/gpu=2"]))
    err = refused(placer, "b", GpuRequest.named(["nvidia.com/gpu=1", "nvidia.com/gpu=2"]))
    assert err.reason is RefusalReason.CAP_REACHED
    assert err.message == ("actor b: needs nvidia.com/gpu=1, nvidia.com/gpu=2: 1 under the cap"
                           " of 1 actor per GPU (nvidia.com/gpu=2 held by a)")
    assert indices(placer.choose("b", GpuRequest.named(["nvidia.com/gpu=1"])).gpus) == [1]


# -- specific GPUs ------------------------------------------------------------------

def test_named_grant_is_in_index_order() -> None:
    placer = GpuPlacer(pod(4), EXCLUSIVE)
    grant = placer.choose("a", GpuRequest.named(["nvidia.com/gpu=3", "nvidia.com/gpu=1"]))
    assert grant.names == ("nvidia.com/gpu=1", "nvidia.com/gpu=3")


def test_named_gpu_held_by_another_actor() -> None:
    placer = GpuPlacer(pod(4), EXCLUSIVE)
    placer.choose("a", GpuRequest.named(["nvidia.com/gpu=3"]))
    err = refused(placer, "b", GpuRequest.named(["nvidia.com/gpu=1", "nvidia.com/gpu=3"]))
    assert err.code is ErrorCode.RESOURCE_EXHAUSTED
    assert err.reason is RefusalReason.NAMES_TAKEN
    assert err.message == ("actor b: needs nvidia.com/gpu=1, nvidia.com/gpu=3: 1 free"
                           " (nvidia.com/gpu=3 held by a)")


def test_unknown_name_is_a_failed_precondition() -> None:
    placer = GpuPlacer(pod(2), EXCLUSIVE)
    err = refused(placer, "b", GpuRequest.named(["nvidia.com/gpu=7"]))
    assert err.code is ErrorCode.FAILED_PRECONDITION
    assert err.reason is RefusalReason.UNKNOWN_GPU
    assert err.message == ("actor b: the Pod has no GPU nvidia.com/gpu=7 (it has"
                           " nvidia.com/gpu=0 to nvidia.com/gpu=1)")


def test_many_unknown_names_are_counted_not_listed() -> None:
    placer = GpuPlacer(pod(2), EXCLUSIVE)
    names = [f"nvidia.com/gpu={i}" for i in range(10, 30)]
    err = refused(placer, "b", GpuRequest.named(names))
    assert "nvidia.com/gpu=17 and 12 more (it has" in err.message
    assert "nvidia.com/gpu=18" not in err.message


def test_exact_indices() -> None:
    placer = GpuPlacer(pod(4), EXCLUSIVE)
    assert indices(placer.choose("a", GpuRequest.at_indices([2, 0])).gpus) == [0, 2]
    err = refused(placer, "b", GpuRequest.at_indices([1, 2]))
    assert err.reason is RefusalReason.INDICES_TAKEN
    assert err.message == ("actor b: needs the GPUs at indices 1, 2: 1 free"
                           " (nvidia.com/gpu=2 held by a)")
    missing = refused(placer, "b", GpuRequest.at_indices([9]))
    assert (missing.reason, missing.code) == (RefusalReason.UNKNOWN_GPU,
                                              ErrorCode.FAILED_PRECONDITION)


# -- models and sizes ---------------------------------------------------------------

def test_model_constraint_picks_that_model_only() -> None:
    placer = GpuPlacer([gpu(0, A100), gpu(1, H100), gpu(2, A100), gpu(3, H100)], EXCLUSIVE)
    assert indices(placer.choose("a", GpuRequest(2, model=H100)).gpus) == [1, 3]
    err = refused(placer, "b", GpuRequest(1, model=H100))
    assert err.reason is RefusalReason.TOO_FEW_FREE  # there are two: waiting helps
    err = refused(placer, "b", GpuRequest(3, model=A100))
    assert (err.reason, err.code) == (RefusalReason.MODEL_MISMATCH,
                                      ErrorCode.FAILED_PRECONDITION)
    assert err.message == ("actor b: needs 3 GPUs of model 10de:20b0; the Pod has"
                           " 2 of 10de:20b0, 2 of 10de:2330")


def test_model_constraint_on_named_and_unknown_models() -> None:
    placer = GpuPlacer([gpu(0, A100), gpu(1, "")], EXCLUSIVE)
    err = refused(placer, "b", GpuRequest.named(["nvidia.com/gpu=0"], model=H100))
    assert err.message == "actor b: needs model 10de:2330; nvidia.com/gpu=0 is 10de:20b0"
    err = refused(placer, "b", GpuRequest.at_indices([1], model=H100))
    assert err.reason is RefusalReason.MODEL_MISMATCH  # unknown never matches a model
    assert refused(placer, "b", GpuRequest(model=A100)).reason is RefusalReason.MODEL_MISMATCH


def test_more_than_the_pod_has() -> None:
    placer = GpuPlacer(pod(8), EXCLUSIVE)
    err = refused(placer, "b", GpuRequest(9))
    assert (err.reason, err.code) == (RefusalReason.EXCEEDS_POD, ErrorCode.FAILED_PRECONDITION)
    assert err.message == "actor b: needs 9 GPUs; the Pod has 8"


def test_none_and_all_of_no_gpus_hold_nothing() -> None:
    placer = GpuPlacer(pod(2), EXCLUSIVE)
    assert placer.choose("sidecar-only", GpuRequest(0)).gpus == ()
    assert placer.held_by("sidecar-only") == ()
    empty = GpuPlacer([], EXCLUSIVE)
    assert empty.choose("a", GpuRequest()).gpus == ()
    assert empty.choose("b", GpuRequest()).gpus == ()
    assert refused(empty, "c", GpuRequest(1)).reason is RefusalReason.EXCEEDS_POD


# -- state and bookkeeping ------------------------------------------------------------

def test_placing_a_holder_again_is_refused_until_released() -> None:
    placer = GpuPlacer(pod(4), EXCLUSIVE)
    placer.choose("a", GpuRequest(1))
    with pytest.raises(AteomError) as err:
        placer.choose("a", GpuRequest(1))
    assert err.value.code is ErrorCode.ALREADY_EXISTS
    assert err.value.message == "actor a: already holds nvidia.com/gpu=0; release first"
    assert indices(placer.held_by("a")) == [0]
    placer.vacate("a")
    assert indices(placer.choose("a", GpuRequest(1)).gpus) == [0]


def test_release_is_total_and_idempotent() -> None:
    placer = GpuPlacer(pod(4), parse_placement("shared:3"))
    placer.choose("a", GpuRequest())
    placer.choose("b", GpuRequest(2))
    assert indices(placer.vacate("a")) == [0, 1, 2, 3]
    assert placer.vacate("a") == ()
    assert placer.vacate("never-placed") == ()
    assert dict(placer.holders()) == {"nvidia.com/gpu=0": ("b",), "nvidia.com/gpu=1": ("b",),
                                      "nvidia.com/gpu=2": (), "nvidia.com/gpu=3": ()}


def test_snapshot_counts_refusals_by_reason_and_refusal_changes_nothing() -> None:
    placer = GpuPlacer(pod(2), EXCLUSIVE)
    assert set(placer.snapshot().refusals) == set(RefusalReason)
    assert not any(placer.snapshot().refusals.values())
    placer.choose("a", GpuRequest(1))
    before = placer.snapshot()
    refused(placer, "b", GpuRequest(2))
    refused(placer, "b", GpuRequest(2))
    refused(placer, "b", GpuRequest(3))
    after = placer.snapshot()
    assert after.gpus == before.gpus
    assert after.free == 1
    assert after.settings == EXCLUSIVE
    assert after.refusals[RefusalReason.TOO_FEW_FREE] == 2
    assert after.refusals[RefusalReason.EXCEEDS_POD] == 1
    assert sum(after.refusals.values()) == 3


@pytest.mark.parametrize("twice", [
    [gpu(0), PodGpu("nvidia.com/gpu=0", 1, "GPU-x")],
    [gpu(0), PodGpu("nvidia.com/gpu=9", 0, "GPU-x")],
    [PodGpu("nvidia.com/gpu=0", 0, "GPU-x"), PodGpu("nvidia.com/gpu=1", 1, "GPU-x")],
])
def test_pod_gpus_must_be_distinct(twice: list[PodGpu]) -> None:
    with pytest.raises(AteomError) as err:
        GpuPlacer(twice)
    assert err.value.code is ErrorCode.FAILED_PRECONDITION


# -- checkpoint and restore ----------------------------------------------------------

def test_restore_onto_the_same_indices_or_matching_ones() -> None:
    placer = GpuPlacer(pod(4), EXCLUSIVE)
    saved = placer.choose("a", GpuRequest(2, model=H100)).gpus  # indices 0, 1
    placer.vacate("a")  # checkpointed
    placer.choose("b", GpuRequest(1))  # takes index 0
    err = refused(placer, "a", GpuRequest.at_indices(indices(saved), model=H100))
    assert err.reason is RefusalReason.INDICES_TAKEN
    assert "nvidia.com/gpu=0 held by b" in err.message
    assert placer.held_by("a") == ()
    remapped = placer.choose("a", GpuRequest(len(saved), model=H100))
    assert indices(remapped.gpus) == [1, 2]


@pytest.mark.parametrize(("placement", "room"), [("exclusive", [2, 3]),
                                                 ("shared:2", [1, 2, 3]),
                                                 ("shared", [0, 1, 2, 3])])
def test_with_room_lists_what_a_restore_may_take(placement: str, room: list[int]) -> None:
    placer = GpuPlacer(pod(4), parse_placement(placement))
    placer.choose("a", GpuRequest.at_indices([0, 1]))
    if placement != "exclusive":
        placer.choose("b", GpuRequest.at_indices([0]))  # GPU 0 now has two holders
    assert indices(placer.snapshot().with_room()) == room


# -- properties over random sequences ---------------------------------------------------

MODELS = (H100, A100, "")


@st.composite
def scenarios(draw: st.DrawFn) -> tuple[list[PodGpu], PlacementSettings, list[tuple]]:
    n = draw(st.integers(0, 10))
    gpus = [gpu(i, draw(st.sampled_from(MODELS))) for i in range(n)]
    placement = draw(st.sampled_from(["exclusive", "shared", "shared:1", "shared:2",
                                      "shared:3"]))
    actors = [f"a{i}" for i in range(6)]
    request = st.one_of(
        st.builds(GpuRequest, st.integers(-1, n + 1), model=st.sampled_from(("",) + MODELS)),
        st.lists(st.integers(0, n + 1), unique=True, max_size=3).map(GpuRequest.at_indices),
        st.lists(st.integers(0, n + 1), unique=True, max_size=3).map(
            lambda ix: GpuRequest.named([f"nvidia.com/gpu={i}" for i in ix])),
    )
    ops = draw(st.lists(st.one_of(
        st.tuples(st.just("place"), st.sampled_from(actors), request),
        st.tuples(st.just("release"), st.sampled_from(actors), st.none()),
    ), max_size=40))
    return gpus, parse_placement(placement), ops


def run(gpus: list[PodGpu], placement: PlacementSettings, ops: list[tuple]) -> list[object]:
    """Each op's outcome; checks every invariant after each op."""
    placer = GpuPlacer(gpus, placement)
    limit = placement.per_gpu_limit
    outcomes: list[object] = []
    for op, uid, request in ops:
        before = placer.snapshot()
        if op == "release":
            held = placer.held_by(uid)
            assert placer.vacate(uid) == held  # release gives back what it held
            assert placer.held_by(uid) == ()
            after = placer.holders()
            assert all(uid not in after[g.name] for g in held)
            if limit == 1:
                assert all(after[g.name] == () for g in held)  # freed, not passed on
            outcomes.append(("released", [g.index for g in held]))
        else:
            try:
                grant = placer.choose(uid, request)
            except PlacementRefused as err:
                assert placer.snapshot().gpus == before.gpus  # a refusal changes nothing
                outcomes.append((err.reason, err.message))
                check_refusal_is_right(before, placement, request, err)
            except AteomError as err:
                assert err.code is ErrorCode.ALREADY_EXISTS and placer.held_by(uid)
                outcomes.append("already")
            else:
                check_grant_fits(gpus, request, grant.gpus)
                outcomes.append(("granted", [g.index for g in grant.gpus]))
        holders = placer.holders()
        for who in holders.values():
            assert len(set(who)) == len(who)
            assert limit is None or len(who) <= limit  # exclusive: never two holders
        for uid_ in {u for who in holders.values() for u in who}:
            assert {g.name for g in placer.held_by(uid_)} == \
                {name for name, who in holders.items() if uid_ in who}
    return outcomes


def check_grant_fits(gpus: list[PodGpu], request: GpuRequest, got: tuple[PodGpu, ...]) -> None:
    assert list(got) == sorted(got, key=lambda g: g.index)
    if request.names:
        assert {g.name for g in got} == set(request.names)
    elif request.exact_indices:
        assert {g.index for g in got} == set(request.exact_indices)
    else:
        assert len(got) == (len(gpus) if request.count == ALL_GPUS else request.count)
    assert not request.model or all(g.model == request.model for g in got)


def check_refusal_is_right(snapshot: PlacementSnapshot, placement: PlacementSettings,
                           request: GpuRequest, err: PlacementRefused) -> None:
    """For plain counts: refused for lack of room exactly when too few have room."""
    if request.names or request.exact_indices or request.count == ALL_GPUS:
        return
    fits = [h for h in snapshot.gpus if not request.model or h.gpu.model == request.model]
    limit = placement.per_gpu_limit
    room = [h for h in fits if limit is None or len(h.holders) < limit]
    if len(fits) < request.count:
        assert err.code is ErrorCode.FAILED_PRECONDITION
    else:
        assert len(room) < request.count
        assert err.code is ErrorCode.RESOURCE_EXHAUSTED


@given(scenarios())
@settings(max_examples=300, deadline=None)
def test_random_sequences_keep_the_invariants(scenario: tuple) -> None:
    run(*scenario)


@given(scenarios())
@settings(max_examples=100, deadline=None)
def test_same_sequence_same_placements(scenario: tuple) -> None:
    assert run(*scenario) == run(*scenario)


@given(st.integers(1, 16), st.lists(st.integers(1, 4), max_size=20))
@settings(max_examples=200, deadline=None)
def test_exclusive_grants_iff_enough_free(n: int, counts: list[int]) -> None:
    placer = GpuPlacer(pod(n), EXCLUSIVE)
    free = n
    for i, count in enumerate(counts):
        try:
            got = placer.choose(f"a{i}", GpuRequest(count)).gpus
        except PlacementRefused:
            assert count > free
        else:
            assert count <= free and len(got) == count
            free -= count
    assert placer.snapshot().free == free


# -- concurrency ----------------------------------------------------------------------

@pytest.mark.parametrize(("placement", "limit"), [("exclusive", 1), ("shared:2", 2)])
def test_concurrent_place_and_release_on_8_gpus(placement: str, limit: int) -> None:
    placer = GpuPlacer(pod(8), parse_placement(placement))
    guard = threading.Lock()
    claimed: dict[str, set[str]] = {f"nvidia.com/gpu={i}": set() for i in range(8)}
    problems: list[str] = []
    start = threading.Barrier(17)
    done = threading.Event()

    def worker(t: int) -> None:
        try:
            steps(t)
        except Exception as exc:  # a thread's error must fail the test, not just print
            problems.append(f"thread {t}: {exc!r}")

    def steps(t: int) -> None:
        rng = random.Random(t)
        start.wait()
        for step in range(300):
            uid = f"t{t}-{step % 3}"
            placer.vacate(uid)  # a rerun of the same actor starts clean
            try:
                grant = placer.choose(uid, GpuRequest(rng.randint(1, 3)))
            except PlacementRefused:
                continue
            with guard:  # our own ledger: who the placer says holds each GPU right now
                for name in grant.names:
                    claimed[name].add(uid)
                    if len(claimed[name]) > limit:
                        problems.append(f"{name} held by {sorted(claimed[name])}")
            with guard:  # out of the ledger before the placer lets the GPUs go
                for name in grant.names:
                    claimed[name].discard(uid)
            placer.vacate(uid)

    def watcher() -> None:
        start.wait()
        while not done.is_set():
            try:
                for name, who in placer.holders().items():
                    if len(who) > limit:
                        problems.append(f"snapshot: {name} held by {who}")
            except Exception as exc:
                problems.append(f"watcher: {exc!r}")
                return

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(16)]
    observer = threading.Thread(target=watcher)
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads often: races show up if there are any
    try:
        for th in [*threads, observer]:
            th.start()
        for th in threads:
            th.join()
    finally:
        done.set()
        observer.join()
        sys.setswitchinterval(interval)
    assert problems == []
    assert all(who == () for who in placer.holders().values())  # everything was released
    assert placer.snapshot().free == 8
