# The ateom GPU worker image: `ateom serve` as PID 1, runsc next to it.
#
#   podman build -t ateom-worker .          # or: docker build -t ateom-worker .
#
# Which runsc the image holds, first match wins (deploy/image/install-runsc.sh decides,
# prints what it got, and records it in /usr/local/share/ateom/runsc.source):
#   1. --build-arg RUNSC_BINARY=<https URL>  --build-arg RUNSC_SHA512=<hex>   (required
#      with a URL), or RUNSC_BINARY=deploy/runsc-<anything> (a file of the build context);
#   2. deploy/runsc in the build context (checked against deploy/runsc.sha512 if present);
#   3. else Debian's runsc package of the base's suite. On Debian 13 that is 0.0~20240729:
#      nvproxy, checkpoint and multi-container restore, for NVIDIA drivers up to 550.90.07
#      only. A node with a newer driver needs a gVisor release (1. or 2.): ateom refuses a
#      GPU actor whose driver its runsc does not list, naming both.
# `ateom doctor` inside the Pod says the version and the drivers it supports.
#
# Debian slim, not Alpine: the host's NVIDIA container toolkit binaries mounted into the
# worker (/opt/nvidia-toolkit) and the driver libraries are glibc-dynamic. Debian 13: its
# runsc is the oldest with nvproxy and multi-container restore; bookworm's (2022) has neither.
#
# No `# syntax=` line on purpose: it makes BuildKit pull a frontend image from a registry,
# which an offline or mirrored build cannot; everything here is in BuildKit's built-in one
# and in buildah's.

# Pinned to a point release; pin by digest too in a production registry mirror:
# --build-arg BASE_IMAGE=debian@sha256:<digest>.
ARG BASE_IMAGE=debian:13.2-slim

