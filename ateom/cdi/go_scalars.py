"""Scalars as the CDI reference's Go decoders read them; pure.

The reference reads a spec file (YAML or JSON alike) with sigs.k8s.io/yaml:
go-yaml v2 decodes it into plain values (resolve.go: `resolve`), those are
converted to JSON (yaml.go: `convertToJSONableObject`), and encoding/json
decodes that into the spec structs. Each step types scalars its own way, and
where ateom must read a spec as the reference does, the rule lives here:

- which plain scalars are booleans and numbers (go-yaml v2, not YAML 1.1);
- how a number or boolean reads where a string belongs, and as a mapping key;
- which integer an integer field gets from a float;
- what a `!!binary` or `!!timestamp` scalar is, and which escapes a
  double-quoted scalar may use.
"""

from __future__ import annotations

import base64
import decimal
import math
import re
import struct

# Plain scalars are typed the way go-yaml v2 types them, not the way YAML 1.1
# does in PyYAML: no base-60 numbers (the MIG device name `1:0` is not the
# integer 60), no timestamps (a date-like env value or annotation is text),
# `y` and `n` are booleans, and numbers follow Go's strconv: `1e3` and `08`
# are floats, `0o17` is an octal integer.
BOOL_TAG = "tag:yaml.org,2002:bool"
GO_NUMBER_TAG = "tag:ateom,2024:go-number"
GO_BOOLS = {
    **dict.fromkeys("y Y yes Yes YES true True TRUE on On ON".split(), True),
    **dict.fromkeys("n N no No NO false False FALSE off Off OFF".split(), False),
}
_GO_NULLS = frozenset({"", "~", "null", "Null", "NULL"})
_GO_SPECIAL_FLOATS = {
    **dict.fromkeys([".nan", ".NaN", ".NAN"], math.nan),
    **dict.fromkeys([".inf", ".Inf", ".INF", "+.inf", "+.Inf", "+.INF"], math.inf),
    **dict.fromkeys(["-.inf", "-.Inf", "-.INF"], -math.inf),
}
_GO_BOOL = re.compile("^(?:" + "|".join(GO_BOOLS) + ")$")
# What go-yaml might read as a number: it tries plain scalars starting with a
# sign, a digit or '.'; ':' is left out, so `1:0` is never one.
_GO_NUMBER_LIKE = re.compile(r"^[-+.0-9][-+._0-9A-Za-z]*$")
_GO_FLOAT = re.compile(r"[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?")
_GO_DOT_FLOAT = re.compile(r"\.[0-9]+(?:[eE][-+]?[0-9]+)?")
_DECIMAL_INTEGER = re.compile(r"[-+]?[0-9]+")
# (tag, pattern, first characters) of the implicit types above.
GO_SCALAR_RESOLVERS = (
    (BOOL_TAG, _GO_BOOL, "yYnNtTfFoO"),
    (GO_NUMBER_TAG, _GO_NUMBER_LIKE, "+-.0123456789"),
)
INT64 = (-(2**63), 2**63 - 1)


def _go_int(plain: str) -> int | None:
    """Go's ParseInt(plain, 0, 64), else ParseUint(plain, 0, 64); None if neither."""
    signed = plain[:1] in ("+", "-")
    digits = plain[1:] if signed else plain
    if not (digits.isascii() and digits.isalnum()):
        return None
    try:
        if len(digits) > 1 and digits[0] == "0" and digits[1] not in "xXbBoO":
            value = int(digits, 8)  # Go: a leading 0 means octal
        else:
            value = int(digits, 0)
    except ValueError:
        return None
    if plain[0] == "-":
        value = -value
    if -(2**63) <= value < 2**63 or (not signed and value < 2**64):
        return value
    return None


def go_yaml_number(text: str) -> int | float | str:
    """A plain scalar that starts like a number, typed as go-yaml v2 types it:
    an integer (base from its prefix, '_' ignored), else a float if it has
    Go's float shape and is in range, else the text itself.

    A decimal integer beyond int64 and uint64 is a float64 in go-yaml; it is
    kept as the exact int here, which reads the same everywhere (`scalar_text`
    formats it as that float) but lets a range error quote it as written.
    """
    if text in _GO_SPECIAL_FLOATS:
        return _GO_SPECIAL_FLOATS[text]
    if text.startswith("."):
        plain, shape = text, _GO_DOT_FLOAT  # parsed as written, '_' and all
    else:
        plain, shape = text.replace("_", ""), _GO_FLOAT
        whole = _go_int(plain)
        if whole is not None:
            return whole
    if shape.fullmatch(plain):
        value = float(plain)
        if math.isinf(value):  # out of range: Go's ParseFloat fails
            return text
        if _DECIMAL_INTEGER.fullmatch(plain):
            exact = int(plain, 10)
            if not -(2**63) <= exact < 2**64:
                return exact  # the float64 go-yaml has, kept exact (see above)
        return value
    return text


