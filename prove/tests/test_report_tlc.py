"""The Prove report's TLC cross-reference reads results/runtime_tlc.json (issue 8)."""

from __future__ import annotations

import json
from types import SimpleNamespace

from prove.report import REPO, tlc_outcomes, tlc_rows


def test_tlc_outcomes_from_the_committed_model_results(tmp_path) -> None:
    out = tlc_outcomes(REPO / "results" / "runtime_tlc.json")
    assert out[("interlock", "EffectAtMostOnceTier12")] == "hold"  # assumptions in force
    assert "t2" in out[("temporal_idem", "EffectAtMostOnceTier12")]  # the baseline's duplicate
    assert out[("temporal_precheck", "Tier3NeverResends")] == "violated at t3"
    assert tlc_outcomes(tmp_path / "missing.json") == {}


def test_a_row_the_tlc_results_predate_is_not_yet_checked(tmp_path) -> None:
    # a new catalog row is absent from results/runtime_tlc.json until its quick TLC run is
    # merged in: the cross-reference names that run, never "n/a (not in the model)"
    doc = json.loads((REPO / "results" / "runtime_tlc.json").read_text())
    for c in doc["configs"]:
        c["invariants"].pop("NoOverlappingSends", None)
    path = tmp_path / "runtime_tlc.json"
    path.write_text(json.dumps(doc))
    out = tlc_outcomes(path)
    cell = out[("interlock", "NoOverlappingSends")]
    assert cell.startswith("not yet checked: run `python -m models.tlc --only ")
    assert "Quick_t2_G1" in cell and cell.endswith(" --merge`")
    assert out[("interlock", "EffectAtMostOnceTier12")] == "hold"
    scn = SimpleNamespace(id="S1", invariants=("NoOverlappingSends",))
    [row] = tlc_rows([scn], [], out)
    assert row[2] == "not yet checked" and row[5] == cell
