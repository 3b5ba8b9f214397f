"""`python -m prove.verify_results`: check every published report in results/ against the
committed raw data it was computed from, without running anything (docs/results.md).

One line per report: verified, unverifiable (and why: a result made before its raw data was
kept), or DIFFERS (the numbers that differ and the command that fixes it). Exits 1 when any
report differs. Reads files only: a few seconds.

    python -m prove.verify_results            # every report
    python -m prove.verify_results -v         # with each difference's diff
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path

from world import verify_common as vc

RESULTS = Path(__file__).resolve().parents[1] / "results"


def verifiers(results: Path) -> list[tuple[str, Callable[[], list[vc.Outcome]]]]:
    """(report family, a call that verifies its reports) for every family with a verifier."""
    from conformance import mutants
    from conformance.matrix import run as matrix
    from prove import bench, soak

    out: list[tuple[str, Callable[[], list[vc.Outcome]]]] = [
        ("mutants", lambda: [mutants.verify(results)]),
        (
            "matrix",
            lambda: [
                matrix.verify(results, "results"),
                matrix.verify(results / "matrix_rerun", "results/matrix_rerun"),
            ],
        ),
        ("bench", lambda: [bench.verify(results, n) for n in bench.VERIFIED_NAMES]),
        ("soak", lambda: [soak.verify(results, n) for n in soak.VERIFIED_NAMES]),
    ]
    out.append(("prove", lambda: [_prove(results)]))
    return out


def _prove(results: Path) -> vc.Outcome:
    """The Prove report against its pack (prove/prove_raw.py), as `prove.report --verify`."""
    from prove import report

    name = "results/runtime_prove.md"
    problems = report.verify(results)
    if not problems:
        return vc.Outcome(name, vc.VERIFIED)
    if problems[0].startswith("no raw data"):
        return vc.Outcome(name, vc.UNVERIFIABLE, problems[0], regenerate="make prove")
    return vc.Outcome(name, vc.DIFFERS, problems[0], regenerate="make prove",
                      render="python -m prove.report --render", details=problems[1:])  # fmt: skip


def run(results: Path = RESULTS) -> list[vc.Outcome]:
    """Every verifier's outcomes; a verifier that raises is a DIFFERS that names the error."""
    outcomes: list[vc.Outcome] = []
    for family, call in verifiers(results):
        try:
            outcomes += call()
        except Exception as exc:  # noqa: BLE001 - a broken verifier must not hide the others
            outcomes.append(
                vc.Outcome(
                    f"{family} reports",
                    vc.DIFFERS,
                    f"the verifier failed: {type(exc).__name__}: {exc}",
                )
            )
    return outcomes


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m prove.verify_results", description=__doc__.split("\n")[0]
    )
    ap.add_argument("-v", "--verbose", action="store_true", help="print each difference's diff")
    ap.add_argument(
        "--results", default=str(RESULTS), help="the results directory (default: results/)"
    )
    args = ap.parse_args(argv)
    results = Path(args.results)
    if not results.is_dir():
        ap.error(f"{results} is not a directory; give --results the directory the reports are in")
    t0 = time.monotonic()
    outcomes = run(results)
    for o in outcomes:
        print(o.report() if args.verbose or o.status == vc.DIFFERS else o.line())
    differ = sum(o.status == vc.DIFFERS for o in outcomes)
    counts = {s: sum(o.status == s for o in outcomes) for s in (vc.VERIFIED, vc.UNVERIFIABLE)}
    print(
        f"{len(outcomes)} reports: {counts[vc.VERIFIED]} verified, "
        f"{counts[vc.UNVERIFIABLE]} unverifiable, {differ} differ "
        f"({time.monotonic() - t0:.1f} s)"
    )
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