# ---------------------------------------------------------------- build: a venv with ateom
FROM ${BASE_IMAGE} AS build
# apt packages follow the base's suite, unpinned: Debian keeps only the newest
# version of a package in its archive, so an exact pin breaks the build at the next
# point or security release. ca-certificates: pip (and a runsc URL) over TLS.
# hadolint ignore=DL3008
RUN apt-get update \
    && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
        python3 python3-venv ca-certificates \
    && rm -rf /var/lib/apt/lists/*
# The venv lives at the same path in the final stage, so its scripts' shebangs stay valid.
RUN python3 -m venv /opt/ateom
WORKDIR /src
COPY pyproject.toml README.md constraints.txt ./
COPY ateom ./ateom
# The versions CI tested (constraints.txt), then pip itself removed: the final image
# installs nothing at run time, and a pip there is only something for scanners to flag.
RUN /opt/ateom/bin/pip install --no-cache-dir --disable-pip-version-check \
        -c constraints.txt . \
    && /opt/ateom/bin/python -m pip uninstall -y -q pip \
    && left=$(find /opt/ateom \( -name pip -o -name 'pip[0-9]*' -o -name setuptools \) -print) \
    && if [ -n "$left" ]; then echo "left in /opt/ateom: $left" >&2; exit 1; fi \
    && /opt/ateom/bin/ateom --version

# ---------------------------------------------------------------- runsc, chosen once
# One stage whatever the source: a stage picked by an ARG in its FROM is skipped by
# buildah when the ARG keeps its default (containers/buildah#4820).
FROM build AS runsc
ARG RUNSC_BINARY=""
ARG RUNSC_SHA512=""
# Copied, not bind-mounted: buildah keys a RUN's cache on its command alone, so a changed
# deploy/runsc behind a mount would reuse the last build's runsc. The glob may match
# nothing (no release binary given): the script itself is always there.
COPY deploy/image/install-runsc.sh deploy/runsc* /context/deploy/
RUN sh /context/deploy/install-runsc.sh /context /out

# ---------------------------------------------------------------- the worker image
FROM ${BASE_IMAGE} AS worker
LABEL org.opencontainers.image.title="ateom" \
      org.opencontainers.image.description="In-worker sandbox launcher: gVisor actors with CDI GPUs" \
      org.opencontainers.image.licenses="Apache-2.0"
# python3: ateom itself. nftables: `nft`, through which ateom installs the rules that
# keep each actor's network to itself (ateom.network). busybox-static: nothing at
# runtime, but operators' `kubectl exec` gets a shell and ls in an otherwise bare image.
# No compilers, no pip. Unpinned: see the build stage.
# hadolint ignore=DL3008
RUN apt-get update \
    && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
        python3 nftables busybox-static \
    && rm -rf /var/lib/apt/lists/* \
    && mkdir -p /run/ateom /var/lib/ateom/actors \
    && chmod 0700 /run/ateom
COPY --from=build /opt/ateom /opt/ateom
COPY --from=runsc /out/runsc /usr/local/bin/runsc
COPY --from=runsc /out/runsc.source /usr/local/share/ateom/runsc.source
# The toolkit and driver dirs are settings, not PATH entries: ateom looks for nvidia-ctk
# in $ATEOM_NVIDIA_TOOLKIT_DIR, then $ATEOM_NVIDIA_DRIVER_ROOT/bin, then PATH. These are
# the env twins of `ateom serve --driver-root/--toolkit-dir`, read under the same names
# by `ateom doctor`, `ateom inject` and `ateom cdi`. No socket or actors root here: started
# by Substrate's controller (--pod-uid), they are the shared base dir's
# (<base>/ateoms/<pod uid>/ateom.sock, <base>/actors), which an image default would hide;
# the standalone example Pod (deploy/gpu-worker-pod.yaml) sets both.
# ATEOM_RUNSC_GLOBAL_FLAGS: runsc's global flags on every call, a default because Substrate's
# controller sets no ATEOM_* variable (deploy/substrate-worker-deployment.yaml; measured by
# tests/ops/test_substrate_deployment.py, where every RunWorkload fails without it):
#  --ignore-cgroups: a container that is not privileged gets cgroupfs read-only (containerd
#    and CRI-O alike), so runsc cannot make a cgroup per sandbox ("mkdir
#    /sys/fs/cgroup/cpuset/<id>: read-only file system"); actors run in the Pod's cgroup,
#    bounded together by its limits, their own cpu_milli/memory_bytes not enforced.
# No --network=none: ateom gives each actor a network namespace of its own (the
# controller's Deployment adds NET_ADMIN and NET_RAW), which the ingress, wakeup probes and
# egress need; where the image's runsc cannot take a namespace (Debian's 0.0~20240729 on
# kernels that give every namespace rmem_default) its actors run with --network=none, and
# `ateom doctor`'s runsc-network says so. A Pod that sets the variable replaces it.
ENV PATH=/opt/ateom/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    ATEOM_RUNSC=/usr/local/bin/runsc \
    ATEOM_NVIDIA_DRIVER_ROOT=/usr/local/nvidia \
    ATEOM_NVIDIA_TOOLKIT_DIR=/opt/nvidia-toolkit \
    ATEOM_RUNSC_GLOBAL_FLAGS="--ignore-cgroups"
# Root is required, on purpose and only for these reasons:
#  - runsc create/restore sets up namespaces, mounts, chroot/pivot_root and the gofer, and
#    changes the sandbox's uid; unprivileged runsc (--rootless) has no nvproxy and no
#    checkpoint of GPU sandboxes;
#  - nvproxy opens /dev/nvidiactl, /dev/nvidia-uvm and /dev/nvidiaN on the host;
#  - runsc chowns each container's stdio log files to the sandbox user.
# Everything else (`ateom doctor`, `ateom cdi ...`, `ateom inject --dry-run`) runs as any
# user: the files in the image are root-owned and read-only to others.
# hadolint ignore=DL3002
USER 0:0
# ateom serve is PID 1: it reaps sandbox processes itself and drains on SIGTERM.
STOPSIGNAL SIGTERM
ENTRYPOINT ["ateom", "serve"]
CMD []
