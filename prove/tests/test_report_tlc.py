"""The Prove report's TLC cross-reference reads results/runtime_tlc.json (issue 8)."""

from __future__ import annotations

from prove.report import REPO, tlc_outcomes


def test_tlc_outcomes_from_the_committed_model_results(tmp_path) -> None:
    out = tlc_outcomes(REPO / "results" / "runtime_tlc.json")
    assert out[("interlock", "EffectAtMostOnceTier12")] == "hold"  # assumptions in force
    assert "t2" in out[("temporal_idem", "EffectAtMostOnceTier12")]  # the baseline's duplicate
    assert out[("temporal_precheck", "Tier3NeverResends")] == "violated at t3"
    assert tlc_outcomes(tmp_path / "missing.json") == {}
