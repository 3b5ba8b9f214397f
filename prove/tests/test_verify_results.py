"""Every published report recomputes from its committed raw data (docs/results.md), and each
verifier notices when one number of the raw data no longer gives the published text."""

from __future__ import annotations

import copy
import gzip
import json
import shutil
from pathlib import Path

import pytest

from conformance import mutants
from conformance.matrix import run as matrix
from prove import bench, soak, verify_results
from world import verify_common as vc

RESULTS = Path(__file__).resolve().parents[2] / "results"


def _copy(tmp: Path, *names: str) -> Path:
    for name in names:
        (tmp / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(RESULTS / name, tmp / name)
    return tmp


def _edit_json(path: Path, change) -> None:  # type: ignore[no-untyped-def]
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data, indent=1))


# -- the committed results --------------------------------------------------------------------


def test_every_committed_report_is_verified_or_says_why_not(capsys) -> None:
    outcomes = verify_results.run(RESULTS)
    names = {o.name for o in outcomes}
    assert {
        "results/mutants.md",
        "results/matrix.md",
        "results/bench.md",
        "results/soak.md",
        "results/failover.md",
    } <= names, names
    differ = [o.report() for o in outcomes if o.status == vc.DIFFERS]
    assert not differ, "\n".join(differ)
    for o in outcomes:
        assert o.status in (vc.VERIFIED, vc.UNVERIFIABLE), o.line()
        if o.status == vc.UNVERIFIABLE:  # says why and how to fix it
            assert "regenerate with python -m" in o.reason, o.line()
    assert verify_results.main([]) == 0
    assert "0 differ" in capsys.readouterr().out


# -- each verifier notices one changed number ---------------------------------------------------


def test_mutants_verifier_notices_one_mutant_that_was_not_killed(tmp_path) -> None:
    _copy(tmp_path, "mutants.json", "mutants.md")
    assert mutants.verify(tmp_path).status == vc.VERIFIED

    def survive(res: dict) -> None:
        res["mutants"][3]["verdict"] = "survived"

    _edit_json(tmp_path / "mutants.json", survive)
    out = mutants.verify(tmp_path)
    assert out.status == vc.DIFFERS, out.report()
    n = len(json.loads((RESULTS / "mutants.json").read_text())["mutants"])
    assert f"committed {n}" in out.reason and f"{n - 1}" in out.reason, out.reason
    assert "python -m conformance.mutants --render" in out.report()


def test_matrix_verifier_notices_one_cell_verdict(tmp_path) -> None:
    _copy(tmp_path, "matrix.json", "matrix.md")
    assert matrix.verify(tmp_path).status == vc.VERIFIED

    rep = json.loads((tmp_path / "matrix.json").read_text())
    failed = rep["totals"]["FAIL"]  # the committed run's own failures, if any
    passing = next(i for i, c in enumerate(rep["cells"]) if c["verdict"] == "PASS")

    def fail(rep: dict) -> None:
        rep["cells"][passing]["verdict"] = "FAIL"

    _edit_json(tmp_path / "matrix.json", fail)
    out = matrix.verify(tmp_path)
    assert out.status == vc.DIFFERS, out.report()
    text = out.report()
    assert "totals.PASS" in text and f"totals.FAIL: {failed} -> {failed + 1}" in text, text
    assert "numbers differ" in out.reason, out.reason


def test_bench_verifier_notices_one_repetitions_latency(tmp_path) -> None:
    _copy(tmp_path, "bench_onestep.json", "bench_onestep.md")
    assert bench.verify(tmp_path, "bench_onestep").status == vc.VERIFIED

    def slower(report: dict) -> None:  # every sample of one repetition 5 ms slower
        rep = report["shape1"]["reps"][0]["runtime"]
        rep["seq_ms"] = [x + 5.0 for x in rep["seq_ms"]]

    _edit_json(tmp_path / "bench_onestep.json", slower)
    out = bench.verify(tmp_path, "bench_onestep")
    assert out.status == vc.DIFFERS, out.report()
    text = out.report()
    assert "shape1.summary.runtime.per_rep[0].p50_ms" in text, text
    assert "numbers differ" in out.reason, out.reason


