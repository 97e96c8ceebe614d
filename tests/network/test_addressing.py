"""The address plan (pure): names, paths, the /30 of each k, the pool."""

from __future__ import annotations

import ipaddress
import threading

import pytest

from ateom.errors import AteomError, ErrorCode
from ateom.network.addressing import (
    DEFAULT_RESERVED,
    MAX_INDEX,
    SubnetPool,
    assign,
    check_uid,
    host_ifname,
    index_of,
    is_host_ifname,
    netns_path,
    plan,
    subnet,
)

METADATA_K = (169 << 6) | (252 >> 2)  # 169.254.169.252/30 holds 169.254.169.254


def test_the_worker_side_is_named_from_its_subnet_within_ifnamsiz() -> None:
    assert host_ifname(1) == "ate000000000001" and host_ifname(4242) == "ate000000004242"
    name = host_ifname(MAX_INDEX)
    assert len(name) == 15 and is_host_ifname(name)
    assert not is_host_ifname("eth0") and not is_host_ifname("ate0123456789xy")  # not hex
    assert not is_host_ifname(name + "0")
    assert is_host_ifname("ate" + "0123456789ab")  # an older daemon's, swept all the same


def test_the_namespace_lives_under_ateom_s_run_dir() -> None:
    assert netns_path("/run/ateom", 42) == "/run/ateom/netns/net-42"


@pytest.mark.parametrize("uid", ["", "..", "a/b", "-x", "a..b", "x" * 129, "a\0b"])
def test_a_uid_that_cannot_name_a_file_is_refused(uid: str) -> None:
    with pytest.raises(AteomError) as info:
        check_uid(uid)
    assert info.value.code is ErrorCode.INVALID_ARGUMENT


def test_subnet_k_follows_the_plan() -> None:
    assert subnet(1) == ipaddress.IPv4Network("169.254.0.4/30")
    assert subnet(63) == ipaddress.IPv4Network("169.254.0.252/30")
    assert subnet(64) == ipaddress.IPv4Network("169.254.1.0/30")
    assert subnet(MAX_INDEX) == ipaddress.IPv4Network("169.254.255.252/30")
    assert ipaddress.IPv4Address("169.254.169.254") in subnet(METADATA_K)
    assert all(index_of(str(a)) == k for k in (1, 64, 4242, MAX_INDEX)
               for a in subnet(k))
    assert index_of("10.0.0.1") is None and index_of("not an address") is None


def test_the_first_actor_gets_the_first_subnet() -> None:
    pool = SubnetPool()
    k = pool.allocate()
    net = plan("/run/ateom", k)
    assert (k, net.host_ip, net.actor_ip, net.prefix_len) == (1, "169.254.0.5", "169.254.0.6", 30)
    assert str(net.network) == "169.254.0.4/30" and net.actor_if == "eth0"
    assert (net.uid, net.egress) == ("", False)  # made ahead: nobody's yet
    mine = assign(net, "a", egress=True)
    assert (mine.uid, mine.egress, mine.host_if, mine.index) == ("a", True, net.host_if, 1)


def test_the_metadata_subnet_and_k0_are_never_handed_out() -> None:
    pool = SubnetPool(reserved=())
    assert not pool.usable(0) and not pool.usable(METADATA_K)
    assert pool.usable(METADATA_K - 1) and pool.usable(METADATA_K + 1)
    handed = {pool.allocate() for _ in range(MAX_INDEX - 1)}
    assert len(handed) == MAX_INDEX - 1 and 0 not in handed and METADATA_K not in handed


def test_the_default_reserved_ranges_are_skipped() -> None:
    pool = SubnetPool()
    for net in DEFAULT_RESERVED:
        for k in {index_of(str(net.network_address)), index_of(str(net.broadcast_address))}:
            assert k is not None and not pool.usable(k), net
    assert pool.usable(index_of("169.254.1.5") or 0)  # only the /30 of 169.254.1.1


def test_an_exhausted_pool_says_so() -> None:
    pool = SubnetPool(reserved=[ipaddress.IPv4Network("169.254.0.0/17"),
                                ipaddress.IPv4Network("169.254.128.0/18"),
                                ipaddress.IPv4Network("169.254.192.0/19"),
                                ipaddress.IPv4Network("169.254.224.0/20"),
                                ipaddress.IPv4Network("169.254.240.0/21"),
                                ipaddress.IPv4Network("169.254.248.0/22"),
                                ipaddress.IPv4Network("169.254.252.0/23"),
                                ipaddress.IPv4Network("169.254.254.0/24"),
                                ipaddress.IPv4Network("169.254.255.0/25")])
    assert [pool.allocate() for _ in range(32)] == list(range(MAX_INDEX - 31, MAX_INDEX + 1))
    with pytest.raises(AteomError) as info:
        pool.allocate()
    assert info.value.code is ErrorCode.RESOURCE_EXHAUSTED
    assert "32 in use" in info.value.message


def test_a_released_subnet_is_the_next_one_handed_out() -> None:
    pool = SubnetPool(reserved=())
    assert [pool.allocate() for _ in range(4)] == [1, 2, 3, 4]
    pool.release(2)
    pool.release(2)  # twice: no-op
    pool.release(999)  # never taken: no-op
    assert pool.allocate() == 2
    assert pool.allocate() == 5
    pool.release(3)
    pool.reserve([subnet(3)])  # reserved after it was given back: skipped
    assert pool.allocate() == 6
    assert pool.in_use() == frozenset({1, 2, 4, 5, 6})


def test_the_pool_is_thread_safe() -> None:
    pool = SubnetPool(reserved=())
    got: list[int] = []
    lock = threading.Lock()

    def take() -> None:
        mine = [pool.allocate() for _ in range(200)]
        with lock:
            got.extend(mine)

    threads = [threading.Thread(target=take) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert sorted(got) == list(range(1, 1601))
