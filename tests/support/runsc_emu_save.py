"""The emulated release's ``checkpoint`` and ``restore`` (runs the real runsc).

Checkpoint, in the release's order:

1. ``--cuda-checkpoint-path`` (20260608+): cuda-checkpoint ``--toggle`` on the
   sandbox's CUDA processes, inside the sandbox (`runsc_emu_cuda`); a failure
   fails the checkpoint, and the sandbox keeps running.
2. The live-client panic (20240501 up to 20260706, open-source builds):
   nvproxy's save hook panics "can't save with live nvproxy clients" when a
   GPU client is alive. A *live client* here is a process of a GPU container
   (see `runsc_emu_gpu`) of an nvproxy sandbox that cuda-checkpoint did not
   just toggle: a toggled process has released its GPU state and device
   files, which is what cuda-checkpoint is for. The state package turns the
   panic into a save error, and a failed save kills the sandbox unless
   ``--leave-running`` (Save's callback, pkg/sentry/state): the emulator
   SIGKILLs the sandbox process.
3. 20260706+: with live clients the save records the GPUs for remapping
   (refused for mixed models: "nvproxy device is not remappable").
4. the real ``runsc checkpoint``, then `ImageNote` beside the image.

Restore: the driver must not have changed (20250611+: "nvidia driver version
changed during restore"), saved GPUs must map onto the present ones
(20260706+), then the real ``runsc restore`` (create + restore + start),
then cuda-checkpoint ``--toggle`` again on the saved CUDA processes. A
multi-container image (releases 20240501+ restore those) is restored
container by container through a real build that can (Debian's 0.0~20240729,
newer), the release's checks coming with the last container, where its kernel
load runs. A real build that cannot (Debian's 2022 one) gets the root's
restore accepted and remembered, each subcontainer's counted, and the last one
refused with a message naming the sandbox and its containers.

Error texts are the release's own; the wrapping between command and cause
("checkpoint failed: checkpointing container %q: ...") is abbreviated.
"""

from __future__ import annotations

import os
from functools import partial
from typing import TYPE_CHECKING, Any

from tests.support import runsc_emu_cuda as cuda
from tests.support import runsc_emu_gpu as gpu
from tests.support import runsc_emu_state as st
from tests.support.runsc_emu_cli import Invocation
from tests.support.runsc_release import Release, go_sprintf

if TYPE_CHECKING:
    from tests.support.runsc_emulator import Emulator


def _save_failed(release: Release, container: str, why: str) -> str:
    inner = go_sprintf(release.message("checkpointing container %q"), container, why)
    return go_sprintf(release.message("checkpoint failed: "), inner)


def _restore_failed(release: Release, why: str) -> str:
    # restore.go reports a failed restore of a new container as "starting
    # container" from 20240501 (restore into a created container); before, as
    # "running container".
    if release.feature("multi_container_restore"):
        return go_sprintf(release.message("starting container: "), why)
    return go_sprintf(release.message("running container: "), why)


def checkpoint(emu: Emulator, inv: Invocation) -> int:
    """``runsc checkpoint`` as the release does it (see the module docstring)."""
    cid, image = inv.container, inv.flag("image-path")
    if cid is None or not image:
        return emu.run_real(inv)  # the real runsc reports the usage or missing -image-path
    release, root = emu.release, emu.root(inv)
    own = st.read_container_state(root, cid)
    sandbox = own.sandbox if own else cid
    members = st.sandbox_members(root, sandbox)
    head = members[0] if members and members[0].is_sandbox_root else None
    nvproxy = bool(head and head.nvproxy)
    emu.record["nvproxy"] = nvproxy
    clients = emu.gpu_clients(inv, members) if nvproxy else []
    path = inv.flag("cuda-checkpoint-path") or ""
    sequential = inv.command_flag_true("cuda-checkpoint-sequential")
    leave = inv.command_flag_true("leave-running")
    toggled: list[cuda.Proc] = []
    if path:
        start, warn = emu.start_exec(inv), partial(emu.warn, inv)
        major = gpu.driver_major(head.driver_version if head else None)
        procs = cuda.select_procs(release, start, path, clients, major, warn)
        error = cuda.toggle_before_save(release, start, path, procs, sequential=sequential,
                                        warn=warn)
        if error:
            return emu.fail(inv, _save_failed(release, cid, error))
        toggled = procs
    live = [p for p in clients if p not in toggled]
    if live and release.feature("save_panics_with_live_nvproxy_clients_oss"):
        emu.record["notes"].append(f"live GPU clients {live}: the sentry's save panics")
        if not leave:
            emu.kill_sandbox(inv, sandbox)
        panic = release.message("can't save with live nvproxy clients")
        return emu.fail(inv, _save_failed(release, cid, panic))
    saved = st.read_gpus(emu.config) if live else ()
    why = gpu.save_remap_error(release, saved) if saved else ""
    if why:
        return emu.fail(inv, _save_failed(release, cid, why))
    code = emu.run_real(inv)
    if code != 0:
        return code
    st.write_image_note(os.path.abspath(image), st.ImageNote(
        release=release.tag, sandbox=sandbox,
        containers=tuple(m.container for m in members) or (cid,), nvproxy=nvproxy,
        driver_version=head.driver_version if head else None,
        gpus=saved if release.feature("gpu_device_remap_on_restore") else (),
        cuda_checkpoint_path=path, cuda_sequential=sequential, cuda_procs=tuple(toggled),
        devices={m.container: st.spec_devices(st.read_spec(m.bundle)) for m in members}))
    if leave and toggled:
        error = cuda.toggle_after_restore(release, emu.start_exec(inv), path, toggled,
                                          sequential=sequential)
        if error:
            emu.warn(inv, error)
    return 0


