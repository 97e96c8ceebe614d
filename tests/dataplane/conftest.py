"""Fixtures of the data plane's tests: certificates (once a session), back-ends and
a data plane process (once a module)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.dataplane.support import Backend, Certs, DataPlane, ingress_args, make_certs


@pytest.fixture(scope="session")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    return make_certs(tmp_path_factory.mktemp("certs"))


@pytest.fixture(scope="module")
def backends() -> Iterator[tuple[Backend, Backend]]:
    pair = Backend("alpha"), Backend("beta")
    yield pair
    for backend in pair:
        backend.stop()


@pytest.fixture(scope="module")
def dataplane(certs: Certs, backends: tuple[Backend, Backend],
              tmp_path_factory: pytest.TempPathFactory) -> Iterator[DataPlane]:
    """One data plane for a module: ingress and CONNECT, short head and response
    timeouts (so the tests of them are quick); routes alpha and beta."""
    log = tmp_path_factory.mktemp("dataplane") / "dataplane.log"
    dp = DataPlane(ingress_args(certs, "--head-timeout", "1.5", "--response-timeout", "3"), log)
    dp.route("alpha", backends[0].port)
    dp.route("beta", backends[1].port)
    yield dp
    assert dp.stop() == 0, dp.log.read_text()[-3000:]
    assert "Traceback" not in dp.log.read_text(), dp.log.read_text()[-5000:]
