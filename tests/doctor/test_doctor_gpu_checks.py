"""The GPU checks' verdicts (inventory, placement, MPS, GPU checkpoints) from
hand-written facts: each rule, its severity and its fix."""

from __future__ import annotations

from dataclasses import replace

import pytest

from ateom.cdi.model import ContainerEdits, Mount
from ateom.doctor import CheckResult, Status, judge
from ateom.doctor.facts import Facts, MpsFact, NodeFact
from ateom.gpuinfo.cuda_checkpoint import CudaCheckpointFacts
from ateom.gpuinfo.inventory import FactConflict, GpuFacts
from ateom.gpuinfo.mps import MpsVerdict, mps_in_edits
from tests.support.configs import doctor_config
from tests.support.healthy_facts import HELP_590, healthy


def result(facts: Facts, name: str) -> CheckResult:
    return judge(facts).result(name)


def expecting_checkpoints(f: Facts) -> Facts:
    """The operator configured --cuda-checkpoint: GPU checkpoints are this worker's job."""
    return replace(f, config=doctor_config(f.config, cuda_checkpoint="/opt/cc/cuda-checkpoint"))


def gpu_nodes(n: int) -> tuple[NodeFact, ...]:
    return tuple(NodeFact(f"/dev/nvidia{i}", "c", 195, i) for i in range(n))


# -- gpu-inventory ----------------------------------------------------------------


def test_inventory_lists_every_gpu_and_its_sources() -> None:
    r = result(healthy(), "gpu-inventory")
    assert r.status is Status.PASS
    assert r.summary == "2 GPU(s): 2 x 10de:2335 NVIDIA H200; driver 580.65.06"
    assert r.details[1] == ("GPU 1: minor 3, GPU-a0000000-0000-4000-8000-000000000003, "
                            "0000:5c:00.0, 10de:2335 NVIDIA H200, 143771 MiB")
    assert "/usr/local/nvidia/bin/nvidia-smi" in r.details


def test_inventory_problems_and_conflicts_warn_with_each_named() -> None:
    f = healthy()
    assert f.worker_gpus is not None
    w = replace(f.worker_gpus, gpus=f.worker_gpus.gpus[:1],
                conflicts=(FactConflict("0000:5c:00.0", "uuid", "GPU-a", "GPU-b"),),
                problems=("/usr/local/nvidia/bin/nvidia-smi: timed out after 10s; PCI ids "
                          "and memory unknown",))
    r = result(replace(f, worker_gpus=w), "gpu-inventory")
    assert r.status is Status.WARN
    assert "2 problem(s)" in r.summary
    assert r.details[0] == ("GPU 0000:5c:00.0: uuid is 'GPU-a' in /proc/driver/nvidia but "
                            "'GPU-b' in nvidia-smi")
    assert "timed out" in r.details[1]
    assert "/usr/local/nvidia/bin/nvidia-smi" in r.fix


def test_inventory_with_no_gpu_facts_warns_and_without_gpu_nodes_skips() -> None:
    f = healthy()
    assert f.worker_gpus is not None
    empty = replace(f.worker_gpus, gpus=())
    assert result(replace(f, worker_gpus=empty), "gpu-inventory").status is Status.WARN
    r = result(replace(f, gpu_nodes=()), "gpu-inventory")
    assert r.status is Status.SKIP and "gpu-nodes" in r.summary


def test_unknown_facts_are_shown_as_unknown() -> None:
    f = healthy()
    assert f.worker_gpus is not None
    bare = GpuFacts(0, None, "GPU-a0000000-0000-4000-8000-000000000000", "NVIDIA H200",
                    "0000:59:00.0")
    r = result(replace(f, worker_gpus=replace(f.worker_gpus, gpus=(bare,))), "gpu-inventory")
    assert r.details[0].endswith("minor ?, GPU-a0000000-0000-4000-8000-000000000000, "
                                 "0000:59:00.0, ? NVIDIA H200, memory ?")


# -- gpu-placement ----------------------------------------------------------------


