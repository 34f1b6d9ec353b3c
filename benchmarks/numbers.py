"""How the benchmark report writes numbers: significant digits, ratios, thousands."""

from __future__ import annotations

import math

X = "\N{MULTIPLICATION SIGN}"


def num(value: float | None, digits: int = 3) -> str:
    """``value`` to ``digits`` significant digits, with thousands separators."""
    if value is None or math.isnan(value) or math.isinf(value):
        return "n/a"
    if value == 0:
        return "0"
    magnitude = math.floor(math.log10(abs(value)))
    decimals = max(0, digits - 1 - magnitude)
    rounded = round(value, decimals)
    if rounded and math.floor(math.log10(abs(rounded))) > magnitude:
        decimals = max(0, decimals - 1)  # 0.99996 -> "1.00", not "1.000"
    return f"{value:,.{decimals}f}"


def ratio(ours: float | None, theirs: float | None) -> str:
    if ours is None or theirs is None or theirs == 0 or math.isnan(ours) or math.isnan(theirs):
        return "n/a"
    return f"{ours / theirs:.2f}"


def thousands(n: int) -> str:
    return f"{n // 1000}k" if n >= 1000 and n % 1000 == 0 else str(n)
