"""Harness smoke test: one real cell end to end per system family (S01 at tier 1, one seed).

Real worker subprocesses, a real SIGKILL at the kill point, a real target and Temporal dev
server; the run file must hold what DESIGN B12 asks for, and the oracle must agree with the
ledger. The two runs go in parallel (the runner's own pool), well under two minutes.
"""

from __future__ import annotations

import json

import pytest

from interlock_runtime.testing import admin_dsn, template_database
from prove import report, runner
from prove.scenario import load_all
from prove.temporal_server import TemporalDevServer


@pytest.fixture(scope="module")
def services(tmp_path_factory):
    admin = admin_dsn()
    with template_database(admin) as tpl:
        server = TemporalDevServer(tmp_path_factory.mktemp("temporal") / "temporal.db").start()
        try:
            yield runner.Services(admin, tpl, server, versions=runner.versions(admin))
        finally:
            server.kill()


def test_one_cell_per_system_end_to_end(services, tmp_path) -> None:
    (s01,) = load_all(["S01"])
    runs = runner.plan([s01], 1, "quick", ["runtime", "temporal_idem"], [1])
    assert [(r[2], r[3], r[4]) for r in runs] == [("runtime", 1, 0), ("temporal_idem", 1, 0)]
    results = runner.sweep(services, runs, tmp_path, jobs=2, progress=lambda _: None)
    by = {r["identity"]["system"]: r for r in results}
    for rec in by.values():
        assert rec["error"] is None, rec["faults"]["timeline"]
        assert json.loads((tmp_path / f"{rec['identity']['run_id']}.json").read_text()) == rec
        assert rec["faults"]["crashed_by_kill_point"] is True  # a real SIGKILL (-9)
        assert any(
            e["what"] == "sigkill" or e["what"] == "crashed" for e in rec["faults"]["timeline"]
        )
        refunds = rec["ground_truth"]["ledger"]
        assert [r["amount"] for r in refunds] == [2000]
        oc = rec["outcome"]
        assert oc["correct"] and oc["duplicate_applications"] == 0 and oc["prediction_held"]
        assert oc["quantities"]["agent_sends"] == 2  # the original send and the deduped resend
        assert rec["versions"]["git_commit"] and rec["timings"]["end_to_end"] > 0
        assert rec["model_calls"] and rec["model_calls"][0]["emulated"]
    rt = by["runtime"]
    assert rt["outcome"]["observed"] == "$20 COMMITTED_BY_RETRY"
    assert rt["artifacts"]["receipt_verify"]["valid"]
    assert rt["artifacts"]["invariants"] == {}  # every catalog code check held
    assert len(rt["artifacts"]["claim_history"]) >= 2
    tm = by["temporal_idem"]
    assert [a["attempt"] for a in tm["artifacts"]["attempts"] if a["activity"] == "refund"] == [
        1,
        2,
    ]

    cells = report.aggregate([s01], results)
    assert {(c["system"], c["n"], c["correct"]) for c in cells} == {("runtime", 1, 1),
                                                                  ("temporal_idem", 1, 1)}  # fmt: skip
    md, js = report.write([s01], results, services.versions, 1.0, out_dir=tmp_path / "results")
    text = md.read_text()
    assert "| S01 | 1 | base |" in text and "EMULATED" in text and "A1" in text
    assert 'key = f"{info.workflow_run_id}-{info.activity_id}"' in text
    assert json.loads(js.read_text())["cells"]