def test_bench_verifier_notices_one_refund_point(tmp_path) -> None:
    _copy(tmp_path, "bench.json", "bench.md")
    assert bench.verify(tmp_path, "bench").status == vc.VERIFIED

    def faster(report: dict) -> None:
        report["shape2"]["points"][0]["wf_per_s"] += 40.0

    _edit_json(tmp_path / "bench.json", faster)
    out = bench.verify(tmp_path, "bench")
    assert out.status == vc.DIFFERS and "shape2.summary" in out.report(), out.report()


# -- soak: raw rows kept beside the report ------------------------------------------------------

T = "2026-12-01T00:00:{:06.3f}+00:00"


def _raw() -> list[dict]:
    """Four workflows: two completed, one failed, one never ended; one takeover claimed
    before the lease it took over expired and before the epoch under it; a tier-1 refund
    applied twice."""
    wf = [
        ("w1", 1, "completed", 1.0, 1.25),
        ("w2", 2, "completed", 2.0, 2.5),
        ("w3", 3, "failed", 3.0, 4.0),
        ("w4", 1, "running", 5.0, 5.0),
    ]
    return [
        {
            "kind": "run",
            "started": 4,
            "wall": 10.0,
            "chaos_db0": T.format(0),
            "chaos_db1": T.format(10),
        },
        *(
            {
                "kind": "workflow",
                "id": i,
                "tier": tier,
                "status": st,
                "outcome": None,
                "created_at": T.format(a),
                "updated_at": T.format(b),
                "error": "boom" if st == "failed" else None,
            }
            for i, tier, st, a, b in wf
        ),
        {"kind": "effect", "tier": 1, "state": "committed", "sends": 1},
        {"kind": "effect", "tier": 2, "state": "committed", "sends": 2},
        {"kind": "effect", "tier": 3, "state": "ambiguous", "sends": 1},
        {
            "kind": "claim",
            "workflow_id": "w1",
            "epoch": 1,
            "claimed_at": T.format(1.1),
            "prev_status": "pending",
            "prev_lease_expires_at": None,
        },
        {
            "kind": "claim",
            "workflow_id": "w1",
            "epoch": 2,
            "claimed_at": T.format(1.05),
            "prev_status": "running",
            "prev_lease_expires_at": T.format(2),
        },
        {"kind": "refund", "tier": 1, "key": "k1"},
        {"kind": "refund", "tier": 1, "key": "k1"},
        {"kind": "refund", "tier": 2, "key": "k2"},
        *({"kind": "rss", "worker": "s0-0", "t": float(t), "mib": 10.0} for t in range(4)),
    ]


def _facts() -> dict:
    """A soak report's facts (the committed one's), for four workflows."""
    report = json.loads((RESULTS / "soak.json").read_text())
    facts = {
        k: report[k]
        for k in (
            "date",
            "config",
            "git",
            "machine",
            "versions",
            "emulated",
            "wall_s",
            "chaos_s",
            "chaos",
            "invariants",
        )
    }
    facts["config"] = dict(facts["config"], workflows=4, workers=2)
    return facts


def test_soak_counts_come_from_the_raw_rows() -> None:
    agg = soak.aggregate(_facts(), _raw())
    c = agg["counts"]
    assert (c["started"], c["terminal"], c["completed"], c["lost"]) == (4, 3, 2, 1), c
    assert c["duplicates_tier12"] == 1 and agg["duplicates"]["tier1"]["examples"] == ["k1"]
    assert (c["early_takeovers"], c["epochs_backwards"], c["takeovers_after_expiry"]) == (1, 1, 1)
    assert (c["applications"], c["sends"], c["ambiguous_tier3"]) == (3, 4, 1), c
    assert agg["verdict"] == "FAIL" and "lost" in agg["failed"]
    assert agg["lost_examples"] == ["w4"] and agg["failed_examples"][0]["error"] == "boom"
    assert agg["throughput"]["latency_ms"] == {"n": 3, "p50": 500.0, "p99": 990.0, "max": 1000.0}
    assert agg["memory"]["workers"]["s0-0"]["slope_mib_per_min"] == 0.0