@pytest.mark.parametrize(("policy", "gpus", "actors", "expected", "says"), [
    ("shared", 2, 1, Status.PASS, "shared: 2 GPU(s), --max-actors 1"),
    ("shared:2", 8, 4, Status.PASS, "shared:2: 8 GPU(s), --max-actors 4"),
    ("shared:4", 8, 4, Status.PASS, "shared:4"),
    ("exclusive", 8, 8, Status.PASS, "exclusive: 8 GPU(s), --max-actors 8"),
    ("exclusive", 2, 4, Status.WARN, "at most 2 GPU actor(s) run at once"),
    ("shared:8", 8, 2, Status.WARN, "the cap of 8 actors per GPU never binds"),
])
def test_placement_policy_against_gpus_and_max_actors(
        policy: str, gpus: int, actors: int, expected: Status, says: str) -> None:
    f = healthy()
    f = replace(f, gpu_nodes=gpu_nodes(gpus),
                config=doctor_config(f.config, gpu_placement=policy, max_actors=actors))
    r = result(f, "gpu-placement")
    assert r.status is expected, r
    assert says in r.summary
    assert bool(r.fix) == (expected is Status.WARN)


def test_exclusive_sharing_names_the_default_request_that_takes_every_gpu() -> None:
    f = healthy()
    f = replace(f, gpu_nodes=gpu_nodes(4),
                config=doctor_config(f.config, gpu_placement="exclusive", max_actors=2))
    r = result(f, "gpu-placement")
    assert r.status is Status.PASS and "gets all of them" in r.details[0]


def test_a_policy_serve_would_refuse_fails_even_without_gpus() -> None:
    f = healthy()
    f = replace(f, gpu_nodes=(), config=doctor_config(f.config, gpu_placement="shared:0"))
    r = result(f, "gpu-placement")
    assert r.status is Status.FAIL
    assert "--gpu-placement 'shared:0'" in r.summary and "refuses to start" in r.summary
    assert "exclusive, shared or shared:N" in r.fix
    ok = replace(f, config=doctor_config(f.config, gpu_placement="exclusive"))
    r = result(ok, "gpu-placement")
    assert r.status is Status.SKIP and "policy exclusive" in r.summary


# -- cdi-mps ------------------------------------------------------------------------

MPS_EDITS = ContainerEdits(
    env=("CUDA_MPS_PIPE_DIRECTORY=/tmp/nvidia-mps",),
    mounts=(Mount("/var/lib/kubelet/plugins/gpu.resource.nvidia.com/mps/c1/pipe",
                  "/tmp/nvidia-mps", options=("rw", "bind")),))
MPS = MpsVerdict(mps_in_edits("k8s.gpu.nvidia.com/claim=c1-gpu-0", MPS_EDITS,
                              spec_path="/var/run/cdi/claim.json"))
SHM_ONLY = MpsVerdict(mps_in_edits("example.com/nccl=0", ContainerEdits(
    mounts=(Mount("/run/shm-big", "/dev/shm", options=("rbind",)),))))


def with_mps(f: Facts, mps: MpsFact | None) -> Facts:
    return replace(f, spec=replace(f.spec, mps=mps))


def test_mps_in_the_default_devices_fails_naming_device_and_edit() -> None:
    r = result(with_mps(healthy(), MpsFact(default=MPS, devices_scanned=3)), "cdi-mps")
    assert r.status is Status.FAIL
    assert "nvidia.com/gpu=all" in r.summary and "refused" in r.summary
    assert r.details[0].startswith("k8s.gpu.nvidia.com/claim=c1-gpu-0 "
                                   "(/var/run/cdi/claim.json): env CUDA_MPS_PIPE_DIRECTORY=")
    assert "gVisor" in r.fix and "--gpu-placement" in r.fix


def test_mps_in_other_devices_warns_naming_them() -> None:
    r = result(with_mps(healthy(), MpsFact(others=MPS, devices_scanned=3)), "cdi-mps")
    assert r.status is Status.WARN
    assert "1 device(s) express NVIDIA MPS" in r.summary
    assert "k8s.gpu.nvidia.com/claim=c1-gpu-0" in r.summary
    assert len(r.details) == 2


