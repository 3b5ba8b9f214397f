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
import importlib
import inspect
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
    report = importlib.import_module("prove.report")
    if hasattr(report, "verify"):  # the Prove report's own verifier, where it has one
        takes_dir = bool(inspect.signature(report.verify).parameters)
        out.append(
            (
                "prove",
                lambda: _as_outcomes(report.verify(results) if takes_dir else report.verify()),
            )
        )
    return out


def _as_outcomes(result: object) -> list[vc.Outcome]:
    """prove.report.verify's answer as outcomes: an Outcome, a list of them, or an exit
    status (0 verified, anything else differs)."""
    if isinstance(result, vc.Outcome):
        return [result]
    if isinstance(result, list) and all(isinstance(o, vc.Outcome) for o in result):
        return result
    if isinstance(result, int):
        status = vc.VERIFIED if result == 0 else vc.DIFFERS
        return [
            vc.Outcome(
                "results/runtime_prove.md",
                status,
                "" if result == 0 else "python -m prove.report --verify says so",
            )
        ]
    return [
        vc.Outcome(
            "results/runtime_prove.md",
            vc.DIFFERS,
            f"prove.report.verify returned {type(result).__name__}, not an outcome",
        )
    ]


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
