"""Qualified CDI device names: ``vendor.com/class=name``.

A qualified name is how a caller asks for a device: the *kind*
(``vendor/class``) picks the spec, the *name* picks the device in it. The
character rules are the CDI reference's, checked here once so the spec
validator and the resolver agree on them. Each check returns a reason string
(or None) rather than raising, so the validator can collect every problem in
a spec while `parse_qualified_name` raises on the first.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ateom.errors import QualifiedNameError

# Vendor and class: a letter first, alphanumeric last, and letters, digits,
# '_', '.', '-' between. (A '.' in the class needs cdiVersion >= 0.6.0; that
# gate lives in the validator, since a bare name has no version.)
_VENDOR_OR_CLASS = re.compile(r"[A-Za-z](?:[A-Za-z0-9_.-]*[A-Za-z0-9])?")
# Device names: alphanumeric first and last; ':' is allowed between because
# MIG devices are named "<gpu>:<instance>" (e.g. "0:1").
_DEVICE_NAME = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9_.:-]*[A-Za-z0-9])?")
_ASCII_ALNUM = re.compile(r"[A-Za-z0-9]")
_ASCII_LETTER = re.compile(r"[A-Za-z]")


def _explain(label: str, value: str, middle: str, first_letter: bool) -> str:
    """Say which character of `value` breaks the name rules (value is known bad)."""
    if not value:
        return f"{label} is empty"
    first = value[0]
    if first_letter and not _ASCII_LETTER.fullmatch(first):
        return f"{label} {value!r} must start with a letter, not {first!r}"
    if not first_letter and not _ASCII_ALNUM.fullmatch(first):
        return f"{label} {value!r} must start with a letter or digit, not {first!r}"
    for ch in value[1:-1]:
        if not (_ASCII_ALNUM.fullmatch(ch) or ch in middle):
            allowed = "letters, digits and " + " ".join(repr(c) for c in middle)
            return f"{label} {value!r} contains {ch!r}; only {allowed} are allowed"
    return f"{label} {value!r} must end with a letter or digit, not {value[-1]!r}"


def vendor_problem(vendor: str) -> str | None:
    """Why `vendor` is not a valid CDI vendor name, or None when it is."""
    if _VENDOR_OR_CLASS.fullmatch(vendor):
        return None
    return _explain("vendor", vendor, "_.-", first_letter=True)


def class_problem(device_class: str) -> str | None:
    """Why `device_class` is not a valid CDI class name, or None when it is."""
    if _VENDOR_OR_CLASS.fullmatch(device_class):
        return None
    return _explain("class", device_class, "_.-", first_letter=True)


def device_name_problem(name: str) -> str | None:
    """Why `name` is not a valid CDI device name, or None when it is."""
    if _DEVICE_NAME.fullmatch(name):
        return None
    return _explain("device name", name, "_.:-", first_letter=False)


def kind_problem(kind: str) -> str | None:
    """Why `kind` is not a valid ``vendor/class``, or None when it is."""
    vendor, slash, device_class = kind.partition("/")
    if not slash:
        return f"kind {kind!r} must be vendor/class (no '/' found)"
    return vendor_problem(vendor) or class_problem(device_class)


@dataclass(frozen=True, slots=True)
class QualifiedName:
    """A parsed ``vendor/class=name``; str() gives it back unchanged."""

    vendor: str
    device_class: str
    name: str

    @property
    def kind(self) -> str:
        return f"{self.vendor}/{self.device_class}"

    def __str__(self) -> str:
        return f"{self.vendor}/{self.device_class}={self.name}"


def parse_qualified_name(text: str) -> QualifiedName:
    """Parse ``vendor/class=name``; raise QualifiedNameError naming the bad part.

    Splits like the reference: the name is everything after the first '=',
    the vendor everything before the first '/', so ``a/b/c=d`` reports a bad
    class ``b/c`` rather than a bad vendor.
    """
    if not isinstance(text, str):
        raise QualifiedNameError(f"qualified device name must be a string, not {text!r}")
    kind, eq, name = text.partition("=")
    vendor, slash, device_class = kind.partition("/")
    if not eq:
        raise QualifiedNameError(
            f"invalid qualified device name {text!r}: missing '=' (want vendor/class=name)"
        )
    if not slash:
        raise QualifiedNameError(
            f"invalid qualified device name {text!r}: missing '/' in kind {kind!r} "
            "(want vendor/class=name)"
        )
    problem = vendor_problem(vendor) or class_problem(device_class) or device_name_problem(name)
    if problem:
        raise QualifiedNameError(f"invalid qualified device name {text!r}: {problem}")
    return QualifiedName(vendor, device_class, name)


