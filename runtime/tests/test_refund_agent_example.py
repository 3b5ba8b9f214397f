"""The end-to-end example (runtime/examples/refund_agent.py, its workflow in refund_flows.py on
the library's HttpTarget, against the test world's payment target and model stub) runs and shows
what it promises: the model decides, alice approves, W1 is SIGKILLed after the send, W2 commits
by retry, and the signed receipt verifies: one refund, happened once, authorized when fired,
premises held."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "refund_agent.py"


@pytest.mark.slow
def test_refund_agent_example_end_to_end(dsn, tmp_path) -> None:
    """Runs the script by its path, in its own fresh database (conftest's dsn fixture)."""
    p = subprocess.run([sys.executable, str(EXAMPLE), "--dsn", dsn, "--workdir", str(tmp_path)],
                       capture_output=True, text=True, timeout=150, cwd=tmp_path)  # fmt: skip
    out = p.stdout
    assert p.returncode == 0, out + p.stderr
    assert "refund: through HttpTarget('payment-refunds', " in out and "tier=1)" in out
    assert "model decided: refund 2000 cents" in out and "EMULATED" in out
    assert "$ interlock start refund_agent refund-case-4471" in out
    assert "$ interlock approve refund-case-4471 --by alice" in out
    assert '"amount": 2000' in out  # what alice approved: the payload the workflow proposed
    approved = next(ln for ln in out.splitlines() if ln.startswith("approved {"))
    assert approved.endswith("for refund-case-4471 by alice: grant " + approved.split()[-1])
    assert json.loads(approved[len("approved ") : approved.index("} for ") + 1]) == {
        "payment": "pay_881", "amount": 2000}  # fmt: skip
    assert "worker W1 died after the send (exit -9)" in out
    assert "the runtime's effect is still dispatched" in out
    assert "refund-case-4471: COMMITTED_BY_RETRY" in out
    assert "VALID (4 entries, 2 sends, state committed)" in out
    assert "ledger: 1 refund(s): re_000001 2000 on pay_881" in out
    assert "sends seen by the target: W1, W2" in out  # HttpTarget's X-ILR-Worker header
    for check in ("one refund", "committed by retry", "happened once", "authorized when fired",
                  "premises held", "receipt valid and signed"):  # fmt: skip
        assert f"{check + ':':<26}yes" in out
    assert (tmp_path / "receipt.json").exists()
