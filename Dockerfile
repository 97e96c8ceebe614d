# syntax=docker/dockerfile:1.7
#
# The ateom GPU worker image: `ateom serve` as PID 1, runsc next to it.
#
#   docker build -t ateom-worker .                                  # runsc from Debian
#   docker build --build-arg RUNSC_FROM=binary \
#       --build-arg RUNSC_BINARY=https://storage.googleapis.com/gvisor/releases/release/latest/x86_64/runsc \
#       --build-arg RUNSC_SHA512=<sha512 of that file> -t ateom-worker .   # a gVisor release
#
# GPUs need a runsc with --nvproxy: Debian bookworm's runsc (a 2022 build) has none, so a
# GPU worker must be built with RUNSC_FROM=binary (a release URL or a path in the build
# context). `ateom doctor` inside the Pod says which one the image got.
#
# Debian slim, not Alpine: the host's NVIDIA container toolkit binaries mounted into the
# worker (/opt/nvidia-toolkit) and the driver libraries are glibc-dynamic.

# Pinned by dated tag (a rebuild gets the same Debian point release); pin by digest too
# in a production registry mirror: --build-arg BASE_IMAGE=debian@sha256:<digest>.
ARG BASE_IMAGE=debian:bookworm-20241202-slim
# Where runsc comes from: "debian" (the bookworm package) or "binary" (RUNSC_BINARY).
ARG RUNSC_FROM=debian
# A runsc release URL or a path inside the build context; used when RUNSC_FROM=binary.
ARG RUNSC_BINARY=deploy/runsc
ARG RUNSC_DEBIAN_VERSION=0.0~20221219.0-2+b3

# ---------------------------------------------------------------- build: a venv with ateom
FROM ${BASE_IMAGE} AS build
# apt packages follow the base's suite, unpinned: Debian keeps only the newest
# version of a package in its archive, so an exact pin breaks the build at the next
# point or security release (busybox-static went 1:1.35.0-4+b3 -> +deb12u1+b1).
# runsc alone is pinned: its version decides which runsc features `ateom doctor` reports.
# hadolint ignore=DL3008
RUN apt-get update \
    && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
        python3 python3-venv \
    && rm -rf /var/lib/apt/lists/*
# The venv lives at the same path in the final stage, so its scripts' shebangs stay valid.
RUN python3 -m venv /opt/ateom
WORKDIR /src
COPY pyproject.toml README.md ./
COPY ateom ./ateom
RUN /opt/ateom/bin/pip install --no-cache-dir --disable-pip-version-check . \
    && /opt/ateom/bin/ateom --version

# ---------------------------------------------------------------- runsc, two sources
FROM ${BASE_IMAGE} AS runsc-debian
ARG RUNSC_DEBIAN_VERSION
RUN apt-get update \
    && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
        "runsc=${RUNSC_DEBIAN_VERSION}" \
    && install -D -m 0755 /usr/bin/runsc /out/runsc \
    && rm -rf /var/lib/apt/lists/*

FROM ${BASE_IMAGE} AS runsc-binary
ARG RUNSC_BINARY
ARG RUNSC_SHA512=""
# ADD, not COPY: RUNSC_BINARY may be a release URL, which only ADD fetches.
# hadolint ignore=DL3020
ADD --chmod=0755 ${RUNSC_BINARY} /out/runsc
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
# A downloaded binary is checked when a checksum is given; a context path is trusted as built.
RUN if [ -n "${RUNSC_SHA512}" ]; then \
        echo "${RUNSC_SHA512}  /out/runsc" | sha512sum -c -; \
    fi \
    && /out/runsc --version

# BuildKit builds only the stage this line names. (A stage of this file, not an image:
# nothing to tag.)
# hadolint ignore=DL3006
FROM runsc-${RUNSC_FROM} AS runsc

# ---------------------------------------------------------------- the worker image
FROM ${BASE_IMAGE} AS worker
LABEL org.opencontainers.image.title="ateom" \
      org.opencontainers.image.description="In-worker sandbox launcher: gVisor actors with CDI GPUs" \
      org.opencontainers.image.licenses="Apache-2.0"
# python3: ateom itself. busybox-static: nothing at runtime, but operators' `kubectl exec`
# gets a shell and ls in an otherwise bare image. No compilers, no pip. Unpinned: see
# the build stage.
# hadolint ignore=DL3008
RUN apt-get update \
    && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
        python3 busybox-static \
    && rm -rf /var/lib/apt/lists/* \
    && mkdir -p /run/ateom /var/lib/ateom/actors \
    && chmod 0700 /run/ateom
COPY --from=build /opt/ateom /opt/ateom
COPY --from=runsc /out/runsc /usr/local/bin/runsc
# The toolkit and driver dirs are settings, not PATH entries: ateom looks for nvidia-ctk
# in $ATEOM_NVIDIA_TOOLKIT_DIR, then $ATEOM_NVIDIA_DRIVER_ROOT/bin, then PATH. These are
# the env twins of `ateom serve --driver-root/--toolkit-dir`, read under the same names
# by `ateom doctor`, `ateom inject` and `ateom cdi`.
ENV PATH=/opt/ateom/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    ATEOM_RUNSC=/usr/local/bin/runsc \
    ATEOM_SOCKET=/run/ateom/ateom.sock \
    ATEOM_ACTORS_ROOT=/var/lib/ateom/actors \
    ATEOM_NVIDIA_DRIVER_ROOT=/usr/local/nvidia \
    ATEOM_NVIDIA_TOOLKIT_DIR=/opt/nvidia-toolkit
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
