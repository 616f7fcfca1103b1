"""Parse quantity strings ("3.35 TB/s", "80 GB", "50 MiB", "989.4 TFLOP/s") into SI floats.

Grammar: ``<number> [<prefix>]<unit>``, optional space. SI prefixes (k/K, M, G, T, P, E) are
powers of 1000; IEC prefixes (Ki, Mi, Gi, Ti, Pi) are powers of 1024 and only apply to bytes
and bits. ``B`` is a byte and ``b`` a bit (8 b = 1 B). Units parse only into the dimension a field
expects: a bandwidth written ``3.35 TB`` is an error, never silently a size.

This is the only place unit scaling happens; everything past the loader is SI floats.
"""

from __future__ import annotations

import math
import re
from typing import Literal

from gpumodel.errors import UnitError

Dimension = Literal["bytes", "bytes_per_s", "flop_per_s", "hz", "watts", "seconds"]

SI_PREFIX = {"": 1.0, "k": 1e3, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15, "E": 1e18}
SUB_PREFIX = {"m": 1e-3, "u": 1e-6, "µ": 1e-6, "n": 1e-9, "p": 1e-12}
IEC_PREFIX = {"Ki": 2.0**10, "Mi": 2.0**20, "Gi": 2.0**30, "Ti": 2.0**40, "Pi": 2.0**50}

# unit symbol -> (dimension, scale to the SI base of that dimension)
_UNITS: dict[str, tuple[Dimension, float]] = {
    "B": ("bytes", 1.0),
    "b": ("bytes", 1 / 8),
    "bit": ("bytes", 1 / 8),
    "B/s": ("bytes_per_s", 1.0),
    "b/s": ("bytes_per_s", 1 / 8),
    "bps": ("bytes_per_s", 1 / 8),
    "FLOP/s": ("flop_per_s", 1.0),
    "FLOPS": ("flop_per_s", 1.0),
    "OP/s": ("flop_per_s", 1.0),
    "OPS": ("flop_per_s", 1.0),
    "Hz": ("hz", 1.0),
    "W": ("watts", 1.0),
    "s": ("seconds", 1.0),
}

EXAMPLES: dict[Dimension, str] = {
    "bytes": "80 GB",
    "bytes_per_s": "3.35 TB/s",
    "flop_per_s": "989.4 TFLOP/s",
    "hz": "1980 MHz",
    "watts": "700 W",
    "seconds": "5 us",
}

# re.ASCII: \d is 0-9 only (a str pattern's \d also takes Arabic-Indic and other digits)
_QUANTITY = re.compile(
    r"^\s*([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)\s*([A-Za-zµ/]*)\s*$", re.ASCII
)


def _split_unit(symbol: str) -> tuple[float, Dimension] | None:
    """Return (scale, dimension) for a prefixed unit symbol, or None if unknown."""
    if symbol in _UNITS:
        dim, scale = _UNITS[symbol]
        return scale, dim
    for prefixes, allowed in (
        (IEC_PREFIX, {"bytes", "bytes_per_s"}),
        (SI_PREFIX, None),
        (SUB_PREFIX, {"seconds"}),
    ):
        for prefix, factor in prefixes.items():
            if prefix and symbol.startswith(prefix) and symbol[len(prefix) :] in _UNITS:
                dim, scale = _UNITS[symbol[len(prefix) :]]
                if allowed is not None and dim not in allowed:
                    continue
                return factor * scale, dim
    return None