def test_soak_verifier_recomputes_from_raw_rows_and_notices_one_changed_row(tmp_path) -> None:
    facts = _facts()
    soak.write_report(tmp_path, "soak", {**facts, **soak.aggregate(facts, _raw()), "raw": _raw()})
    first = (tmp_path / "raw" / "soak.jsonl.gz").read_bytes()
    assert gzip.decompress(first).count(b"\n") == len(_raw())
    assert soak.verify(tmp_path, "soak").status == vc.VERIFIED
    # byte-reproducible: the same rows give the same file
    soak.write_report(tmp_path, "soak", {**facts, **soak.aggregate(facts, _raw()), "raw": _raw()})
    assert (tmp_path / "raw" / "soak.jsonl.gz").read_bytes() == first

    rows = _raw()
    rows[4]["status"] = "completed"  # w4 ended after all: nothing lost
    vc.write_jsonl_gz(tmp_path / "raw" / "soak.jsonl.gz", rows)
    out = soak.verify(tmp_path, "soak")
    assert out.status == vc.DIFFERS, out.report()
    assert "counts.lost: 1 -> 0" in out.report(), out.report()


def test_soak_without_raw_rows_is_unverifiable_but_its_markdown_must_match_its_json(
    tmp_path,
) -> None:
    _copy(tmp_path, "soak.json", "soak.md")
    out = soak.verify(tmp_path, "soak")
    assert out.status == vc.UNVERIFIABLE and "no raw data" in out.reason, out.line()
    md = tmp_path / "soak.md"
    md.write_text(
        md.read_text().replace(
            "| lost (started, never terminal) | 0 |", "| lost (started, never terminal) | 3 |"
        )
    )
    out = soak.verify(tmp_path, "soak")
    assert out.status == vc.DIFFERS and "committed 3" in out.reason, out.report()


# -- the shared helpers -----------------------------------------------------------------------


def test_the_freshness_banner_is_no_part_of_the_comparison() -> None:
    body = "# Report\n\n42 runs\n"
    banner = "<!-- freshness -->\nmade 3 days ago at abc123\n<!-- /freshness -->\n"
    assert vc.strip_banner(banner + body) == body
    assert vc.compare("r.md", banner + body, body) == []
    diff = vc.compare("r.md", body, body.replace("42", "43"))
    assert "-42 runs" in diff and "+43 runs" in diff


def test_a_long_difference_is_cut_to_thirty_lines() -> None:
    a = "".join(f"line {i}\n" for i in range(100))
    b = "".join(f"line {i + 1000}\n" for i in range(100))
    diff = vc.compare("r.md", a, b)
    assert len(diff) == vc.DIFF_LINES + 1 and diff[-1].startswith("... "), diff[-3:]
    assert vc.numbers_that_differ("a 1 b 2\n", "a 1 b 3\n") == (["2"], ["3"])


@pytest.mark.parametrize(
    "stored, again, differs",
    [
        ({"x": 1.0}, {"x": 1}, False),
        ({"x": 1.0}, {"x": 1.5}, True),
        ({"x": True}, {"x": 1}, True),
        ({}, {"new": {"median": None, "min": None, "n": 0}}, False),  # added later, no data
        ({}, {"new": {"median": 2.0, "n": 1}}, True),
    ],
)
def test_json_aggregates_compare_by_value(stored: dict, again: dict, differs: bool) -> None:
    assert bool(vc.diff_json(stored, again)) is differs


def test_copies_are_not_the_committed_files(tmp_path) -> None:
    """The tests above edit copies: the committed results stay as they are."""
    before = (RESULTS / "matrix.json").read_bytes()
    _copy(tmp_path, "matrix.json")
    _edit_json(tmp_path / "matrix.json", lambda rep: rep.update(seed=copy.copy(99)))
    assert (RESULTS / "matrix.json").read_bytes() == before
