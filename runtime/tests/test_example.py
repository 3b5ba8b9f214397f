"""`interlock approve` refuses bad input clearly. (The end-to-end refund example is tested by
test_refund_agent_example.py.)"""

from __future__ import annotations


def test_approve_cli_refuses_bad_input_clearly(dsn, capsys) -> None:
    """`interlock approve` (interlock_runtime.cli.approve): nothing is approved on bad input."""
    import flows

    from interlock_runtime import Runtime
    from interlock_runtime.cli.approve import main

    assert main(["wf-x"]) == 2  # --by is required
    assert main(["wf-x", "--payload", "{nope", "--by", "alice", "--dsn", dsn]) == 2
    assert "not JSON" in capsys.readouterr().err
    assert main(["wf-missing", "--payload", "{}", "--by", "alice", "--dsn", dsn]) == 1
    with Runtime(dsn) as rt:
        rt.start(flows.echo, "wf-echo", {"payment": "pay_881"})  # no worker: nothing proposed
    assert main(["wf-echo", "--by", "alice", "--dsn", dsn]) == 2
    assert "proposes no payload" in capsys.readouterr().err
    assert main(["wf-echo", "--by", "alice", "--decision", "nope", "--dsn", dsn]) == 2
    assert "no recorded decision named 'nope'" in capsys.readouterr().err
    assert main(["wf-echo", "--payload", "{}", "--by", "alice", "--expires-in", "-5",
                 "--dsn", dsn]) == 2  # fmt: skip
    err = capsys.readouterr().err
    assert "--expires-in" in err and "above 0" in err and "seconds" in err, err