def parse_quantity(value: str | float | int, dimension: Dimension) -> float:
    """Parse ``value`` into an SI float of ``dimension``; bare numbers are taken as SI already.

    >>> parse_quantity("3.35 TB/s", "bytes_per_s")
    3350000000000.0
    >>> parse_quantity("50 MiB", "bytes")
    52428800.0
    """
    from gpumodel._validators import _show

    if not isinstance(dimension, str) or dimension not in EXAMPLES:
        raise UnitError(f"dimension must be one of {', '.join(EXAMPLES)}; got {_show(dimension)}")
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise UnitError(f"expected a quantity like '{EXAMPLES[dimension]}', got {_show(value)}")
    if isinstance(value, (int, float)):
        try:
            number = float(value)
        except OverflowError:
            raise UnitError(f"{_show(value)} is too large for a quantity") from None
    else:
        match = _QUANTITY.match(value) if len(value) <= 200 else None
        if not match:
            raise UnitError(f"expected a quantity like '{EXAMPLES[dimension]}', got {_show(value)}")
        number = float(match.group(1))
        symbol = match.group(2)
        if symbol:
            parsed = _split_unit(symbol)
            if parsed is None:
                raise UnitError(
                    f"unknown unit '{symbol}' in {value!r}; expected a quantity like "
                    f"'{EXAMPLES[dimension]}'"
                )
            scale, found = parsed
            if found != dimension:
                raise UnitError(
                    f"{value!r} is a {_NAMES[found]}, expected a {_NAMES[dimension]} "
                    f"like '{EXAMPLES[dimension]}'"
                )
            number *= scale
    if number != number or number in (float("inf"), float("-inf")):
        raise UnitError(f"{value!r} is not a finite number")
    if number < 0:
        raise UnitError(f"{value!r} must not be negative")
    return number


_NAMES: dict[Dimension, str] = {
    "bytes": "size in bytes",
    "bytes_per_s": "bandwidth",
    "flop_per_s": "compute rate",
    "hz": "frequency",
    "watts": "power",
    "seconds": "time",
}


