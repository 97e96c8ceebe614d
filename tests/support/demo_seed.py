"""The seed's actor, for ``scripts/demo_seed.sh`` (the demo's last step) and
docs/quickstart.md ("The seed, by hand"): Agent Substrate's first GPU actor, ``gpu-1`` in
atespace ``gpu-demo``, an HTTP app on port 80 that answers ``GET /gpu`` by running
nvidia-smi, reached as Substrate's router reaches it:

    curl -H 'Host: gpu-1.gpu-demo.actors.resources.substrate.ate.dev' \\
        https://<worker>:<ingress port>/gpu      (mTLS, the router's SPIFFE id)

``python -m tests.support.demo_seed`` (from the clone's root, in its venv):

- ``why-not RUNSC``: one line saying why the seed cannot run here on RUNSC as the real
  runsc (exit 1), or nothing (exit 0). The ingress reaches an actor only on a network of
  its own, which needs a runsc that takes network namespaces over on this kernel
  (`ateom.network.netns_problem`, as the daemon and ``ateom doctor`` judge it); the
  certificates need the openssl CLI.
- ``worker DIR --real-runsc RUNSC``: a simulated one-GPU worker and the seed's bundles in
  DIR (writes files; no root), laid out as `SeedWorker` says (fixed names: the quick
  start spells the paths).
- ``get ADDRESS PATH --certs DIR``: one GET through the ingress at ADDRESS as the router
  sends it (the seed's Host, the router's client certificate), printed as
  ``HTTP <status>``, ``Retry-After: <s>`` when there is one, then the body: the demo's
  router, as curl is not on a fresh Debian (the quick start uses curl).

The worker is the demo's kind (`tests.support.gpu_node`, `write_sim_gpu_spec`, the
emulated gVisor release in front of a real runsc), plus what a real runsc of 2026 needs
of a GPU node that the demo's Debian runsc does not: ``/dev/nvidia0``, ``nvidiactl`` and
``nvidia-uvm`` at their paths (``bin/with-gpu-nodes CMD``: CMD in a mount namespace of
its own where they are stand-ins, `tests.support.stand_in_gpu`) and the toolkit's
nvidia-cdi-hook (a stand-in in ``toolkit/``). Its nvidia-smi stand-in answers what the app
asks too, and its CDI spec mounts that stand-in read-only at ``/usr/bin/nvidia-smi``, with
the recorded output it prints at the path it reads it from, as ``nvidia-ctk cdi
generate`` mounts the host's nvidia-smi into every GPU container.
"""

from __future__ import annotations

import argparse
import http.client
import json
import shlex
import shutil
import ssl
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from ateom.gpuinfo.inventory import COMPUTE_APPS_ARGS
from tests.support import (
    DEFAULT_DRIVER_VERSION,
    build_busybox_bundle,
    build_fake_driver_libs,
    install_cuda_checkpoint_stub,
    install_runsc,
    write_sim_gpu_spec,
)
from tests.support import SimGpu as EmulatedGpu
from tests.support.certs import make_certs
from tests.support.gpu_node import SimGpu, write_gpu_node, write_sim_fixture
from tests.support.stand_in_gpu import install_cdi_hook_stand_in, stand_in_gpu_prefix

ATESPACE = "gpu-demo"
NAME = "gpu-1"
UID = "seed-gpu-1"  # the node agent's id for the actor; the router knows it by name
HOST = f"{NAME}.{ATESPACE}.actors.resources.substrate.ate.dev"
RELEASE = "20260817"  # the gVisor release the worker's runsc answers as (the demo's)
GPU = SimGpu(index=0, minor=0, uuid="GPU-5eed0001-0000-4000-8000-00000000abcd")
# What the app runs for GET /gpu (the stand-in prints nvidia-smi's formats for them).
SMI_LIST = "-L"
SMI_QUERY = "--query-gpu=name,driver_version,memory.total --format=csv"

