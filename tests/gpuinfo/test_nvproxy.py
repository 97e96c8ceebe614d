"""gpuinfo/nvproxy: a restore onto other GPUs keeps the node paths it was saved with."""

from __future__ import annotations

from ateom.cdi.model import ContainerEdits, DeviceNode, EditStep, Resolution
from ateom.gpuinfo.nvproxy import gpu_node_path, keep_saved_paths, node_minor


def test_node_paths_and_minors() -> None:
    assert gpu_node_path(7) == "/dev/nvidia7" and node_minor("/dev/nvidia7") == 7
    assert node_minor("/dev/nvidiactl") is None and node_minor("/dev/nvidia-uvm") is None
    assert node_minor("/dev/null") is None


def test_a_moved_gpu_keeps_its_saved_path_and_points_at_the_new_host_node() -> None:
    control = DeviceNode("/dev/nvidiactl", host_path="/dev/zero")
    gpu2 = DeviceNode("/dev/nvidia2", host_path="/dev/full")
    gpu3 = DeviceNode("/dev/nvidia3")  # no host path: the host's own node
    resolution = Resolution(
        ("nvidia.com/gpu=2", "nvidia.com/gpu=3"),
        (EditStep("nvidia.com/gpu (spec-level)", "/etc/cdi/n.json",
                  ContainerEdits(device_nodes=(control,))),
         EditStep("nvidia.com/gpu=2", "/etc/cdi/n.json", ContainerEdits(device_nodes=(gpu2,))),
         EditStep("nvidia.com/gpu=3", "/etc/cdi/n.json", ContainerEdits(device_nodes=(gpu3,)))))
    kept = keep_saved_paths(resolution, {"/dev/nvidia2": "/dev/nvidia0",
                                         "/dev/nvidia3": "/dev/nvidia1"})
    nodes = [n for s in kept.steps for n in s.edits.device_nodes]
    assert nodes == [control, DeviceNode("/dev/nvidia0", host_path="/dev/full"),
                     DeviceNode("/dev/nvidia1", host_path="/dev/nvidia3")]
    assert kept.devices == resolution.devices
    assert keep_saved_paths(resolution, {}) is resolution
