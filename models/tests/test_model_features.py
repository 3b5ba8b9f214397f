"""The model's completed features (issue 22 item 4) and the spec-size runs (item 5): the catalog
and the matrix carry them, and TLC rejects the broken variants on the named invariants.  The two
TLC runs take a few seconds each (BFS finds the short counterexamples)."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import pytest

from models import catalog, gen_cfg, tlc

MODELS = Path(__file__).resolve().parents[1]
NEW_BROKEN = {
    "EarlyTakeover": {"LeaseMutex", "TakeoverOnlyAfterExpiry"},
    "FenceWithoutEpoch": {"LeaseMutex", "FencedWrites"},
    "UnfencedCommit": {"AtMostOneCommit", "StepResultUnique"},
    "RevokeListByDeadline": {"RevokeLinearizable"},
    "NoLocalRecheck": {"NoSendOnStalePremise"},
    "TierAtRead": {"Tier3NeverResends"},
}


@pytest.fixture(scope="module")
def cat():
    return catalog.load()


def _spec() -> str:
    return re.sub(r"\(\*.*?\*\)", "", (MODELS / "Runtime.tla").read_text(), flags=re.S)


def test_new_broken_variants_are_catalogued_and_must_be_rejected(cat):
    for name, invs in NEW_BROKEN.items():
        assert name in cat.broken and cat.broken[name].meaning
        named = {i.name for i in cat.invariants.values() if name in i.broken_by}
        assert named == invs, name
        cfgs = [c for c in cat.configs if c.broken == name]
        assert cfgs, f"{name} has no config in matrix.yaml"
        assert {r.properties[0] for r in cat.plan(cfgs[0])} == invs
        assert all(r.expected == "V" for r in cat.plan(cfgs[0]))


def test_outcome_invariants_reject_unfenced_and_early_claims(cat):
    # not only the ghost flags FencedWrites / TakeoverOnlyAfterExpiry
    assert "EarlyTakeover" in cat.invariants["LeaseMutex"].broken_by
    assert "UnfencedCommit" in cat.invariants["AtMostOneCommit"].broken_by


def test_partial_refund_local_premise_and_two_effects_are_configured(cat):
    events = {e for c in cat.configs for e in c.events}
    assert {"hand_refund_partial", "local_change"} <= events
    two = [c for c in cat.configs if "TWO_EFFECTS" in c.toggles]
    assert two and any("SHARED_GRANT" not in c.toggles for c in two)
    assert any(c.quick for c in cat.configs if c.broken == "EarlyTakeover")


def test_the_spec_has_the_new_mechanisms():
    tla = _spec()
    for op in ("Heartbeat(w) ==", "LocalChange ==", "StillOpen(g) ==", "LiveHolder(w) ==",
               "View ==", "Revoke(g) =="):  # fmt: skip
        assert op in tla, op
    resend = tla[tla.index("Resend(w, via) ==") : tla.index("Resolved(w, kind, via, st) ==")]
    assert "afterCancel |-> cancelReq" in resend  # no longer hard-coded FALSE
    assert "localOk" in tla[tla.index("TResolve(w) ==") : tla.index("Complete(w) ==")]
    assert "ghost.revokeMissed" in tla[tla.index("RevokeLinearizable ==") :]


def _opts():
    return argparse.Namespace(workers=1, heap="512m", timeout=300, write=False)


@pytest.mark.parametrize("config", ["Broken_EarlyTakeover", "Broken_RevokeListByDeadline"])
def test_tlc_rejects_the_variant_on_its_invariants(cat, config, tmp_path):
    res = tlc.check_config(cat, cat.config(config), _opts(), tmp_path)
    assert res["errors"] == []
    for name, e in res["invariants"].items():
        assert e["outcome"] == "V" and e["agree"], (name, e)


def test_full_configs_use_the_spec_base(cat):
    spec = tlc.load_full()
    for name in spec["configs"]:
        cfg = tlc.full_config(cat, name, spec)
        consts = gen_cfg.constants(cat, cfg)
        for k, v in tlc.SPEC_BASE.items():
            assert str(consts[k]) == str(v), (name, k)
        assert set(cfg.events) == set(cat.events)
        assert cfg.kind == "safety"
    assert {"symmetry", "view"} <= set(spec["reductions"])
    assert spec["budget_minutes"] > 0 and spec["checkpoint_minutes"] > 0
    assert spec["simulate"]["seeds"] and spec["simulate"]["depth"] > 12


def test_progress_of_an_interrupted_run_is_parsed():
    text = (
        "@!@!@STARTMSG 2200:0 @!@!@\nProgress(17) at 2026-01-01 00:00:00: 1,234,567 states "
        "generated (10,000 s/min), 345,678 distinct states found, 12,345 states left on queue.\n"
        "@!@!@ENDMSG 2200 @!@!@\n"
    )
    p = tlc.parse_progress(text)
    assert p == {"depth": 17, "generated": 1234567, "distinct": 345678, "queue": 12345}
    sim = tlc.parse_progress(
        "Progress(-1) at 2026-01-01 00:01:00: 3561492 states generated, -1 distinct states "
        "found, -1 states left on queue."
    )
    assert sim == {"states_checked": 3561492}


def test_full_report_states_partial_runs_and_seeds():
    doc = {"generated_at": "t", "git_commit": "abc", "git_dirty": False, "workers_per_run": 1,
           "wall_seconds": 120.0, "spec": {"constants": {"MaxClock": 12}, "events": "all",
                                           "reductions": ["symmetry", "view"]},
           "configs": [{"name": "Full_X", "constants": dict(tlc.SPEC_BASE),
                        "exhaustive": {"complete": False, "distinct": 5000, "depth": 20,
                                       "queue": 70, "seconds": 60, "budget_seconds": 60,
                                       "resumed": True, "violated": None, "errors": []},
                        "simulations": [{"seed": 7, "depth": 120, "seconds": 30,
                                         "tlc_options": "-simulate -depth 120 -seed 7",
                                         "states_checked": 900,
                                         "violated": None, "errors": []}]}]}  # fmt: skip
    md = tlc.render_full(doc)
    assert "partial (budget)" in md and "5,000" in md and "-seed 7" in md
    assert "MaxClock 12 / 12" in md and "commit abc (clean)" in md