def format_quantity(value: float, unit: str, binary: bool = False, digits: int = 3) -> str:
    """Format an SI float for humans: ``format_quantity(3.35e12, "B/s") -> '3.35 TB/s'``."""
    from gpumodel._validators import check_bool, check_int, check_number

    value = check_number(value, "value")
    check_bool(binary, "binary")
    digits = check_int(digits, "digits", ge=1, le=17)
    if not isinstance(unit, str):
        from gpumodel._validators import _show

        raise UnitError(f"unit must be text, got {_show(unit)}")
    if not unit.strip():  # '3 T' says nothing: name the unit, 'tokens' for a count
        raise UnitError("unit must not be empty (name it, e.g. 'B/s' or 'tokens')")
    if value == 0:
        return f"0 {unit}"
    steps = (
        [("Pi", 2**50), ("Ti", 2**40), ("Gi", 2**30), ("Mi", 2**20), ("Ki", 2**10), ("", 1)]
        if binary
        else [("P", 1e15), ("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3), ("", 1)]
    )
    number, prefix = _scaled(value, steps, digits)
    return f"{number} {prefix}{unit}"


def format_gb(value: float, extra_decimals: int = 0) -> str:
    """A memory size as GPU datasheets count it, decimal GB with one decimal
    (``'141.2 GB'``), or decimal TB, PB, EB with two from 1 TB on (``'52.42 TB'``, not
    ``'52423.7 GB'``); ``extra_decimals`` more."""
    for unit, scale in (("EB", 1e18), ("PB", 1e15), ("TB", 1e12)):
        if abs(value) >= scale:
            return f"{value / scale:.{2 + extra_decimals}f} {unit}"
    return f"{value / 1e9:.{1 + extra_decimals}f} GB"


def format_gb_apart(needed: float, available: float) -> tuple[str, str]:
    """``format_gb`` of two sizes with as many more decimals as it takes to tell them apart:
    'needs 80.03 GB, has 80.00 GB', not 'needs 80.0 GB, has 80.0 GB' beside 'does NOT fit'."""
    extra = 0
    while (extra < 6 and needed != available
           and format_gb(needed, extra) == format_gb(available, extra)):  # fmt: skip
        extra += 1
    return format_gb(needed, extra), format_gb(available, extra)


def format_duration(days: float) -> str:
    """A run's length: '12.3 days' from a day on, '5.2 hours' or '14.0 minutes' below it
    ('0.0 days' said nothing), seconds below a minute."""
    if days >= 1:
        return f"{days:,.1f} days"
    seconds = days * 86400.0
    for unit, size in (("hours", 3600.0), ("minutes", 60.0)):
        if seconds >= size:
            return f"{seconds / size:.1f} {unit}"
    return f"{seconds:.1f} seconds"


def _scaled(value: float, steps: list[tuple[str, float]], digits: int) -> tuple[str, str]:
    """``value`` in the largest of ``steps`` (prefix, scale; largest first, the last 1) it
    reaches, with ``digits`` significant digits: the number's text and the prefix."""
    for i, (prefix, scale) in enumerate(steps):
        if abs(value) >= scale:
            # the next prefix up where the digits shown reach 1000 (999.96 GB is "1 TB", and
            # 1000-1023 KiB, which three digits cannot show without an exponent, is in MiB)
            if i > 0 and abs(float(f"{value / scale:.{digits}g}")) >= 1000:
                prefix, scale = steps[i - 1]
            return f"{value / scale:.{digits}g}", prefix
    return f"{value:.{digits}g}", ""


def format_count(value: float, digits: int = 3) -> str:
    """A count with the suffixes :func:`parse_count` reads: ``format_count(1e12) -> '1T'``,
    ``format_count(3e11) -> '300B'`` (tokens, parameters: B for billion, as ML writes them)."""
    from gpumodel._validators import check_int, check_number

    value = check_number(value, "count")
    digits = check_int(digits, "digits", ge=1, le=17)
    steps = [("T", 1e12), ("B", 1e9), ("M", 1e6), ("k", 1e3), ("", 1.0)]
    number, suffix = _scaled(value, steps, digits)
    return number + suffix if "e" not in number else f"{value:.{digits}g}"  # past 999T: 2e+15


def format_number(x: float) -> str:
    """A plain number for humans: three significant digits, written out (with thousands
    separators) from 1,000 to 999,999 where ``.3g`` would switch to an exponent (a ridge point
    of 1,062 FLOP/B, not 1.06e+03). An infinite value (the intensity of a kernel that moves no
    bytes) is "unbounded", NaN (0 / 0) "-": never "inf" or "nan" in an output."""
    if math.isnan(x):
        return "-"
    if math.isinf(x):
        return "unbounded" if x > 0 else "-unbounded"
    return f"{x:,.0f}" if 1e3 <= abs(x) < 1e6 else f"{x:.3g}"


def format_time(seconds: float) -> str:
    """Human time: ns, µs, ms, s, min, h or days, three significant digits."""
    from gpumodel._validators import check_number

    # rounded first, so that the unit is the one the shown digits need (999.96 us is "1 ms")
    seconds = float(f"{check_number(seconds, 'seconds'):.3g}")
    if seconds < 0:  # a difference of two times: the unit of its size
        return "-" + format_time(-seconds)
    if seconds < 1e-6:
        return f"{seconds * 1e9:.3g} ns"
    if seconds < 1e-3:
        return f"{seconds * 1e6:.3g} µs"
    if seconds < 1:
        return f"{seconds * 1e3:.3g} ms"
    if seconds < 120:
        return f"{seconds:.3g} s"
    if seconds < 7200:
        return f"{seconds / 60:.3g} min"
    if seconds < 172800:
        return f"{seconds / 3600:.3g} h"
    return f"{seconds / 86400:.3g} days"


def parse_count(value: str | int | float) -> float:
    """Parse a plain count with an optional SI suffix: '2T' tokens, '7B' params, '50k'."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    text = str(value).strip().replace("_", "")
    mult = {"k": 1e3, "K": 1e3, "M": 1e6, "B": 1e9, "G": 1e9, "T": 1e12}
    try:
        if text and text[-1] in mult:
            return float(text[:-1]) * mult[text[-1]]
        return float(text)
    except ValueError:
        raise UnitError(f"expected a count like '2T' or '7e9', got {value!r}") from None
