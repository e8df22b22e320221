"""Every baseline at equal service with foresail: each one's main knob raised until its seconds over the SLO
are no worse than foresail's on the same trace and seeds, and what that costs in workers and rescales
(daemon/equal_service.py). The reactive plan's headroom is one more family (`--families ...,reactive`).

Usage: python benchmarks/equal_service.py [--traces sine,ysb,traffic|FILE,...|--suite NAME] [--seeds 3]
       [--families static,hpa,flink-operator,ds2] [--jobs N] [--out docs/evaluation/equal_service.json]
       [--config FILE] [--json]
       python benchmarks/equal_service.py --out FILE --render-only
--config gives every run's other settings (e.g. `scaling.granularity: vertex`: foresail and every baseline
on the adaptive scheduler's per-vertex path). --out keeps the results for the evaluation report
(`decision_quality.py --report ... --render-only`; the load-shape family's, `--suite family --out
docs/evaluation/family/equal_service.json`, for `family_evaluation.py`); --render-only prints the table of
such a file again.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from forecasting.blas import limit_blas_threads  # noqa: E402  first: one BLAS thread for every library loaded later

# isort: split
from config.load import ConfigError, load_config  # noqa: E402
from daemon.build import load_workload  # noqa: E402
from daemon.cli import with_config_errors  # noqa: E402
from daemon.equal_service import BASELINE_FAMILIES, FAMILIES, equal_service, markdown  # noqa: E402
from daemon.logs import configure_logging  # noqa: E402
from daemon.report import TRACE_TITLES, TRACES, WORKLOADS  # noqa: E402
from daemon.suite import suite_workloads  # noqa: E402


def main() -> int:
    """Exit 2 with one line on a usage or config error (a misspelt family, a missing trace)."""
    return with_config_errors(_main)


def _main() -> int:
    limit_blas_threads()
    configure_logging("warning", "console", sys.stderr)  # runs in this process too: only the figures
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--traces", default=",".join(TRACES), help="shared trace names or trace files")
    parser.add_argument("--suite", help="every load of a suite instead (shared, family, development, …)")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--families", default=",".join(BASELINE_FAMILIES))
    parser.add_argument("--jobs", type=int, default=None, help="parallel runs (default: one per core)")
    parser.add_argument("--out", type=Path, help="write the results as JSON here")
    parser.add_argument("--config", type=Path, help="YAML config file: every run's other settings")
    parser.add_argument("--json", action="store_true", help="print JSON instead of the table")
    parser.add_argument("--render-only", action="store_true", help="print the table of --out again")
    args = parser.parse_args()
    titles = {file: TRACE_TITLES[name] for name, file in TRACES.items()}
    if args.render_only and args.config is not None:
        parser.error("--render-only prints saved results: --config would not be read")
    if args.render_only:
        if args.out is None:
            parser.error("--render-only prints the file given with --out")
        if not args.out.is_file():
            raise ConfigError("--out", [f"--out {args.out}: no saved results; run without --render-only"])
        saved = json.loads(args.out.read_text())
        print(markdown(saved["results"], titles))
        return 0
    if args.suite:
        workloads = list(suite_workloads(args.suite).values())
    else:
        names = [t.strip() for t in args.traces.split(",") if t.strip()]
        workloads = [str(WORKLOADS / TRACES[t]) if t in TRACES else t for t in names]
    families = [f.strip() for f in args.families.split(",") if f.strip()]
    problems = [
        f"--families: no family {f!r} (known: {', '.join(FAMILIES)})" for f in families if f not in FAMILIES
    ]
    if not families:
        problems.append("--families: name at least one family")
    if args.seeds < 1:
        problems.append(f"--seeds: need at least 1, got {args.seeds}")
    if args.jobs is not None and args.jobs < 1:
        problems.append(f"--jobs: need at least 1, got {args.jobs}")
    if problems:
        raise ConfigError("command line", problems)
    base = load_config(args.config)  # a broken file: one line, before any run
    for workload in workloads:  # a missing trace: one line, before any run
        load_workload(workload)
    started, load_before = time.perf_counter(), os.getloadavg()[0]
    results = equal_service(
        workloads,
        args.seeds,
        families,
        base=base,
        jobs=args.jobs,
        progress=lambda line: print(line, file=sys.stderr),
    )
    elapsed_s = time.perf_counter() - started
    for result in results:  # the repository's traces by their path in it, not this checkout's
        path = Path(result["workload"]).resolve()
        if path.is_relative_to(REPO):
            result["workload"] = str(path.relative_to(REPO))
    if args.out:  # with how it was measured, which the report prints beside the figures
        measured = {
            "command": "python benchmarks/equal_service.py " + " ".join(sys.argv[1:]),
            "wall_s": elapsed_s,
            "load": f"{load_before:.1f} at the start, {os.getloadavg()[0]:.1f} at the end",
            "results": results,
        }
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(measured, indent=1) + "\n")
    if args.json:
        print(json.dumps(results))
        return 0
    print(f"Mean over {args.seeds} seed(s) per row; {elapsed_s:.0f} s wall.\n")
    print(markdown(results, titles))
    return 0


if __name__ == "__main__":
    sys.exit(main())
