"""Policy names, with a baseline's main knob in the name so that a sweep is a list of names.

`static-7` (scale-out 7), `hpa-65` (target 65 % CPU of the request), `flink-operator-u0.6` (utilization
target 0.6), `ds2-r1.2` (target rate 1.2 × the source rate). A baseline named without its knob (`static`,
`flink-operator`, `ds2`) takes it from the `baselines` section; an HPA always names its target.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

OWN_POLICIES = ("foresail", "foresail-cpu-only", "reactive")
BASELINE_FAMILIES = ("static", "hpa", "flink-operator", "ds2")

_NUMBER = r"(\d+(?:\.\d+)?|\.\d+)"
_FORMS = {
    "static": re.compile(r"static(?:-(\d+))?"),
    "hpa": re.compile(rf"hpa-{_NUMBER}"),
    "flink-operator": re.compile(rf"flink-operator(?:-u{_NUMBER})?"),
    "ds2": re.compile(rf"ds2(?:-r{_NUMBER})?"),
}
NAME_FORMS = "'foresail' | 'foresail-cpu-only' | 'reactive' | 'static[-N]' | 'hpa-P' | 'flink-operator[-uU]' | 'ds2[-rR]'"


@dataclass(frozen=True)
class BaselineName:
    """A baseline family and the knob its name gives (None: the knob from `baselines`)."""

    family: str
    knob: float | None


def parse_baseline(name: str) -> BaselineName | None:
    """The baseline a name denotes, None when it names no baseline; ValueError for a knob out of range."""
    for family, form in _FORMS.items():
        match = form.fullmatch(name)
        if match is None:
            continue
        text = match.group(1)
        if text is None:
            return BaselineName(family, None)
        knob = float(text)
        if not math.isfinite(knob):  # 400 nines read as an infinite HPA target
            raise ValueError(f"{name!r}: the knob {text[:20]}… is not a finite number")
        if family == "static" and not knob >= 1:
            raise ValueError(f"{name!r}: a static scale-out must be ≥ 1")
        if family == "hpa" and not knob > 0:
            raise ValueError(f"{name!r}: an HPA target must be > 0 % of the CPU request")
        if family == "flink-operator" and not 0 < knob <= 1:
            raise ValueError(f"{name!r}: the operator's utilization target must lie in (0, 1]")
        if family == "ds2" and not knob > 0:
            raise ValueError(f"{name!r}: DS2's target-rate ratio must be > 0")
        return BaselineName(family, knob)
    return None


def baseline_name(family: str, knob: float) -> str:
    """The policy name of a baseline at a knob (inverse of `parse_baseline`)."""
    if family == "static":
        return f"static-{round(knob)}"
    if family == "hpa":
        return f"hpa-{knob:g}"
    if family == "flink-operator":
        return f"flink-operator-u{knob:g}"
    if family == "ds2":
        return f"ds2-r{knob:g}"
    raise ValueError(f"not a baseline family: {family!r} (one of {', '.join(BASELINE_FAMILIES)})")


def check_policy_name(name: str) -> str:
    """The name when it names a policy, else ValueError with the accepted forms."""
    if name in OWN_POLICIES or parse_baseline(name) is not None:
        return name
    raise ValueError(f"unknown policy {name!r} (allowed: {NAME_FORMS})")