def go_resolve(text: str) -> bool | int | float | str | None:
    """What go-yaml v2's `resolve` makes of a scalar's text under an explicit
    !!int, !!float or !!bool tag: a value of its implicit type, without the
    timestamp step (which it only tries untagged or under !!timestamp)."""
    if text in _GO_NULLS:
        return None
    if text in GO_BOOLS:
        return GO_BOOLS[text]
    if text[0] in "+-.0123456789":
        return go_yaml_number(text)
    return text


def go_type_name(value: object) -> str:
    """go-yaml's short tag for a resolved value, as its errors name it."""
    if value is None:
        return "!!null"
    if isinstance(value, bool):
        return "!!bool"
    if isinstance(value, int):
        return "!!int"
    return "!!float" if isinstance(value, float) else "!!str"


# -- text where a string belongs, and as a key ---------------------------------


def scalar_text(value: str | int | float | bool) -> str:
    """A scalar as the CDI reference reads it into a string field.

    sigs.k8s.io/yaml, for a string target, formats ints in decimal, bools as
    "true"/"false", and floats with Go's FormatFloat(f, 'g', -1, 32).
    """
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        if -(2**63) <= value < 2**64:
            return str(value)
        try:
            value = float(value)  # beyond int64/uint64 the Go decoder has a float64
        except OverflowError:
            return str(value)  # beyond float64 too: go-yaml keeps the text
    return go_float32_text(value)


_GO_YAML_FLOAT_NAMES = {"+Inf": ".inf", "-Inf": "-.inf", "NaN": ".nan"}


def go_key_text(key: object) -> str:
    """A mapping key as sigs.k8s.io/yaml's convertToJSONableObject writes it.

    Raises ValueError for keys it refuses: null, and go-yaml's uint64 keys
    (2^63 to 2^64-1), which that function has no case for.
    """
    if isinstance(key, str):
        return key
    if key is None:
        raise ValueError("unsupported map key (null); CDI keys are strings")
    if isinstance(key, bool):
        return "true" if key else "false"
    if isinstance(key, int) and 2**63 <= key < 2**64:
        raise ValueError(f"unsupported map key of type uint64 ({key})")
    if isinstance(key, int) and -(2**63) <= key < 2**63:
        return str(key)
    if isinstance(key, int | float):
        text = scalar_text(key)
        return _GO_YAML_FLOAT_NAMES.get(text, text)
    raise ValueError(f"unsupported map key of type {type(key).__name__}")


_FLOAT32 = struct.Struct("<f")


def _as_float32(value: float) -> float:
    """`value` rounded to float32, like Go's float32(value): too large is Inf."""
    try:
        return float(_FLOAT32.unpack(_FLOAT32.pack(value))[0])
    except OverflowError:
        return math.copysign(math.inf, value)


def go_float32_text(value: float) -> str:
    """Go's ``strconv.FormatFloat(value, 'g', -1, 32)``: the shortest text
    that reads back as the same float32, in %e form for exponents < -4 or
    >= 6."""
    if math.isnan(value):
        return "NaN"
    f32 = _as_float32(value)
    if math.isinf(f32):
        return "+Inf" if f32 > 0 else "-Inf"
    sign = "-" if math.copysign(1.0, f32) < 0 else ""
    if f32 == 0:
        return sign + "0"
    for precision in range(1, 10):
        text = f"{abs(f32):.{precision - 1}e}"
        if _as_float32(float(text)) == abs(f32):
            break
    mantissa, _, exponent = text.partition("e")
    digits = mantissa.replace(".", "").rstrip("0") or "0"
    exp = int(exponent)
    if exp < -4 or exp >= 6:
        frac = "." + digits[1:] if len(digits) > 1 else ""
        return f"{sign}{digits[0]}{frac}e{'-' if exp < 0 else '+'}{abs(exp):02d}"
    point = exp + 1  # digits before the decimal point
    if point <= 0:
        return f"{sign}0.{'0' * -point}{digits}"
    if point >= len(digits):
        return sign + digits + "0" * (point - len(digits))
    return f"{sign}{digits[:point]}.{digits[point:]}"


# -- integers from floats --------------------------------------------------------


