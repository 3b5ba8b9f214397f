"""The staleness watchdog reports each overdue kind, and nothing on a healthy system."""

from __future__ import annotations

import json
import subprocess
import sys

import flows

from conftest import wait_for
from interlock_runtime import Runtime


def watchdog(dsn: str, *args: str) -> tuple[int, dict]:
    proc = subprocess.run([sys.executable, "-m", "interlock_runtime.cli", "watchdog", "--dsn", dsn,
                           "--json", *args], capture_output=True, text=True, timeout=60)  # fmt: skip
    return proc.returncode, json.loads(proc.stdout)


def test_a_healthy_system_reports_nothing(dsn, workers) -> None:
    with Runtime(dsn) as rt:
        rt.start(flows.echo, "ok", {"x": 1})
        workers("W")
        rt.result("ok", timeout=20)
    code, found = watchdog(dsn, "--threshold", "0")
    assert (code, found["overdue"]) == (0, 0)


def test_each_overdue_kind_is_reported(dsn, conn) -> None:
    with Runtime(dsn) as rt:
        rt.start(flows.echo, "stalled", {})  # no worker will ever claim it
        rt.register(flows.echo)
        rt.start("never_served", "unserved", {})  # no deployment serves that name
        rt.start(flows.echo, "unserved-v9", {}, version="9")  # nor that version
    conn.execute("insert into ilr.workflows (id, name, version, input, status, epoch, owner, "
                 "lease_expires_at) values ('zombie', 'echo', '1', '{}', 'running', 1, 'w1', "
                 "now() - interval '30 seconds')")  # fmt: skip
    for eid, state in (("e-open", "dispatched"), ("e-amb", "ambiguous"), ("e-done", "ambiguous")):
        conn.execute("insert into ilr.effects (effect_id, workflow_id, target, tier, payload, "
                     "payload_hash, state, send_deadline, settle_margin) values (%s, 'stalled', "
                     "'t', 2, '{}', 'h', %s, now() - interval '1 minute', interval '5 seconds')",
                     (eid, state))  # fmt: skip
    conn.execute(
        "update ilr.effects set reconciled = '{\"by\": \"ops\"}' where effect_id = 'e-done'"
    )
    wait_for(lambda: watchdog(dsn, "--threshold", "0.1")[1]["stalled_workflows"], 10, "overdue")
    code, found = watchdog(dsn, "--threshold", "0.1")
    assert code == 1
    assert [w["id"] for w in found["stalled_workflows"]] == ["stalled"]
    unserved = {w["id"]: (w["name"], w["wanted_version"]) for w in found["unserved_workflows"]}
    assert unserved == {"unserved": ("never_served", None), "unserved-v9": ("echo", "9")}
    assert [w["id"] for w in found["abandoned_leases"]] == ["zombie"]
    assert [e["effect_id"] for e in found["unresolved_effects"]] == ["e-open"]
    assert [e["effect_id"] for e in found["ambiguous_effects"]] == ["e-amb"]  # e-done reconciled
    quiet = watchdog(dsn, "--threshold", "3600")[1]
    assert quiet["stalled_workflows"] == quiet["unserved_workflows"] == []
    assert quiet["ambiguous_effects"]  # a human must act, whatever the threshold
    text = subprocess.run([sys.executable, "-m", "interlock_runtime.cli", "watchdog", "--dsn", dsn,
                           "--threshold", "0.1"], capture_output=True, text=True, timeout=60)  # fmt: skip
    assert text.returncode == 1
    assert "unserved_workflows: unserved-v9" in text.stdout
    assert "no worker serves echo version 9: start one that registers it" in text.stdout


def test_a_negative_threshold_is_a_clear_error(dsn) -> None:
    proc = subprocess.run([sys.executable, "-m", "interlock_runtime.cli", "watchdog", "--dsn", dsn,
                           "--threshold", "-1"], capture_output=True, text=True, timeout=60)  # fmt: skip
    assert proc.returncode == 2 and "--threshold must be at least 0" in proc.stderr
