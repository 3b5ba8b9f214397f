"""Every TLC violation comes with its trace (models/tlc_trace.py): a run of `--only` saves the
counterexample under .data/tlc/traces/ (results/ untouched), prints it as the variables that
changed, and conformance/trace_replay.py reads the saved file.  One TLC run of a few seconds
(Broken_EarlyTakeover: 6 distinct states), the rest synthetic."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conformance import trace_replay
from models import tlc, tlc_trace
from world.verify_common import tree_hash

ROOT = Path(__file__).resolve().parents[2]
CONFIG = "Broken_EarlyTakeover"


@pytest.fixture(scope="module")
def only_run():
    """`python -m models.tlc --only Broken_EarlyTakeover`, with results/ hashed around it."""
    before = tree_hash(ROOT / "results")
    saved = tlc_trace.SCRATCH / tlc_trace.file_name(CONFIG, "LeaseMutex")
    if saved.exists():
        saved.unlink()  # the file must come from this run
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "runtime"), str(ROOT)])}
    p = subprocess.run([sys.executable, "-m", "models.tlc", "--only", CONFIG, "--jobs", "1",
                        "--workers", "1", "--heap", "512m"],
                       cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)  # fmt: skip
    return p, saved, before


def test_only_prints_the_trace_and_saves_it_under_data(only_run):
    p, saved, before = only_run
    assert p.returncode == 0, p.stdout + p.stderr
    assert saved.exists() and saved.is_relative_to(ROOT / ".data")
    out = p.stdout
    assert f"Counterexample: {CONFIG} / LeaseMutex" in out
    assert f"saved to .data/tlc/traces/{saved.name}" in out
    block = out[out.index(f"{CONFIG} / LeaseMutex") :]
    state1 = block[block.index("State 1: Init") : block.index("State 2:")]
    state2 = block[block.index("State 2:") : block.index("State 3:")]
    # state 1 in full; state 2 only what changed, leaf by leaf
    assert "  now = 0" in state1 and "  ws = [" in state1
    assert 'ws.w1.pc: "idle" -> "load"' in state2 and "wfEpoch: 0 -> 1" in state2
    assert "now" not in state2 and "revokeReturned" not in state2
    assert tree_hash(ROOT / "results") == before, "an --only run changed results/"


def test_trace_replay_reads_the_saved_file(only_run):
    _, saved, _ = only_run
    trace = trace_replay.load_trace(saved)
    assert trace.config == CONFIG and trace.invariant == "LeaseMutex"
    assert trace.spec == "Runtime" and trace.category == "broken"
    schedule = trace_replay.translate(trace)
    assert [(op.action, op.worker) for op in schedule.ops] == [("Claim", "w1"), ("Claim", "w2")]


def test_show_prints_a_saved_trace_with_every_variable(only_run, capsys):
    _, saved, _ = only_run
    assert tlc.main(["--show", str(saved), "--all-vars"]) == 0
    out = capsys.readouterr().out
    state2 = out[out.index("State 2:") : out.index("State 3:")]
    assert "  now = 0" in state2  # unchanged, printed all the same
    assert tlc.main(["--show", str(saved.with_name("nothing.json"))]) == 2


def test_changes_are_leaves():
    before = {"ws": {"w1": {"pc": "idle", "epoch": 0}}, "journal": [{"kind": "A"}],
              "keys": {"set": [1]}}  # fmt: skip
    after = {"ws": {"w1": {"pc": "load", "epoch": 0}}, "journal": [{"kind": "A"}, {"kind": "B"}],
             "keys": {"set": [1, 2]}}  # fmt: skip
    lines = [line for k in after for line in tlc_trace.changes(before[k], after[k], k)]
    assert lines == ['ws.w1.pc: "idle" -> "load"', 'journal[2]: (appended) [kind: "B"]',
                     "keys: {1} -> {1, 2}"]  # fmt: skip


def _result(name: str, agree: bool) -> dict:
    return {"name": name, "invariants": {"Inv": {"outcome": "V", "predicted": "V" if agree
                                                 else "hold", "agree": agree}}}  # fmt: skip


def test_a_surprise_is_printed_in_full_an_expected_violation_by_name(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(tlc_trace, "SCRATCH", tmp_path)
    states = [{"index": 1, "action": "Init", "vars": {"x": 0}},
              {"index": 2, "action": "Step", "vars": {"x": 1}}]  # fmt: skip
    for name in ("Surprise", "Expected"):
        tlc_trace.save(tlc_trace.document(name, "Inv", "safety", None, {}, None, states), tmp_path)
    tlc.print_counterexamples([_result("Surprise", False), _result("Expected", True)], set(), False)
    out = capsys.readouterr().out
    assert "Counterexample: Surprise / Inv (predicted hold), 2 states" in out
    assert "x: 0 -> 1" in out and out.count("State 2: Step") == 1
    assert "counterexample Expected / Inv (as predicted)" in out


def test_check_config_saves_the_trace_without_writing_results(tmp_path, monkeypatch):
    # the in-process path of the same run: opts.write False keeps results/tlc_traces out of it
    monkeypatch.setattr(tlc_trace, "SCRATCH", tmp_path / "scratch")
    monkeypatch.setattr(tlc, "TRACES", tmp_path / "results_traces")
    from models import catalog

    cat = catalog.load()
    opts = argparse.Namespace(workers=1, heap="512m", timeout=300, write=False)
    res = tlc.check_config(cat, cat.config(CONFIG), opts, tmp_path / "cfg")
    assert res["invariants"]["LeaseMutex"]["outcome"] == "V"
    assert res["invariants"]["LeaseMutex"]["trace"] is None
    assert (tmp_path / "scratch" / f"{CONFIG}__LeaseMutex.json").exists()
    assert not (tmp_path / "results_traces").exists()


def test_full_runs_save_their_counterexamples_too(tmp_path, monkeypatch):
    monkeypatch.setattr(tlc_trace, "SCRATCH", tmp_path)
    found: list[Path] = []
    res = {"name": "Full_X", "constants": {"MaxClock": "12"}}
    states = [{"index": 1, "action": "Init", "vars": {"x": 0}}]
    out = {"violated": "LeaseMutex", "trace": states, "version": "TLC2", "loop_to": None}
    tlc._save_full_trace(res, out, ["LeaseMutex", "FencedWrites"], found, "__seed7")
    tlc._save_full_trace(res, {**out, "violated": None}, ["LeaseMutex"], found)
    assert found == [tmp_path / "Full_X__LeaseMutex__seed7.json"]
    doc = tlc_trace.load(found[0])
    assert doc["config"] == "Full_X" and doc["invariant"] == "LeaseMutex"
    assert doc["states"] == states and doc["kind"] == "safety"
