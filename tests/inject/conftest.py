"""Fixtures shared by the injector's tests."""

from __future__ import annotations

import os
import shutil
import stat
from collections.abc import Iterator

import pytest

from tests.support import FakeLibrary, build_fake_driver_libs


@pytest.fixture(scope="session")
def fake_driver(tmp_path_factory: pytest.TempPathFactory) -> list[FakeLibrary]:
    """Real gcc-built driver libraries, built once per session (gcc is slow-ish)."""
    if shutil.which("gcc") is None:
        pytest.skip("gcc not installed")
    lib_dir = tmp_path_factory.mktemp("driver") / "lib64"
    return build_fake_driver_libs(
        lib_dir,
        extra=[("libnvidia-tls.so.580.65.06", None), ("libnvidia-egl-gbm.so.1.1.2",
                                                      "libnvidia-egl-gbm.so.1")],
    )


@pytest.fixture(autouse=True, scope="session")
def dev_null_untouched() -> Iterator[None]:
    """After the whole run, /dev/null must still be root's 0666 char device.

    runsc chowns its stdio; a harness that handed it /dev/null would break the host.
    """
    yield
    st = os.stat("/dev/null")
    assert stat.S_ISCHR(st.st_mode)
    assert stat.S_IMODE(st.st_mode) == 0o666
    assert st.st_uid == 0
