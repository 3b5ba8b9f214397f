"""The inductive invariant (models/RuntimeInductive.tla, models/inductive.py): the catalog marks
exactly what it covers, and TLC, on small samples, finds obligation 2 holding for the runtime
and failing for a broken variant and for IInv with a conjunct left out.  Each TLC run takes a
few seconds; `make tlc-inductive` is the full check."""

from __future__ import annotations

import pytest
import yaml

from models import catalog, inductive, tlc

DRAWS = 20000


@pytest.fixture(scope="module")
def cat():
    return catalog.load()


@pytest.fixture(scope="module")
def settings():
    return yaml.safe_load(inductive.SETTINGS.read_text())


def _step(cat, settings, tag: str, config: str, broken=None, drop="none") -> dict:
    k = inductive.job_constants(cat, config, settings["constants"], broken, settings, DRAWS, drop)
    invs = ["Safety"] + [a for a in inductive.aux_names() if a != drop]
    job = inductive.Job(f"Test_{tag}", "step", config, k, invs, draws=DRAWS, broken=broken,
                        drop=drop)  # fmt: skip
    return inductive.run_job(job, settings["seed"], "1g")


def test_the_catalog_marks_exactly_the_invariants_of_safety(cat):
    marked = {i.name for i in cat.invariants.values() if i.inductive}
    assert marked == set(inductive.covered())
    assert len(marked) >= 8


def test_every_auxiliary_conjunct_is_in_iinv_once():
    text = inductive.SPEC_FILE.read_text()
    names = inductive.aux_names()
    assert len(names) == len(set(names)) >= 20, names
    for name in names:
        assert text.count(f'k = "{name}" -> {name}') == 1, name


def test_obligation_2_holds_on_a_sample_of_the_runtime(cat, settings):
    r = _step(cat, settings, "hold", "Interlock_t2_G1")
    assert r["success"] and not r["violated"], r["errors"]
    # not vacuous: thousands of states of IInv drawn, and each had successors checked
    assert r["initial_states"] > 2000
    assert r["generated"] > 10 * r["initial_states"]


def test_a_broken_variant_breaks_obligation_2(cat, settings):
    r = _step(cat, settings, "broken", "Broken_EarlyTakeover", broken="EarlyTakeover")
    assert r["violated"] in ("Safety", "OthersExpired", "DistinctEpochs", "HolderWithinLease")
    assert r["action"] == "Claim"


def test_iinv_without_a_conjunct_is_not_inductive(cat, settings):
    r = _step(cat, settings, "drop", "Interlock_t1_G1", drop="OthersExpired")
    assert r["violated"], "IInv without OthersExpired should let a step break it"
    assert len(r["trace"]) == 2  # one step from a state of the weakened IInv


def test_the_full_report_gives_each_invariant_its_guarantee(cat):
    ex = {"properties": ["LeaseMutex", "ReceiptChainLinear"], "complete": False, "depth": 19}
    runs = [{"exhaustive": ex, "simulations": [{"depth": 120, "states_checked": 5}]}]
    g = {r["invariant"]: r["guarantee"] for r in tlc.guarantees(cat, runs, {"ok": True})}
    assert g == {"LeaseMutex": "inductive", "ReceiptChainLinear": "exhaustive to a depth"}
    g = {r["invariant"]: r["guarantee"] for r in tlc.guarantees(cat, runs, {"ok": False})}
    assert g["LeaseMutex"] == "exhaustive to a depth"
