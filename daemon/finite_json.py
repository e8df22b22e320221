"""JSON has no NaN or Infinity (strict parsers refuse them): what foresail writes as JSON has null there."""

from __future__ import annotations

import math


def finite(value: object) -> object:
    """`value` with every float that is not a finite number replaced by None, through dicts and lists."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {key: finite(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [finite(item) for item in value]
    return value
