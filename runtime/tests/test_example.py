"""The end-to-end example (runtime/examples/refund_agent.py) runs and shows what it promises:
the model decides, alice approves, W1 is SIGKILLed after the send, W2 commits by retry, and the
signed receipt verifies: one refund, happened once, authorized when fired, premises held."""

from __future__ import annotations

import subprocess
import sys

from conftest import REPO

SCRIPT = REPO / "runtime" / "examples" / "refund_agent.py"


def test_refund_agent_example_end_to_end(dsn, tmp_path) -> None:
    """Runs in its own fresh database (the dsn fixture, from interlock_runtime.testing)."""
    p = subprocess.run([sys.executable, str(SCRIPT), "--dsn", dsn, "--workdir", str(tmp_path)],
                       capture_output=True, text=True, timeout=150, cwd=tmp_path)  # fmt: skip
    out = p.stdout
    assert p.returncode == 0, out + p.stderr
    assert "model decided: refund 2000 cents" in out and "EMULATED" in out
    assert "$ interlock approve refund-case-4471 --amount 2000 --by alice" in out
    assert 'approved {"payment": "pay_881", "amount": 2000} for refund-case-4471 by alice' in out
    assert "worker W1 died after the send (exit -9)" in out
    assert "the runtime's effect is still dispatched" in out
    assert "refund-case-4471: COMMITTED_BY_RETRY" in out
    assert "VALID (4 entries, 2 sends, state committed)" in out
    assert "ledger: 1 refund(s): re_000001 2000 on pay_881" in out
    assert "sends seen by the target: W1, W2" in out
    for check in ("one refund", "committed by retry", "happened once", "authorized when fired",
                  "premises held", "receipt valid and signed"):  # fmt: skip
        assert f"{check + ':':<26}yes" in out
    assert (tmp_path / "receipt.json").exists()


def test_approve_cli_refuses_bad_input_clearly(dsn, capsys) -> None:
    """`interlock approve` (interlock_runtime.approve_cli): nothing is approved on bad input."""
    import flows

    from interlock_runtime import Runtime
    from interlock_runtime.approve_cli import main

    assert main(["wf-x", "--amount", "2000"]) == 2  # --by is required
    assert main(["wf-x", "--payload", "{nope", "--by", "alice", "--dsn", dsn]) == 2
    assert "not JSON" in capsys.readouterr().err
    assert main(["wf-missing", "--amount", "2000", "--by", "alice", "--dsn", dsn]) == 1
    with Runtime(dsn) as rt:
        rt.start(flows.echo, "wf-echo", {"payment": "pay_881"})  # no worker: nothing decided
    assert main(["wf-echo", "--amount", "2000", "--by", "alice", "--dsn", dsn]) == 2
    assert "no recorded decision" in capsys.readouterr().err
    assert main(["wf-echo", "--amount", "-5", "--by", "alice", "--dsn", dsn]) == 2