# The app: busybox nc hands each connection to `handle` (-ll: a process per connection,
# so a slow request holds no other up), and is started again when it ends: it exits on
# a failed accept(2), which Debian's runsc 0.0~20240729 fails once (EINTR) after a
# restore. /count's count is kept in the sandbox's memory: /tmp is on runsc's root
# overlay, whose upper layer is sandbox memory (its filestore goes with the sandbox) that
# a checkpoint saves in its image, so only a restore from that image makes the count go
# on. /slow is a request a checkpoint catches in flight.
SERVE = "while true; do nc -ll -p 80 -e /app/handle; done\n"
HANDLE = f"""#!/bin/sh
# One HTTP request on stdin, its answer on stdout (busybox nc -ll -e: a run per connection).
cr=$(printf '\\r')
read -r method path version
while read -r line && [ "$line" != "$cr" ] && [ -n "$line" ]; do :; done
status="200 OK"
case "$path" in
/gpu) body=$(nvidia-smi {SMI_LIST} 2>&1; nvidia-smi {SMI_QUERY} 2>&1
             echo "device nodes: $(echo /dev/nvidia*)");;
/count) n=$(cat /tmp/count 2>/dev/null || echo 0); n=$((n + 1)); echo "$n" >/tmp/count
        body=$n;;
/slow) sleep 10; body="slow done";;
*) status="404 Not Found"; body="no $path here: GET /gpu, /count or /slow";;
esac
printf 'HTTP/1.1 %s\\r\\nContent-Type: text/plain\\r\\nContent-Length: %d\\r\\n' \\
    "$status" $((${{#body}} + 1))
printf 'Connection: close\\r\\n\\r\\n%s\\n' "$body"
"""


def smi_answers(gpu: SimGpu, driver: str) -> dict[str, str]:
    """What nvidia-smi prints for the app's two asks about `gpu`, and for ateom's at a
    checkpoint (nothing: no process holds GPU memory, the seed has no CUDA)."""
    return {
        SMI_LIST: f"GPU {gpu.index}: {gpu.name} (UUID: {gpu.uuid})\n",
        SMI_QUERY: (f"name, driver_version, memory.total [MiB]\n"
                    f"{gpu.name}, {driver}, {gpu.memory_mib} MiB\n"),
        " ".join(COMPUTE_APPS_ARGS): "",
    }


@dataclass(frozen=True)
class SeedWorker:
    """Where everything of the seed's worker lies (`at`)."""

    base: Path
    node: Path             # proc/, dev/nvidia0, bin/nvidia-smi: ateom's --proc-root, ...
    spec_dir: Path         # the nvidia.com/gpu CDI spec
    runsc: Path            # the emulated release, in front of the real runsc
    with_gpu_nodes: Path   # `with-gpu-nodes CMD...` (module doc)
    toolkit: Path          # $ATEOM_NVIDIA_TOOLKIT_DIR: the stand-in nvidia-cdi-hook
    cuda_checkpoint: Path  # ateom's --cuda-checkpoint: a stand-in
    certs: Path            # root.pem, worker-credential-bundle.pem, router.pem/.key
    actors: Path           # --actors-root; the seed's bundles in actors/<UID>/bundles

    @classmethod
    def at(cls, base: Path) -> SeedWorker:
        b = base.resolve()
        return cls(b, node=b / "node", spec_dir=b / "cdi", runsc=b / "bin" / "runsc",
                   with_gpu_nodes=b / "bin" / "with-gpu-nodes", toolkit=b / "toolkit",
                   cuda_checkpoint=b / "cuda-checkpoint" / "cuda-checkpoint",
                   certs=b / "certs", actors=b / "actors")


def _nvidia_smi_mounts(spec: Path, node: Path) -> None:
    """The spec's nvidia-smi mounts (module doc); the spec is written here, as JSON."""
    data = json.loads(spec.read_text())
    options = ["ro", "nosuid", "nodev", "rbind", "rprivate"]
    data["containerEdits"].setdefault("mounts", []).extend([
        {"hostPath": str(node / "bin" / "nvidia-smi"), "containerPath": "/usr/bin/nvidia-smi",
         "options": options},
        # The stand-in is a script that prints files of the node: they go where it reads.
        {"hostPath": str(node / "nvidia-smi"), "containerPath": str(node / "nvidia-smi"),
         "options": options}])
    spec.write_text(json.dumps(data, indent=2) + "\n")


