"""Bodies are streamed, never held whole: 64 MiB each way through a data plane
whose memory stays far below that."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator

from tests.dataplane.support import HOST, Certs, DataPlane

SIZE = 64 << 20
BLOCK = bytes(range(256)) * 4096  # 1 MiB


def blocks() -> Iterator[bytes]:
    for _ in range(SIZE // len(BLOCK)):
        yield BLOCK


def test_a_64_mib_request_body_and_response_body_pass_in_bounded_memory(
        dataplane: DataPlane, certs: Certs) -> None:
    conn = dataplane.https(certs, timeout=120)
    conn.request("GET", "/who", headers={"Host": HOST.format(name="alpha")})
    conn.getresponse().read()  # warm: TLS, h11, an upstream in place
    before = dataplane.memory_kib("VmHWM")

    conn.request("POST", "/sink", body=blocks(), headers={
        "Host": HOST.format(name="alpha"), "Content-Length": str(SIZE)})
    response = conn.getresponse()
    answer = response.read()
    assert response.status == 200, answer
    digest = hashlib.sha256(BLOCK * (SIZE // len(BLOCK))).hexdigest()
    assert f'"bytes": {SIZE}'.encode() in answer and digest.encode() in answer

    conn.request("GET", f"/big?n={SIZE}", headers={"Host": HOST.format(name="alpha")})
    response = conn.getresponse()
    assert response.status == 200 and response.getheader("Content-Length") == str(SIZE)
    got = 0
    while block := response.read(1 << 20):
        got += len(block)
    assert got == SIZE

    grown = dataplane.memory_kib("VmHWM") - before
    print(f"data plane VmHWM {before} KiB before, grew {grown} KiB for 2 x 64 MiB")
    assert grown < 16 << 10, f"the data plane's peak RSS grew {grown} KiB"