def test_a_dev_shm_bind_alone_warns_softly_and_no_mps_passes() -> None:
    r = result(with_mps(healthy(), MpsFact(others=SHM_ONLY, devices_scanned=1)), "cdi-mps")
    assert r.status is Status.WARN and r.fix.startswith("harmless unless")
    r = result(healthy(), "cdi-mps")
    assert (r.status, r.summary) == (Status.PASS, "no device expresses NVIDIA MPS (3 scanned)")
    assert result(with_mps(healthy(), None), "cdi-mps").status is Status.SKIP


# -- cuda-checkpoint ----------------------------------------------------------------

NOT_FOUND = CudaCheckpointFacts(("/usr/local/nvidia/bin", "/opt/nvidia-toolkit", "$PATH"))


def test_a_runnable_cuda_checkpoint_passes_with_its_version() -> None:
    r = result(healthy(), "cuda-checkpoint")
    assert r.status is Status.PASS
    assert r.summary.startswith("/usr/local/nvidia/bin/cuda-checkpoint 590.44.01 (options:")


def test_none_found_warns_that_gpu_checkpoints_will_be_refused() -> None:
    r = result(replace(healthy(), cuda_checkpoint=NOT_FOUND), "cuda-checkpoint")
    assert r.status is Status.WARN
    assert r.summary.startswith("GPU checkpoints will be refused: cuda-checkpoint not found "
                                "in /usr/local/nvidia/bin, /opt/nvidia-toolkit or $PATH")
    assert "ATEOM_CUDA_CHECKPOINT" in r.fix
    assert r.details == ("looked in: /usr/local/nvidia/bin", "looked in: /opt/nvidia-toolkit",
                         "looked in: $PATH")


def test_a_configured_one_that_is_missing_or_broken_fails() -> None:
    missing = CudaCheckpointFacts(("/opt/cc/cuda-checkpoint",), configured=True)
    f = expecting_checkpoints(replace(healthy(), cuda_checkpoint=missing))
    r = result(f, "cuda-checkpoint")
    assert r.status is Status.FAIL
    assert r.summary == ("/opt/cc/cuda-checkpoint does not exist: fix --cuda-checkpoint or "
                         "install cuda-checkpoint there")
    broken = CudaCheckpointFacts(("/opt/cc/cuda-checkpoint",), "/opt/cc/cuda-checkpoint",
                                 configured=True, executable=True,
                                 error="--help (exit 0) lists no --toggle: 'hello'")
    f = expecting_checkpoints(replace(healthy(), cuda_checkpoint=broken))
    r = result(f, "cuda-checkpoint")
    assert r.status is Status.FAIL and "does not behave like NVIDIA's" in r.summary


# -- cuda-checkpoint-driver ---------------------------------------------------------


def with_driver(f: Facts, version: str, gpus: int = 2) -> Facts:
    assert f.worker_gpus is not None
    return replace(f, gpu_nodes=gpu_nodes(gpus), host_driver_version=version,
                   worker_gpus=replace(f.worker_gpus, driver_version=version))


def test_driver_below_r550_warns_or_fails_by_whether_checkpoints_are_expected() -> None:
    old = with_driver(healthy(), "525.89.02")
    r = result(old, "cuda-checkpoint-driver")
    assert r.status is Status.WARN
    assert r.summary.startswith("GPU checkpoints will be refused: driver 525.89.02 < R550")
    assert "R550+" in r.fix
    assert result(expecting_checkpoints(old), "cuda-checkpoint-driver").status is Status.FAIL


def test_driver_between_r550_and_r580_warns_each_limit() -> None:
    r = result(with_driver(healthy(), "550.54.15"), "cuda-checkpoint-driver")
    assert r.status is Status.WARN
    assert not r.summary.startswith("GPU checkpoints will be refused")
    assert [d.split(":")[0] for d in r.details] == ["driver 550.54.15 < R555",
                                                    "driver 550.54.15 < R580"]


