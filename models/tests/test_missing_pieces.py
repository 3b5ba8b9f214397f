"""Adding an invariant (docs/invariants.md): the generator names every missing piece of every
row in one message, and a row the committed TLC results predate is "not yet checked" with the
quick run that checks it.  Scratch copies of the catalog and the specs, no TLC."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from models import catalog, tlc_pending

MODELS = Path(__file__).resolve().parents[1]
ROOT = MODELS.parent
NEW = {"name": "NoDoubleRefund", "meaning": "a payment is refunded at most once in all",
       "layers": ["M", "C"], "spec": "Runtime", "operator": "NoDoubleRefund",
       "check": "NoDoubleRefund", "predict": "hold"}  # fmt: skip


def _scratch(tmp_path: Path, *rows: dict, witnesses: tuple[dict, ...] = ()) -> Path:
    data = yaml.load((MODELS / "catalog.yaml").read_text(), Loader=catalog._Loader)
    data["invariants"] += list(rows)
    data["witnesses"] += list(witnesses)
    for spec in data["specs"]:
        (tmp_path / f"{spec}.tla").write_text((MODELS / f"{spec}.tla").read_text())
    path = tmp_path / "catalog.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def test_one_message_names_the_operator_the_code_check_and_the_witness(tmp_path):
    with pytest.raises(catalog.MissingPieces) as e:
        catalog.load(_scratch(tmp_path, NEW))
    msg = str(e.value)
    assert "catalog.yaml" in msg and "invariant 'NoDoubleRefund'" in msg
    assert "TLA+ operator: 'NoDoubleRefund' is not defined in" in msg and "Runtime.tla" in msg
    assert "code check: 'NoDoubleRefund' is not a key of INVARIANTS in" in msg
    assert "conformance/invariants.py" in msg
    assert "witness: a model-checked invariant needs a Reach_* witness" in msg
    assert "docs/invariants.md" in msg
    assert list(e.value.missing) == ["invariant 'NoDoubleRefund'"]
    assert len(e.value.missing["invariant 'NoDoubleRefund'"]) == 3


def test_every_row_with_a_gap_is_in_the_same_message(tmp_path):
    # a second row whose witness row exists but whose witness operator does not, and a third
    # that lists a witness with no row at all
    wit = {"name": "Reach_DoubleRefund", "meaning": "two refunds were attempted",
           "spec": "Runtime", "operator": "Reach_DoubleRefund", "predict": "reach"}  # fmt: skip
    second = {**NEW, "name": "LeaseMutex2", "operator": "LeaseMutex2", "check": "LeaseMutex",
              "witnesses": ["Reach_DoubleRefund"]}  # fmt: skip
    third = {**NEW, "name": "Third", "operator": "Third", "check": "Third",
             "witnesses": ["Reach_Nowhere"]}  # fmt: skip
    with pytest.raises(catalog.MissingPieces) as e:
        catalog.load(_scratch(tmp_path, NEW, second, third, witnesses=(wit,)))
    missing = e.value.missing
    assert set(missing) == {"witness 'Reach_DoubleRefund'", "invariant 'NoDoubleRefund'",
                            "invariant 'LeaseMutex2'", "invariant 'Third'"}  # fmt: skip
    assert any(
        "'Reach_DoubleRefund' is not defined" in m for m in missing["witness 'Reach_DoubleRefund'"]
    )
    assert len(missing["invariant 'LeaseMutex2'"]) == 1  # its check exists: only the operator
    assert any("'Reach_Nowhere' has no row" in m for m in missing["invariant 'Third'"])
    assert str(e.value).count("    - ") == sum(len(v) for v in missing.values()) == 8


def test_the_generator_prints_the_message(tmp_path):
    out = tmp_path / "generated"
    p = subprocess.run([sys.executable, "-m", "models.gen_cfg", "--catalog",
                        str(_scratch(tmp_path, NEW)), "--out", str(out)],
                       cwd=ROOT, capture_output=True, text=True)  # fmt: skip
    assert p.returncode == 1 and "Traceback" not in p.stderr, p.stderr
    assert p.stderr.count("    - ") == 3 and "NoDoubleRefund" in p.stderr
    assert not out.exists()


def _results_without(name: str) -> dict:
    doc = tlc_pending.read_results()
    assert doc is not None, "results/runtime_tlc.json is committed"
    for c in doc["configs"]:
        c["invariants"].pop(name, None)
    return doc


def test_a_row_the_results_predate_is_not_yet_checked_with_a_quick_command():
    cat = catalog.load()
    assert tlc_pending.unchecked(cat, tlc_pending.read_results()) == []
    doc = _results_without("NoOverlappingSends")
    assert tlc_pending.unchecked(cat, doc) == ["NoOverlappingSends"]
    cmd = tlc_pending.command(cat, ["NoOverlappingSends"], doc)
    assert tlc_pending.command(cat, ["NoOverlappingSends"], doc, merge=False) + " --merge" == cmd
    assert cmd.startswith("python -m models.tlc --only ") and cmd.endswith(" --merge")
    configs = cmd.split("--only ")[1].split(" --merge")[0].split()
    assert "Quick_t2_G1" in configs  # quick, and plain: what the Prove report reads
    assert all(cat.config(c).quick for c in configs)
    note = tlc_pending.note(cat, doc)
    assert note is not None and "NoOverlappingSends" in note
    assert f"`{cmd.removesuffix(' --merge')}`" in note and "add --merge" in note


def test_a_working_tlc_run_fills_a_pending_row_for_working_sweeps_only(tmp_path, monkeypatch):
    from prove import report

    doc = _results_without("NoOverlappingSends")
    published = tmp_path / "runtime_tlc.json"
    published.write_text(json.dumps(doc))
    quick = next(c for c in tlc_pending.read_results()["configs"] if c["name"] == "Quick_t2_G1")
    working = tmp_path / "working.json"
    tlc_pending.save_working([quick], working)
    key = ("interlock", "NoOverlappingSends")
    assert report.tlc_outcomes(published)[key].startswith("not yet checked: run `")
    got = report.tlc_outcomes(published, tlc_pending.read_working(working))[key]
    assert got == "hold (working TLC run)"
    # outcomes checked against other models say nothing about these
    monkeypatch.setattr(tlc_pending, "models_hash", lambda root=ROOT: "0" * 16)
    assert tlc_pending.read_working(working) is None