def go_json_integer(value: float) -> int | None:
    """The integer an integer field of the reference gets from the float `value`.

    sigs.k8s.io/yaml re-encodes go-yaml's float64 with encoding/json, which
    writes the shortest digits that read back (Python's repr has the same
    digits) in plain notation below 1e21; encoding/json then parses that
    text into the Go integer. So -2^63, whose shortest text is
    -9223372036854776000, overflows int64. None when the text is no integer
    literal (a fraction, an exponent from 1e21 on, not finite).
    """
    if not math.isfinite(value) or abs(value) >= 1e21:
        return None
    digits = decimal.Decimal(repr(value))
    if digits != digits.to_integral_value():
        return None
    return int(digits)


# -- !!binary and !!timestamp ----------------------------------------------------

_SURROGATE_ESCAPES = re.compile("[\udc80-\udcff]")
# Go's base64.StdEncoding: padded quads, '=' only to end the last one.
# (Python's own validate=True lets excess padding through.)
_GO_STD_BASE64 = re.compile(r"(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?")


def go_binary_text(encoded: str) -> str:
    """A `!!binary` scalar as the reference reads it: go-yaml v2 decodes the
    base64 (Go's StdEncoding, which skips line breaks) into a Go string, and
    encoding/json writes each byte of invalid UTF-8 in it as U+FFFD.

    Raises ValueError with go-yaml's message for invalid base64.
    """
    encoded = encoded.replace("\r", "").replace("\n", "")
    if not _GO_STD_BASE64.fullmatch(encoded):
        raise ValueError("!!binary value contains invalid base64 data")
    data = base64.b64decode(encoded)
    # surrogateescape maps each undecodable byte to one surrogate: per byte,
    # as Go replaces them.
    return _SURROGATE_ESCAPES.sub("\ufffd", data.decode("utf-8", "surrogateescape"))


# go-yaml v2's allowedTimestampFormats (resolve.go): date, then optionally a
# time with 'T' or 't' and a zone, or with ' ' and no zone.
_GO_TIMESTAMP = re.compile(
    r"(\d{4})-(\d{1,2})-(\d{1,2})"
    r"(?:[Tt](\d{1,2}):(\d{1,2}):(\d{1,2})(?:\.\d+)?(?:Z|[+-]\d{2}:\d{2})"
    r"| (\d{1,2}):(\d{1,2}):(\d{1,2})(?:\.\d+)?)?"
)


def is_go_timestamp(text: str) -> bool:
    """Whether go-yaml v2's parseTimestamp accepts `text` (Go's time.Parse
    checks the ranges: month, day of that month, hour, minute, second)."""
    found = _GO_TIMESTAMP.fullmatch(text)
    if found is None:
        return False
    year, month, day = (int(found[i]) for i in (1, 2, 3))
    clock = [int(t) for t in found.groups()[3:] if t is not None]
    leap = year % 4 == 0 and (year % 100 != 0 or year % 400 == 0)
    days = [31, 29 if leap else 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31]
    if not (1 <= month <= 12 and 1 <= day <= days[month - 1]):
        return False
    return not clock or (clock[0] < 24 and clock[1] < 60 and clock[2] < 60)


# -- double-quoted escapes -------------------------------------------------------

# The escapes go-yaml v2 reads in a double-quoted scalar (scannerc.go,
# yaml_parser_scan_flow_scalar): YAML 1.1's, plus \' . No "\/": that one is
# YAML 1.2's (and JSON's), and libyaml and PyYAML read it.
GO_SIMPLE_ESCAPES = frozenset("0abt\tnvfre \"'\\N_LP")
GO_HEX_ESCAPES = {"x": 2, "u": 4, "U": 8}


def go_escape_problem(raw: str) -> tuple[int, str] | None:
    """The first escape in the double-quoted scalar source `raw` (quotes
    included) that go-yaml v2 refuses, as (offset in raw, problem); None if
    every escape is one it reads."""
    i = raw.find("\\")
    while i != -1:
        ch = raw[i + 1 : i + 2]
        if ch in ("\n", "\r"):
            width = 2  # an escaped line break
        elif ch in GO_SIMPLE_ESCAPES:
            width = 2
        elif ch in GO_HEX_ESCAPES:
            width = 2 + GO_HEX_ESCAPES[ch]
            code = raw[i + 2 : i + width]
            if len(code) < width - 2 or not all(c in "0123456789abcdefABCDEF" for c in code):
                return i, "did not find expected hexdecimal number"
            value = int(code, 16)
            if 0xD800 <= value <= 0xDFFF or value > 0x10FFFF:
                return i, "found invalid Unicode character escape code"
        else:
            return i, f"found unknown escape character {ch!r}"
        i = raw.find("\\", i + width)
    return None
