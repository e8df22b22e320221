"""The load-shape family beside the shared traces: every policy per load, the oracle floor, the targets.

Usage:
  python benchmarks/family_evaluation.py --out DIR [--policies foresail,reactive,...] [--seeds 3] [--jobs 2]
      [--config FILE]
      runs `compare --suite all` into DIR (suite.json, suite.md) and prints the sectioned tables (--config:
      every run's other settings, e.g. `scaling.granularity: vertex`);
  python benchmarks/family_evaluation.py --out DIR --render-only
      prints them again from DIR/suite.json.
Where DIR/equal_service.json exists (`python benchmarks/equal_service.py --suite family --out
DIR/equal_service.json`), every baseline at equal service on each shape follows the tables.
The tables are split into the shared traces, the development shapes (the policy may be tuned on them) and
the held-out shapes (only reported), and name foresail's worst load on each target.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from forecasting.blas import limit_blas_threads  # noqa: E402  first: one BLAS thread for every library loaded later

# isort: split

from config.load import ConfigError, load_config  # noqa: E402
from daemon.cli import with_config_errors  # noqa: E402
from daemon.report import equal_service_section  # noqa: E402
from daemon.suite import run_and_write, suite_table, suite_workloads  # noqa: E402

SECTIONS = (
    ("Shared traces", "shared"),
    ("Development shapes", "development"),
    ("Held-out shapes", "held-out"),
)


def sectioned(rows: list[dict], seeds: int) -> str:
    """One table per section and foresail's worst load per target."""
    out = []
    for title, suite in SECTIONS:
        loads = set(suite_workloads(suite))
        part = [r for r in rows if r["load"] in loads]
        if part:
            out += [f"### {title}", "", suite_table(part, seeds)]
    ours = [r for r in rows if r["policy"] == "foresail"]
    if ours:
        slo = max(ours, key=lambda r: r["slo_share"])
        ratio = max(ours, key=lambda r: r["oracle_ratio"])
        busy = max(ours, key=lambda r: r["rescales_per_h"])
        met = sum(all(r["meets"].values()) for r in ours)
        out += [
            f"foresail meets every target on {met} of {len(ours)} loads. Worst loads: seconds over the SLO "
            f"`{slo['load']}` ({100 * slo['slo_share']:.2f}% of the time{_after_restart(slo)}), workers `{ratio['load']}` "
            f"({ratio['oracle_ratio']:.2f}× the oracle), rescales `{busy['load']}` "
            f"({busy['rescales_per_h']:.1f} per hour).",
            "",
        ]
    return "\n".join(out)


def _after_restart(row: dict) -> str:
    """Which part of a load's seconds over the SLO restarts began (absent in suites run before it)."""
    began = row.get("seconds_over_slo_after_restart")
    if began is None:
        return ""
    return f"; {began:.0f} of its {row['seconds_over_slo']:.0f} s after a restart"


def main() -> int:
    """Exit 2 with one line on a config error (a broken --config file)."""
    return with_config_errors(_main)


def _main() -> int:
    limit_blas_threads()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--policies", default="foresail,reactive,flink-operator,hpa-80")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--jobs", type=int, default=None)
    parser.add_argument("--config", type=Path, help="YAML config file: every run's other settings")
    parser.add_argument("--render-only", action="store_true")
    args = parser.parse_args()
    if args.render_only and args.config is not None:
        parser.error("--render-only prints saved tables: --config would not be read")
    if not args.render_only:
        policies = [p.strip() for p in args.policies.split(",") if p.strip()]
        run_and_write(
            load_config(args.config), suite_workloads("all"), policies, args.seeds, args.jobs, args.out
        )
    if not (args.out / "suite.json").is_file():
        raise ConfigError("--out", [f"--out {args.out}: no saved suite.json; run without --render-only"])
    saved = json.loads((args.out / "suite.json").read_text())
    print(sectioned(saved["rows"], saved["seeds"]))
    equal = args.out / "equal_service.json"
    if equal.is_file():
        print(equal_service_section(json.loads(equal.read_text()), heading="###"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