def _load_error(emu: Emulator, note: st.ImageNote | None, driver_now: str | None) -> str:
    """Why the release's kernel load refuses `note`'s image here ("" if it loads)."""
    if note is None or not note.nvproxy:
        return ""
    now = driver_now or st.read_host_driver(emu.config)
    return (gpu.driver_changed_error(emu.release, note.driver_version, now)
            or gpu.restore_remap_error(emu.release, note.gpus, st.read_gpus(emu.config)))


def _devices_mismatch(release: Release, inv: Invocation, note: st.ImageNote | None,
                      cid: str, spec: dict[str, Any]) -> str:
    """The release's refusal of a restore whose devices are not, by path and type, the
    checkpoint's ("" when they are, or the release does not validate them). Releases
    with --restore-spec-validation (20260525+) enforce it by default."""
    if (note is None or cid not in note.devices or "restore-spec-validation" not in release.flags
            or (inv.global_flags.value("restore-spec-validation") or "enforce") != "enforce"):
        return ""
    saved, now = note.devices[cid], st.spec_devices(spec)
    if saved == now:
        return ""
    mismatch = go_sprintf(release.message("%q does not match across checkpoint restore"),
                          "Devices", cid, list(saved), list(now))
    return f"failed to validate restore spec: failed to validate spec for container {cid!r}: " \
        + mismatch


def restore(emu: Emulator, inv: Invocation) -> int:
    """``runsc restore`` as the release does it (see the module docstring)."""
    cid, image = inv.container, inv.flag("image-path")
    bundle = os.path.abspath(inv.flag("bundle") or os.getcwd())
    spec = st.read_spec(bundle)
    if cid is None or not image or spec is None:
        return emu.run_real(inv)  # the real runsc reports the usage, flag or spec error
    release, root = emu.release, emu.root(inv)
    note = st.read_image_note(os.path.abspath(image))
    mismatch = _devices_mismatch(release, inv, note, cid, spec)
    if mismatch:
        return emu.fail(inv, _restore_failed(release, mismatch))
    sandbox = st.sandbox_of(spec, cid)
    if note and len(note.containers) > 1 and release.feature("multi_container_restore"):
        if not emu.real_restores_subcontainers:
            return _restore_multi_refused(emu, inv, note, spec, sandbox)
        return _restore_multi(emu, inv, note, spec, sandbox)
    if sandbox == cid:
        on, driver, error = emu.sandbox_nvproxy(inv, spec)
        emu.record["nvproxy"] = on
        error = error or _load_error(emu, note, driver)
        if error:
            return emu.fail(inv, _restore_failed(release, error))
        real_nvproxy = emu.wants_real_nvproxy(spec, on)
    else:  # a release without multi-container restore: the real build answers
        parent = st.read_container_state(root, sandbox)
        on, driver = bool(parent and parent.nvproxy), parent.driver_version if parent else None
        real_nvproxy = bool(parent and parent.real_nvproxy)
    st.write_container_state(root, st.ContainerState(
        cid, sandbox, bundle, on, on and gpu.gpu_requested(release, spec, inv.global_flags),
        driver, real_nvproxy))
    code = emu.run_real(inv)
    if code != 0:
        st.remove_state(root, cid)
        return code
    _after_restore(emu, inv, note, sandbox)
    return code