def build_worker(base: Path, real_runsc: str) -> SeedWorker:
    """The simulated one-GPU worker and the seed's bundles (module doc)."""
    w = SeedWorker.at(base)
    fixture = write_sim_fixture(w.base / "gpu-fixture", [GPU],
                                driver_version=DEFAULT_DRIVER_VERSION)
    write_gpu_node(w.node, fixture, also=smi_answers(GPU, DEFAULT_DRIVER_VERSION))
    libs = build_fake_driver_libs(w.base / "driver" / "lib64")
    _nvidia_smi_mounts(write_sim_gpu_spec(w.spec_dir, libs, gpus=1), w.node)
    # It records into the container's /tmp: the seed holds no CUDA context, so runsc never
    # runs it, but a GPU checkpoint needs the worker's cuda-checkpoint to be there.
    install_cuda_checkpoint_stub(w.cuda_checkpoint.parent, record_dir="/tmp")
    install_runsc(RELEASE, w.runsc.parent, real_runsc=real_runsc, gpus=[EmulatedGpu(
        uuid=GPU.uuid, minor=GPU.minor, pci_device_id=GPU.pci_device_word >> 16)])
    install_cdi_hook_stand_in(w.toolkit)
    prefix = stand_in_gpu_prefix(w.base / "dev-scratch", 1)
    w.with_gpu_nodes.write_text(f'#!/bin/sh\nexec {shlex.join(prefix)} "$@"\n')
    w.with_gpu_nodes.chmod(0o755)
    w.certs.mkdir(parents=True, exist_ok=True)
    make_certs(w.certs)
    bundles = w.actors / UID / "bundles"
    build_busybox_bundle(bundles / "_pause", ["sleep", "100000"])
    app = build_busybox_bundle(bundles / "app", ["sh", "/app/serve"]) / "rootfs" / "app"
    app.mkdir()
    (app / "serve").write_text(SERVE)
    (app / "handle").write_text(HANDLE)
    (app / "handle").chmod(0o755)
    return w


def why_not(real_runsc: str) -> str:
    """Why the seed cannot run here on `real_runsc`, "" when it can (probes the binary)."""
    from ateom.errors import AteomError
    from ateom.network import netns_problem
    from ateom.runsc.probe import probe_runsc

    try:
        problem = netns_problem(probe_runsc(real_runsc))
    except AteomError as exc:
        problem = str(exc)
    if not problem and shutil.which("openssl") is None:
        problem = "no openssl CLI to make the demo's certificates with (apt-get install openssl)"
    return problem


def get(address: str, path: str, certs: Path, host: str = HOST, timeout: float = 30
        ) -> tuple[int, dict[str, str], str]:
    """One GET as the router sends it: (status, headers, body). The worker's certificate
    is verified against the trust bundle (it names 127.0.0.1 and localhost)."""
    name, _, port = address.rpartition(":")
    context = ssl.create_default_context(cafile=str(certs / "root.pem"))
    context.load_cert_chain(str(certs / "router.pem"), str(certs / "router.key"))
    conn = http.client.HTTPSConnection(name, int(port), context=context, timeout=timeout)
    try:
        conn.request("GET", path, headers={"Host": host})
        answer = conn.getresponse()
        return answer.status, dict(answer.getheaders()), answer.read().decode(errors="replace")
    finally:
        conn.close()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.support.demo_seed")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("why-not", help="why the seed cannot run on this real runsc here")
    p.add_argument("runsc")
    p = sub.add_parser("worker", help="the simulated worker and the seed's bundles")
    p.add_argument("dir", type=Path)
    p.add_argument("--real-runsc", required=True)
    p = sub.add_parser("get", help="one GET through the ingress, as the router sends it")
    p.add_argument("address", help="HOST:PORT of the ingress")
    p.add_argument("path")
    p.add_argument("--certs", type=Path, required=True)
    args = parser.parse_args(argv)
    if args.command == "why-not":
        problem = why_not(args.runsc)
        if problem:
            print(problem)
        return 1 if problem else 0
    if args.command == "worker":
        # The emulator runs it from wherever ateom runs: a name or relative path, made whole.
        real = str(Path(shutil.which(args.real_runsc) or args.real_runsc).resolve())
        w = build_worker(args.dir, real)
        print(f"worker in {w.base}: 1 simulated GPU ({GPU.name}, {GPU.uuid}, driver"
              f" {DEFAULT_DRIVER_VERSION}); runsc release-{RELEASE} emulated in front of"
              f" {real}; certificates; the seed's bundles")
        return 0
    status, headers, body = get(args.address, args.path, args.certs)
    print(f"HTTP {status}")
    if "Retry-After" in headers:
        print(f"Retry-After: {headers['Retry-After']}")
    print(body, end="" if body.endswith("\n") else "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
