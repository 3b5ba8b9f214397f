"""The invariant catalog (models/catalog.yaml) and the TLC matrix load and validate; bad ones fail
with an error naming the file and the entry.  Fast: no TLC."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from models import catalog, gen_cfg

ROOT = Path(__file__).resolve().parents[2]
MODELS = ROOT / "models"


@pytest.fixture(scope="module")
def cat():
    return catalog.load()


# The names docs/design.md#invariant-catalog lists, plus docs/design.md#model-findings's additions.  This is the one place a test spells
# them: it checks that the catalog still carries every contract name, not a second source.
SPEC_21 = """NoRerunAfterComplete StepResultUnique FencedWrites LeaseMutex TakeoverOnlyAfterExpiry
AtMostOneCommit EffectAtMostOnceTier12 Tier3NeverResends NoOverlappingSends
CommittedImpliesApplied AmbiguousOnlyWhenUnknowable EffectCheckpointAtomic SendRequiresLiveClaim
NoSendUnderRevokedGrant RevokeLinearizable NoSendOnStalePremise RecoveryRechecks PayloadBound
NoSendAfterCancel LateResultPreserved ReceiptChainLinear ReceiptTruthful TimerNotEarly
SignalExactlyOnceConsumed NoLostWakeup VersionPinned NonDeterminismLoud ForkNeverResends
Termination EffectResolved PremiseTrueAtSend""".split()
BROKEN = """NaiveRecovery NoFencing GrantCheckOutsideTxn CommitWithoutCheckpoint RecoverBeforeDeadline
StopwatchAfterDispatch LateAckDropped WakeOnlyIfSleeping NoLocalLeaseCheck
ThinDedupMargin EarlyTakeover FenceWithoutEpoch UnfencedCommit RevokeListByDeadline
NoLocalRecheck TierAtRead SkewPastAllowance CountOutsideLock DeadlineByLocalClock FaultEndsRun RenewalNotAwaited NoLockNoKey
PassWithoutLock""".split()


def test_catalog_has_every_contract_name(cat):
    assert set(SPEC_21) <= set(cat.invariants)
    assert set(BROKEN) == set(cat.broken)
    assert any(w.startswith("Reach_") for w in cat.witnesses)


def test_every_broken_config_names_an_existing_invariant(cat):
    for b in cat.broken:
        named = [i for i in cat.invariants.values() if b in i.broken_by]
        assert named, b
        for inv in named:
            assert inv.operator and "M" in inv.layers


def test_every_c_layer_row_has_a_check(cat):
    for inv in cat.invariants.values():
        if "C" in inv.layers:
            assert inv.check, inv.name
    assert cat.checks()["NoRerunAfterComplete"] == "NoRerunAfterComplete"


def test_b10_revisions(cat):
    assert "NoFencing" not in cat.invariants["EffectAtMostOnceTier12"].broken_by
    assert {"SendRequiresLiveClaim", "FencedWrites"} <= {
        i.name for i in cat.invariants.values() if "NoFencing" in i.broken_by
    }
    t = cat.config("TemporalIdem_t2_G1")
    for name in ("FencedWrites", "LeaseMutex", "SendRequiresLiveClaim", "EffectCheckpointAtomic"):
        assert cat.predict(name, t) == "n/a"
    assert cat.predict("NoRerunAfterComplete", cat.config("Broken_NoLocalLeaseCheck")) == "hold"


def test_every_broken_config_is_in_the_matrix(cat):
    assert {c.broken for c in cat.configs if c.broken} == set(cat.broken)
    for c in cat.configs:
        if c.broken:
            runs = cat.plan(c)
            assert runs and all(r.purpose == "violate" and r.expected == "V" for r in runs)


def test_hold_predictions_have_a_witness(cat):
    for c in cat.configs:
        assert cat.vacuous(c) == [], c.name


def test_generated_cfg_names_only_defined_operators(cat, tmp_path):
    ops = {s: catalog._operators(MODELS / f"{s}.tla") for s in cat.specs}
    for c in cat.configs:
        for run in cat.plan(c):
            path = gen_cfg.write_run(cat, run, tmp_path)
            for line in path.read_text().splitlines():
                if line.startswith(("INVARIANT ", "PROPERTY ")):
                    name = line.split()[1]
                    assert name in ops[c.spec] | {"TypeOK"}, (c.name, name)


# ---------------------------------------------------------------------- bad catalogs
def _write_bad(tmp_path: Path, mutate, matrix=None) -> Path:
    data = yaml.load((MODELS / "catalog.yaml").read_text(), Loader=catalog._Loader)
    mutate(data)
    for spec in data["specs"]:
        (tmp_path / f"{spec}.tla").write_text((MODELS / f"{spec}.tla").read_text())
    p = tmp_path / "catalog.yaml"
    p.write_text(yaml.safe_dump(data, sort_keys=False))
    if matrix is not None:
        (tmp_path / "matrix.yaml").write_text(yaml.safe_dump(matrix, sort_keys=False))
    return p


def _inv(data, name):
    return next(i for i in data["invariants"] if i["name"] == name)


def test_good_copy_loads(tmp_path):
    p = _write_bad(tmp_path, lambda d: None)
    assert len(catalog.load(p).invariants) > 20


@pytest.mark.parametrize(
    "mutate, entry, words",
    [
        (lambda d: _inv(d, "FencedWrites").update(broken_by=["NoFencin"]), "FencedWrites", "NoFencin"),
        (lambda d: _inv(d, "LeaseMutex")["predict"].update(interlok="hold"), "LeaseMutex", "interlok"),
        (lambda d: _inv(d, "LeaseMutex").pop("operator"), "LeaseMutex", "operator"),
        (lambda d: _inv(d, "LeaseMutex").update(operator="LeaseMutexx"), "LeaseMutex", "LeaseMutexx"),
        (lambda d: _inv(d, "TimerNotEarly").pop("check"), "TimerNotEarly", "check"),
        (lambda d: _inv(d, "PayloadBound").update(witnesses=["Reach_Sedn"]), "PayloadBound", "Reach_Sedn"),
        (lambda d: _inv(d, "PayloadBound")["predict"].update(interlock="hodl"), "PayloadBound", "hodl"),
        (lambda d: _inv(d, "PayloadBound").update(layrs=["M"]), "PayloadBound", "layrs"),
        (lambda d: d["witnesses"][0].update(operator="Reach_Nowhere"), "Reach_", "Reach_Nowhere"),
        (
            lambda d: _inv(d, "Tier3NeverResends")["predict"]["interlock"][0].update(tiers=["t4"]),
            "Tier3NeverResends",
            "t4",
        ),
        (lambda d: d["broken"].update(Extra={"spec": "Runtime", "value": "x", "meaning": "m"}), "Extra", "broken_by"),
    ],
)  # fmt: skip
def test_bad_catalog_names_file_and_entry(tmp_path, mutate, entry, words):
    p = _write_bad(tmp_path, mutate)
    with pytest.raises(catalog.CatalogError) as e:
        catalog.load(p)
    msg = str(e.value)
    assert "catalog.yaml" in msg and entry in msg and words in msg, msg


def test_operator_missing_from_the_tla_module(tmp_path):
    p = _write_bad(tmp_path, lambda d: None)
    tla = tmp_path / "Runtime.tla"
    tla.write_text(tla.read_text().replace("LeaseMutex ==", "LeaseMutexGone =="))
    with pytest.raises(catalog.CatalogError) as e:
        catalog.load(p)
    assert "LeaseMutex" in str(e.value) and "Runtime.tla" in str(e.value)


@pytest.mark.parametrize(
    "config, words",
    [
        ({"name": "X", "spec": "Runtime", "mode": "temporal", "tier": "t2"}, "temporal"),
        ({"name": "X", "spec": "Runtime", "mode": "interlock", "tier": "t9"}, "t9"),
        ({"name": "X", "spec": "Runtime", "tier": "t2", "events": ["revokee"]}, "revokee"),
        ({"name": "X", "spec": "Runtime", "tier": "t2", "broken": "NoFence"}, "NoFence"),
        ({"name": "X", "spec": "Runtime", "tier": "t2", "constants": {"MaxClok": 3}}, "MaxClok"),
        ({"name": "X", "spec": "Runtime", "tier": "t2", "toggles": ["PAUSED"]}, "PAUSED"),
    ],
)
def test_bad_matrix_names_file_and_entry(tmp_path, config, words):
    matrix = {"defaults": {"Runtime": {"MaxClock": 3}}, "configs": [config]}
    p = _write_bad(tmp_path, lambda d: None, matrix=matrix)
    with pytest.raises(catalog.CatalogError) as e:
        catalog.load(p)
    msg = str(e.value)
    assert "matrix.yaml" in msg and "'X'" in msg and words in msg, msg


def test_unreadable_yaml(tmp_path):
    p = tmp_path / "catalog.yaml"
    p.write_text("modes: [a\n")
    with pytest.raises(catalog.CatalogError, match="catalog.yaml"):
        catalog.load(p)
