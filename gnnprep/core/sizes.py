"""Human sizes (``512MiB``, ``8GiB``, ``2G``) and machine-derived default budgets."""

from __future__ import annotations

import re

from gnnprep.core.errors import OptionError

_UNITS = {
    "": 1, "b": 1,
    "k": 1024, "kb": 1000, "kib": 1024,
    "m": 1024**2, "mb": 1000**2, "mib": 1024**2,
    "g": 1024**3, "gb": 1000**3, "gib": 1024**3,
    "t": 1024**4, "tb": 1000**4, "tib": 1024**4,
}


def parse_size(text: str | int, what: str = "--memory-budget") -> int:
    """Parse ``512MiB``, ``8GiB``, ``2G`` (binary), ``2GB`` (decimal) or a byte count."""
    if isinstance(text, int):
        return text
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([a-zA-Z]*)\s*", str(text))
    if not m or m.group(2).lower() not in _UNITS:
        raise OptionError(what, f"cannot read size {text!r}; expected e.g. 512MiB, 8GiB or 2G", sep=": ")
    value = int(float(m.group(1)) * _UNITS[m.group(2).lower()])
    if value <= 0:
        raise OptionError(what, f"size must be positive, got {text!r}", sep=": ")
    return value


def format_size(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} B"


def format_size_up(n: float) -> str:
    """``n`` bytes as :func:`format_size` writes it, rounded up (a budget given back as printed is
    then at least ``n``: what an error naming the least budget prints)."""
    import math

    for unit, scale in (("KiB", 2**10), ("MiB", 2**20), ("GiB", 2**30)):
        if n < 1024 * scale:
            return f"{math.ceil(10 * n / scale) / 10:.1f} {unit}"
    return f"{math.ceil(10 * n / 2**40) / 10:.1f} TiB"


def available_ram() -> int:
    import psutil

    return int(psutil.virtual_memory().available)


def default_host_budget() -> int:
    """Half of the RAM that is free now: a safe share that leaves room for the page cache."""
    return max(256 * 1024**2, available_ram() // 2)