def _after_restore(emu: Emulator, inv: Invocation, note: st.ImageNote | None,
                   sandbox: str) -> None:
    """cuda-checkpoint's second toggle once the sandbox runs again."""
    if note is None or not note.cuda_procs:
        return
    release = emu.release
    error = cuda.toggle_after_restore(release, emu.start_exec(inv), note.cuda_checkpoint_path,
                                      note.cuda_procs, sequential=note.cuda_sequential)
    if error:
        # Post-restore work runs after the restore returned; failing, it
        # takes the sandbox down (restore.go).
        work = go_sprintf(release.message("post restore work failed"), error)
        emu.warn(inv, go_sprintf(release.message("Killing the sandbox after post restore"),
                                 work))
        emu.kill_sandbox(inv, sandbox)


def _restore_multi(emu: Emulator, inv: Invocation, note: st.ImageNote, spec: dict[str, Any],
                   sandbox: str) -> int:
    """One container of a multi-container restore, on a real build that restores them.

    The root is restored at once (the real sandbox then waits for the rest);
    the release's driver and remap checks come with the last container, where
    the release's kernel load runs, and the cuda-checkpoint toggle after it.
    """
    cid, root, release = inv.container or "", emu.root(inv), emu.release
    bundle = os.path.abspath(inv.flag("bundle") or os.getcwd())
    if cid == sandbox:
        on, driver, error = emu.sandbox_nvproxy(inv, spec)
        emu.record["nvproxy"] = on
        if error:
            return emu.fail(inv, _restore_failed(release, error))
        state = st.ContainerState(cid, sandbox, bundle, on,
                                  on and gpu.gpu_requested(release, spec, inv.global_flags),
                                  driver, emu.wants_real_nvproxy(spec, on))
        st.write_container_state(root, state)
        st.write_pending_restore(root, sandbox, {"restored": [cid], "driver": driver})
        code = emu.run_real(inv)
        if code != 0:
            st.remove_state(root, cid)
            st.remove_state(root, f"restore-{sandbox}")
        return code
    pending = st.read_pending_restore(root, sandbox)
    parent = st.read_container_state(root, sandbox)
    if pending is None or parent is None:
        return emu.refuse(inv, f"restore of {cid!r}: its sandbox {sandbox!r} is not being "
                          "restored; restore the sandbox's root container first")
    restored = [*pending["restored"], cid]
    last = not [c for c in note.containers if c not in restored]
    if last:
        st.remove_state(root, f"restore-{sandbox}")
        error = _load_error(emu, note, pending.get("driver"))
        if error:
            return emu.fail(inv, _restore_failed(release, error))
    else:
        st.write_pending_restore(root, sandbox, {**pending, "restored": restored})
    st.write_container_state(root, st.ContainerState(
        cid, sandbox, bundle, parent.nvproxy,
        parent.nvproxy and gpu.gpu_requested(release, spec, inv.global_flags),
        parent.driver_version, parent.real_nvproxy))
    code = emu.run_real(inv)
    if code != 0:
        st.remove_state(root, cid)
        return code
    if last:
        _after_restore(emu, inv, note, sandbox)
    return code


def _restore_multi_refused(emu: Emulator, inv: Invocation, note: st.ImageNote,
                           spec: dict[str, Any], sandbox: str) -> int:
    """A real build that restores only a sandbox's root: each container counted, the
    last one refused (after the release's own checks, which come at that point)."""
    cid, root, release = inv.container or "", emu.root(inv), emu.release
    if cid == sandbox:
        on, driver, error = emu.sandbox_nvproxy(inv, spec)
        emu.record["nvproxy"] = on
        if error:
            return emu.fail(inv, _restore_failed(release, error))
        st.write_pending_restore(root, sandbox, {"restored": [cid], "driver": driver})
        emu.record["notes"].append(
            f"restore of sandbox {sandbox} accepted; it loads once {list(note.containers[1:])} "
            "are restored (nothing runs until then)")
        return 0
    pending = st.read_pending_restore(root, sandbox)
    if pending is None:
        return emu.refuse(inv, f"restore of {cid!r}: its sandbox {sandbox!r} is not being "
                          "restored; restore the sandbox's root container first")
    restored = [*pending["restored"], cid]
    missing = [c for c in note.containers if c not in restored]
    if missing:
        st.write_pending_restore(root, sandbox, {**pending, "restored": restored})
        emu.record["notes"].append(f"restore of {cid} accepted; waiting for {missing}")
        return 0
    st.remove_state(root, f"restore-{sandbox}")
    error = _load_error(emu, note, pending.get("driver"))
    if error:
        return emu.fail(inv, _restore_failed(release, error))
    return emu.refuse(inv, (
        f"{release.tag} would now load sandbox {sandbox!r} with containers "
        f"{list(note.containers)} from the image, but the real runsc {emu.real.tag} restores "
        "only a single-container sandbox: nothing was restored"))
