"""The claims section and the decisive share (prove/claims.py) on hand-made cells."""

from __future__ import annotations

from prove import claims, report


def cell(k: int, n: int, **counters: int) -> dict:
    return {"n": n, "correct": k, "correct_rate": k / n, "wilson95": list(report.wilson(k, n)),
            "counters": {"duplicate_applications": 0, "blocked_never_sent": 0, **counters},
            "per_1000": {"duplicate_applications": 0, "blocked_never_sent": 0}}  # fmt: skip


def sweep(rates: dict[tuple[str, int], tuple[tuple, tuple, tuple]]) -> tuple[dict, dict, list]:
    """(scenario, tier) -> ((k, n) runtime, (a), (b)): the index, verdicts and table rows."""
    idx, verdicts, table = {}, {}, []
    for (scn, tier), trio in rates.items():
        for system, (k, n) in zip(("runtime", *claims.BASELINES), trio, strict=True):
            idx[(scn, "base", system, tier)] = cell(k, n)
        rt = idx[(scn, "base", "runtime", tier)]
        row = {"scenario": scn, "variant": "base", "tier": tier}
        for base, key in zip(claims.BASELINES, ("verdict_vs_a", "verdict_vs_b"), strict=True):
            row[key] = verdicts[(scn, "base", tier, base)] = report.verdict(
                rt, idx[(scn, "base", base, tier)]
            )
        table.append(row)
    return idx, verdicts, table


C = claims.Claim(
    "X",
    "x",
    {"temporal_idem": "better", "temporal_check": "better"},
    ("sent_under_revoked_grant",),
    cells=(("S03", None),),
)


def test_a_claim_is_supported_only_when_every_differing_comparison_is_decided() -> None:
    idx, verdicts, _ = sweep({("S03", 1): ((5, 5), (0, 5), (5, 5))})
    out = claims.judge(C, idx, verdicts)
    assert out["status"].startswith("supported"), out
    assert out["decided"] == ["S03 t1 vs (a)"]  # (b) equally correct: shows nothing
    idx, verdicts, _ = sweep({("S03", 1): ((5, 5), (2, 5), (5, 5))})
    out = claims.judge(C, idx, verdicts)
    assert out["status"].startswith("not decisive") and out["undecided"] == ["S03 t1 vs (a)"]


def test_a_worse_verdict_or_a_nonzero_counter_contradicts() -> None:
    idx, verdicts, _ = sweep({("S03", 2): ((0, 5), (5, 5), (5, 5))})
    assert claims.judge(C, idx, verdicts)["status"] == "CONTRADICTED"
    idx, verdicts, _ = sweep({("S03", 2): ((5, 5), (0, 5), (0, 5))})
    idx[("S03", "base", "runtime", 2)]["counters"]["sent_under_revoked_grant"] = 1
    out = claims.judge(C, idx, verdicts)
    assert out["status"] == "CONTRADICTED"
    assert "sent_under_revoked_grant = 1" in out["contradictions"][0]


def test_not_worse_claims_are_never_called_proven() -> None:
    nw = claims.Claim("Y", "y", {"temporal_idem": "not_worse"}, cells=(("S01", (1,)),))
    idx, verdicts, _ = sweep({("S01", 1): ((5, 5), (5, 5), (5, 5)),
                              ("S01", 2): ((0, 5), (5, 5), (5, 5))})  # fmt: skip
    out = claims.judge(nw, idx, verdicts)
    assert out["status"].startswith("consistent") and len(out["rows"]) == 1  # tier 2 not in it
    assert claims.judge(claims.Claim("Z", "z", cells=(("S77", None),)), idx, verdicts)[
        "status"
    ] == ("not measured in this sweep")


def test_decisive_share_counts_only_differing_point_estimates() -> None:
    idx, _, table = sweep({("S01", 1): ((5, 5), (5, 5), (5, 5)),  # no difference: not counted
                           ("S02", 1): ((5, 5), (0, 5), (2, 5)),  # one decided, one open
                           ("S03", 1): ((20, 20), (0, 20), (19, 20))})  # fmt: skip
    share = claims.decisive_share(table, idx)
    assert (share["differ"], share["decided"]) == (4, 2)
    assert share["open"] == ["S02 t1 base vs (b)", "S03 t1 base vs (b)"]


def test_the_scenarios_name_the_claims_the_published_report_was_judged_on() -> None:
    """Moving the claim->cells table into the scenario files lost nothing: the shipped
    scenarios bind every claim to the cells of the table that packs from before keep."""
    from prove.scenario import load_all

    bound = {c.id: c.cells for c in claims.bind(load_all(None))}
    assert bound == claims.CELLS_BEFORE_SCENARIOS_NAMED_CLAIMS


def test_a_pack_from_before_named_claims_keeps_its_cells() -> None:
    """Scenario files without `claims:` (a pack committed before the field) take the table;
    once any scenario names claims, only what the scenarios name counts."""

    class Old:
        id, claims = "S03", None

    class New:
        id, claims = "S42", (("C3", None),)

    old = {c.id: c.cells for c in claims.bind([Old()])}
    assert old["C3"] == (("S03", None), ("S12", None))
    new = {c.id: c.cells for c in claims.bind([New()])}
    assert new["C3"] == (("S42", None),) and new["C1"] == ()


def test_every_claim_is_named_by_a_shipped_scenario() -> None:
    from prove.scenario import load_all

    for c in claims.bind(load_all(None)):
        assert c.cells, f"no scenario names {c.id}"
