"""Qualified device names: vendor.com/class=name."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ateom.cdi.names import (
    QualifiedName,
    class_problem,
    device_name_problem,
    kind_problem,
    parse_qualified_name,
    vendor_problem,
)
from ateom.errors import QualifiedNameError

VENDOR_OR_CLASS = st.from_regex(r"[A-Za-z]([A-Za-z0-9_.-]{0,20}[A-Za-z0-9])?", fullmatch=True)
DEVICE_NAME = st.from_regex(r"[A-Za-z0-9]([A-Za-z0-9_.:-]{0,20}[A-Za-z0-9])?", fullmatch=True)


@pytest.mark.parametrize(
    "text, vendor, device_class, name",
    [
        ("nvidia.com/gpu=0", "nvidia.com", "gpu", "0"),
        ("nvidia.com/gpu=all", "nvidia.com", "gpu", "all"),
        ("nvidia.com/gpu=0:1", "nvidia.com", "gpu", "0:1"),
        ("nvidia.com/gpu=MIG-3c7511dc-a777-5b4b", "nvidia.com", "gpu", "MIG-3c7511dc-a777-5b4b"),
        ("amd.com/gpu=1", "amd.com", "gpu", "1"),
        ("vendor_x-y/class.sub=a", "vendor_x-y", "class.sub", "a"),
        ("a/b=c", "a", "b", "c"),
    ],
)
def test_parse_valid(text: str, vendor: str, device_class: str, name: str) -> None:
    qn = parse_qualified_name(text)
    assert qn == QualifiedName(vendor, device_class, name)
    assert qn.kind == f"{vendor}/{device_class}"
    assert str(qn) == text


@pytest.mark.parametrize(
    "text, part",
    [
        ("nvidia.com/gpu", "missing '='"),
        ("nvidia.com=0", "missing '/'"),
        ("nvidia.com/gpu=", "device name is empty"),
        ("/gpu=0", "vendor is empty"),
        ("nvidia.com/=0", "class is empty"),
        ("1nvidia.com/gpu=0", "vendor '1nvidia.com' must start with a letter"),
        ("nvidia.com-/gpu=0", "vendor 'nvidia.com-' must end with a letter or digit"),
        ("nvidia.com/g pu=0", "class 'g pu' contains ' '"),
        ("nvidia.com/gpu/x=0", "class 'gpu/x' contains '/'"),
        ("nvidia.com/gpu=-0", "device name '-0' must start with a letter or digit"),
        ("nvidia.com/gpu=0:", "device name '0:' must end with a letter or digit"),
        ("nvidia.com/gpu=a=b", "device name 'a=b' contains '='"),
        ("nvidia.com/gpu=é", "device name 'é' must start with a letter or digit"),
        ("ñvidia.com/gpu=0", "vendor 'ñvidia.com' must start with a letter"),
    ],
)
def test_parse_invalid_names_the_part(text: str, part: str) -> None:
    with pytest.raises(QualifiedNameError) as info:
        parse_qualified_name(text)
    assert part in str(info.value)
    assert repr(text) in str(info.value)


def test_non_string_is_an_error_not_a_crash() -> None:
    with pytest.raises(QualifiedNameError):
        parse_qualified_name(0)  # type: ignore[arg-type]


def test_part_checks() -> None:
    assert vendor_problem("nvidia.com") is None
    assert class_problem("gpu.mig") is None
    assert device_name_problem("0:0") is None
    assert kind_problem("nvidia.com/gpu") is None
    assert kind_problem("nvidia.com") is not None
    assert device_name_problem("a") is None
    assert device_name_problem("_") is not None


@settings(max_examples=200, deadline=None)
@given(VENDOR_OR_CLASS, VENDOR_OR_CLASS, DEVICE_NAME)
def test_round_trip(vendor: str, device_class: str, name: str) -> None:
    qn = QualifiedName(vendor, device_class, name)
    assert parse_qualified_name(str(qn)) == qn


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=40))
def test_any_text_parses_or_raises_qualified_name_error(text: str) -> None:
    try:
        qn = parse_qualified_name(text)
    except QualifiedNameError as exc:
        assert str(exc)
    else:
        assert str(qn) == text
