"""The async example (runtime/examples/async_refund_agent.py, its workflow an `async def` in
async_refund_flows.py served by the asyncio worker) runs and shows what it promises: two reads
at once, the model decides through anthropic.AsyncAnthropic, alice approves, W1 is SIGKILLed
after the send, W2 commits by retry, the target's ledger holds one refund and the signed
receipt verifies."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "async_refund_agent.py"
WF = "async-refund-case-4471"


@pytest.mark.slow
def test_async_refund_agent_example_end_to_end(dsn, tmp_path) -> None:
    """Runs the script by its path, in its own fresh database (conftest's dsn fixture)."""
    p = subprocess.run([sys.executable, str(EXAMPLE), "--dsn", dsn, "--workdir", str(tmp_path)],
                       capture_output=True, text=True, timeout=150, cwd=tmp_path)  # fmt: skip
    out = p.stdout
    assert p.returncode == 0, out + p.stderr
    assert "refund: through AsyncHttpTarget('payment-refunds', " in out and "tier=1)" in out
    assert "read at once: payment paid 10000, 0 earlier refund(s) (steps 1 and 2)" in out
    assert "model decided: refund 2000 cents" in out and "EMULATED" in out
    assert f"$ interlock start async_refund_agent {WF}" in out
    approved = next(ln for ln in out.splitlines() if ln.startswith("approved {"))
    assert json.loads(approved[len("approved ") : approved.index("} for ") + 1]) == {
        "payment": "pay_881", "amount": 2000}  # fmt: skip
    assert "worker W1 died after the send (exit -9)" in out
    assert "the target's ledger already holds 1 refund(s)" in out  # the send did land
    assert "the runtime's effect is still dispatched" in out
    assert f"{WF}: COMMITTED_BY_RETRY" in out
    assert "VALID (4 entries, 2 sends, state committed)" in out
    assert "ledger: 1 refund(s): re_000001 2000 on pay_881" in out
    assert "sends seen by the target: W1, W2" in out
    for check in ("one refund", "committed by retry", "happened once", "authorized when fired",
                  "premises held", "receipt valid and signed"):  # fmt: skip
        assert f"{check + ':':<26}yes" in out
    # W1 (the asyncio worker: a plain one refuses an async workflow) started both reads before
    # the decision, in program order.
    events = [json.loads(ln) for ln in (tmp_path / "W1.events.jsonl").read_text().splitlines()
              if ln.startswith("{")]  # fmt: skip
    started = [e["name"] for e in events if e.get("event") == "step_started"]
    assert started[:3] == ["payment", "refunds", "pick_amount"], started