def test_multi_gpu_on_r610_warns_with_the_launch_job_reason() -> None:
    r = result(with_driver(healthy(), "610.57.04", gpus=2), "cuda-checkpoint-driver")
    assert r.status is Status.WARN
    assert "--launch-job" in r.summary and "--cuda-checkpoint-sequential" in r.summary
    one = result(with_driver(healthy(), "610.57.04", gpus=1), "cuda-checkpoint-driver")
    assert one.status is Status.PASS


def test_multi_gpu_on_r610_without_the_tools_for_it_is_a_refusal() -> None:
    f = with_driver(healthy(), "610.57.04", gpus=2)
    no_seq = replace(f, runsc=replace(f.runsc, cuda_checkpoint_sequential=False))
    r = result(no_seq, "cuda-checkpoint-driver")
    assert r.status is Status.WARN
    assert r.summary.startswith("GPU checkpoints will be refused") and "release-20260615.0" \
        in r.summary
    assert result(expecting_checkpoints(no_seq), "cuda-checkpoint-driver").status is \
        Status.FAIL
    assert f.cuda_checkpoint is not None
    old_tool = replace(f, cuda_checkpoint=replace(f.cuda_checkpoint, help=replace(
        HELP_590, version="570.86.10", options=HELP_590.options - {"launch-job"})))
    r = result(old_tool, "cuda-checkpoint-driver")
    assert "has no --launch-job" in r.summary


def test_unknown_driver_is_named_and_no_gpus_skip() -> None:
    r = result(with_driver(healthy(), ""), "cuda-checkpoint-driver")
    assert r.status is Status.WARN and "driver version unknown" in r.summary
    assert result(replace(healthy(), gpu_nodes=()), "cuda-checkpoint-driver").status is \
        Status.SKIP


def test_the_inventorys_driver_wins_over_the_doctors_own_guess() -> None:
    # The inventory reads the kernel module; the fallback may be a library's file name.
    f = replace(with_driver(healthy(), "525.89.02"), host_driver_version="580.65.06")
    assert result(f, "cuda-checkpoint-driver").status is Status.WARN


# -- runsc-gpu-checkpoint -----------------------------------------------------------


def test_runsc_with_cuda_checkpoint_path_passes_and_says_what_else_it_can() -> None:
    r = result(healthy(), "runsc-gpu-checkpoint")
    assert r.status is Status.PASS
    assert r.summary == ("runsc release-20260817.0 offers checkpoint --cuda-checkpoint-path "
                         "(release-20260608.0+)")
    assert r.details == (
        "checkpoint --cuda-checkpoint-sequential (multi-GPU on R610+, release-20260615.0+): yes",
        "remaps GPUs on restore (release-20260706.0+): yes")


def test_runsc_without_it_names_the_release_that_added_it() -> None:
    f = healthy()
    old = replace(f, runsc=replace(f.runsc, version="release-20260525.0",
                                   cuda_checkpoint_path=False, cuda_checkpoint_sequential=False))
    r = result(old, "runsc-gpu-checkpoint")
    assert r.status is Status.WARN
    assert "release-20260525.0 has no `checkpoint --cuda-checkpoint-path` (added in " \
        "release-20260608.0)" in r.summary
    assert "remaps GPUs on restore (release-20260706.0+): no" in r.details
    assert result(expecting_checkpoints(old), "runsc-gpu-checkpoint").status is Status.FAIL
    debian = replace(old, runsc=replace(old.runsc, version="0.0~20221219.0",
                                        supports_nvproxy=False))
    assert result(debian, "runsc-gpu-checkpoint").status is Status.SKIP


def test_a_runsc_version_without_a_date_cannot_say_whether_it_remaps() -> None:
    f = healthy()
    r = result(replace(f, runsc=replace(f.runsc, version="custom-build")),
               "runsc-gpu-checkpoint")
    assert "remaps GPUs on restore (release-20260706.0+): unknown" in r.details[1]

