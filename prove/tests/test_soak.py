"""A short chaos soak (prove/soak.py): a few refund workflows, real workers, real SIGKILLs.

Fails unless workers ran, were killed and replaced, effects were sent and applied, every
started workflow ended, nothing was applied twice at tiers 1 and 2 and every invariant held.
"""

from __future__ import annotations

import json

import pytest

from prove import soak


@pytest.mark.pg
def test_a_short_soak_survives_kills_and_keeps_every_invariant(tmp_path) -> None:
    report = soak.run_soak({
        "workflows": 12, "workers": 2, "minutes": 4.0, "seed": 20261130, "drain_s": 90.0,
        "kill_every": 1.0, "revoke_frac": 0.15, "hand_frac": 0.15, "cancel_frac": 0.15,
        "sample_every": 0, "rss_every": 0.5, "start_rate": 4.0,
    }, log=lambda *a: None)  # fmt: skip
    c = report["counts"]
    assert report["verdict"] == "PASS", (report["failed"], c, report["invariants"]["final"])
    assert c["started"] == c["requested"] == 12 and c["lost"] == 0
    assert c["terminal"] == 12 and c["duplicates_tier12"] == 0
    assert c["invariant_violations"] == 0 and c["missing_evidence"] == 0
    # Not vacuous: workers ran, at least one was SIGKILLed (or died at its armed kill point)
    # and replaced, effects were sent and landed, and the checks read real evidence.
    chaos = report["chaos"]
    assert chaos.get("sigkills", 0) + len(chaos["worker_exits"]) >= 1, chaos
    assert chaos["workers_started"] > 2, chaos
    assert c["sends"] > 0 and c["applications"] > 0 and c["completed"] > 0, c
    final = report["invariants"]["final"]
    assert final["checked"] >= 20 and final["events"] > 0, final
    assert report["memory"]["workers"].get("s0-0", {}).get("samples", 0) >= 1
    # The report renders and round-trips as JSON.
    text = soak.render(report)
    assert "Verdict: PASS" in text and "seed 20261130" in text
    json.loads(json.dumps(report, default=str))


def test_slope_is_least_squares_per_minute() -> None:
    assert soak.slope_per_min([(0, 10.0), (60, 11.0), (120, 12.0)]) == 1.0
    assert soak.slope_per_min([(0, 5.0), (30, 5.0), (60, 5.0)]) == 0.0
    assert soak.slope_per_min([(0, 1.0), (1, 2.0)]) is None


def test_the_failover_mode_rides_through_a_failover_and_a_crash_restart(tmp_path) -> None:
    report = soak.run_soak({
        "workflows": 8, "workers": 2, "minutes": 0.8, "seed": 20261202, "drain_s": 30.0,
        "kill_every": 6.0, "sample_every": 0, "rss_every": 1.0, "start_rate": 2.0,
        "failover": True, "failovers": 1, "crash_restarts": 1,
    }, log=lambda *a: None)  # fmt: skip
    c = report["counts"]
    assert report["verdict"] == "PASS", (report["failed"], c, report["invariants"]["final"])
    assert c["failovers"] == 1 and c["crash_restarts"] == 1, c
    assert c["lost"] == 0 and c["duplicates_tier12"] == 0 and c["terminal"] == 8, c
    assert c["epochs_backwards"] == 0 and c["early_takeovers"] == 0, c
    kinds = sorted(f["kind"] for f in report["faults"])
    assert kinds == ["failover", "restart"], report["faults"]
    assert all(f["writable_s"] > 0 for f in report["faults"]), report["faults"]
    text = soak.render(report)
    assert "# Failover soak" in text and "| failover |" in text
    # As written, the report recomputes from its raw rows (python -m prove.soak --verify).
    assert report["raw"] and {r["kind"] for r in report["raw"]} >= {"run", "workflow", "claim"}
    soak.write_report(tmp_path, "failover", report)
    assert soak.verify(tmp_path, "failover").status == "verified"
