"""The `interlock` CLI end to end: the README walk-through with a real SIGKILL, and the verbs."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from conftest import REPO, wait_for

EXAMPLES = REPO / "runtime" / "examples"


def interlock(dsn: str, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    proc = subprocess.run([sys.executable, "-m", "interlock_runtime.cli", *args, "--dsn", dsn],
                          capture_output=True, text=True, timeout=60)  # fmt: skip
    if check:
        assert proc.returncode == 0, proc.stderr
    return proc


def worker(dsn: str, worker_id: str, log: Path) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "interlock_runtime.cli", "worker", "--dsn", dsn, "--module",
         "hello_flows", "--id", worker_id, "--lease-ttl", "2", "--poll", "0.2"],
        env=dict(os.environ, PYTHONPATH=str(EXAMPLES)), stderr=log.open("w"),
    )  # fmt: skip


def test_readme_walkthrough_survives_a_worker_sigkill(dsn, tmp_path) -> None:
    first = worker(dsn, "w1", tmp_path / "w1.log")
    try:
        wait_for(lambda: "registered" in (tmp_path / "w1.log").read_text(), 30, "w1 to register")
        assert "started greet@1 as greet-1" in interlock(dsn, "start", "greet", "greet-1",
                                                        "--input", '{"name": "Ada"}').stdout  # fmt: skip
        wait_for(lambda: '"claimed"' in (tmp_path / "w1.log").read_text(), 30, "the claim")
        time.sleep(0.5)  # inside the 2 s step
        first.send_signal(signal.SIGKILL)
        assert first.wait(timeout=10) == -signal.SIGKILL
        listed = interlock(dsn, "list").stdout
        assert "greet-1" in listed and "running" in listed
        second = worker(dsn, "w2", tmp_path / "w2.log")
        try:
            out = interlock(dsn, "result", "greet-1", "--timeout", "30").stdout
            assert json.loads(out) == "Hello, ADA!"
        finally:
            second.terminate()
            second.wait(timeout=20)
    finally:
        if first.poll() is None:
            first.kill()
    described = json.loads(interlock(dsn, "describe", "greet-1", "--json").stdout)
    assert [c["owner"] for c in described["claims"]][:2] == ["w1", "w2"]
    assert [s["name"] for s in described["steps"]] == ["shout", "sleep", "compose"]
    table = interlock(dsn, "describe", "greet-1").stdout
    assert "claims" in table and "w2" in table
    report = json.loads(interlock(dsn, "drain-report", "--json").stdout)
    assert report == [{"name": "greet", "version": "1", "status": "completed", "workflows": 1}]


def test_signal_cancel_and_bad_input_through_the_cli(dsn, tmp_path) -> None:
    w = worker(dsn, "w1", tmp_path / "w.log")
    try:
        wait_for(lambda: "registered" in (tmp_path / "w.log").read_text(), 30, "registration")
        bad = interlock(dsn, "start", "greet", "g-bad", "--input", "{nope", check=False)
        assert bad.returncode == 2 and "not JSON" in bad.stderr
        unknown = interlock(dsn, "start", "refund", "g-x", "--require-deployed", check=False)
        assert unknown.returncode == 1 and "greet@1" in unknown.stderr
        early = interlock(dsn, "start", "refund", "g-y")  # no --require-deployed: it waits
        assert "awaiting a worker: no deployment serves refund yet" in early.stdout
        missing = interlock(dsn, "signal", "nobody", "go", check=False)
        assert missing.returncode == 1 and "no workflow with id 'nobody'" in missing.stderr
        interlock(dsn, "start", "greet", "g-2", "--input", '{"name": "Bo"}')
        interlock(dsn, "cancel", "g-2", "--by", "ops")
        wait_for(lambda: "cancelled" in interlock(dsn, "list", "--status", "cancelled").stdout,
                 30, "the cancel")  # fmt: skip
        done = interlock(dsn, "cancel", "g-2", check=False)
        assert done.returncode == 1 and "is cancelled; nothing was cancelled" in done.stderr
        late = interlock(dsn, "result", "nobody", "--timeout", "0.1", check=False)
        assert late.returncode == 1
    finally:
        w.terminate()
        w.wait(timeout=20)


# -- the error contract and the complete CLI (docs/errors.md) ------------------------------------

DOWN = "postgresql://postgres@127.0.0.1:1/nothing?connect_timeout=3"  # nothing listens on port 1
MALFORMED = "this is not a dsn"

# Every verb that talks to the database, with the arguments it needs; `worker` is left out: it
# waits for the database by design (it logs db_unavailable and retries until it is up).
DB_VERBS = [
    ["list"], ["list", "--json"], ["describe", "w1"], ["query", "w1"], ["start", "echo", "w9"],
    ["result", "w1", "--timeout", "1"], ["signal", "w1", "go"], ["cancel", "w1"],
    ["fork", "w1", "w2", "--at-seq", "1"], ["migrate", "w1", "--to-version", "1"],
    ["migrate", "--schema"], ["drain-report"], ["receipt", "eff_x"], ["ambiguous"],
    ["reconcile", "eff_x", "--evidence", "seen", "--by", "ann"], ["revoke", "g1", "--by", "ann"],
    ["breaker", "list"], ["breaker", "reset", "t"], ["db", "status"], ["db", "upgrade"],
    ["roles"], ["approve", "w1", "--by", "ann", "--payload", "{}"], ["watchdog"],
    ["operator", "list"],
]  # fmt: skip


def _in_process(capsys, *args: str) -> tuple[int, str, str]:
    from interlock_runtime import cli

    status = cli.main(list(args))
    out, err = capsys.readouterr()
    return status, out, err


def test_every_verb_explains_a_database_that_is_down_or_a_dsn_that_is_malformed(capsys) -> None:
    seen = 0
    for args in DB_VERBS:
        for dsn, expected in ((DOWN, "cannot reach Postgres at 127.0.0.1:1/nothing"),
                              (MALFORMED, "the DSN is not valid")):  # fmt: skip
            status, _, err = _in_process(capsys, *args, "--dsn", dsn)
            assert status == 2, (args, dsn, err)
            assert expected in err and "ILR_DSN" in err, (args, err)
            assert len(err.strip().splitlines()) == 1, (args, err)
            seen += 1
    assert seen == 2 * len(DB_VERBS)
    # and as a real process: one line, no traceback, exit 2
    proc = interlock(DOWN, "list", check=False)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "interlock pg start" in proc.stderr and len(proc.stderr.splitlines()) == 1


def test_version_and_a_default_or_required_shown_for_every_option() -> None:
    import argparse

    from interlock_runtime import cli
    from interlock_runtime.cli import approve as approve_cli

    out = subprocess.run([sys.executable, "-m", "interlock_runtime.cli", "--version"],
                         capture_output=True, text=True, timeout=60)  # fmt: skip
    assert out.returncode == 0 and out.stdout.startswith("interlock 0."), out
    parser = cli.build_parser()
    subs = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    parsers = [*subs.choices.values(), approve_cli.build_parser()]
    checked = 0
    for p in parsers:
        if p.add_help is False:  # a verb that parses its own flags (worker, watchdog, ...)
            continue
        formatter = p._get_formatter()
        for action in p._actions:
            if isinstance(action, argparse._HelpAction | argparse._VersionAction):
                continue
            text = formatter._get_help_string(action) or ""
            assert action.help, f"{p.prog} {action.dest}: no help text"
            flag = action.nargs == 0
            assert flag or not action.option_strings or "default" in text or action.required, (
                f"{p.prog} {action.option_strings}: the help shows no default: {text!r}"
            )
            checked += 1
    assert checked > 60
    for verb in ("fork", "migrate"):
        assert verb in subs.choices, f"`interlock {verb}` is missing"


def test_read_verbs_speak_json_and_fork_and_migrate_exist(dsn, conn) -> None:
    import flows

    from interlock_runtime import Runtime

    with Runtime(dsn) as rt:
        rt.register(flows.echo)
        rt.start(flows.echo, "w1", {"x": 1})
    conn.execute("update ilr.workflows set status = 'completed', result = '{\"ok\": true}' "
                 "where id = 'w1'")  # fmt: skip
    for args in (["list"], ["describe", "w1"], ["drain-report"], ["ambiguous"],
                 ["breaker", "list"], ["db", "status"], ["result", "w1"]):  # fmt: skip
        value = json.loads(interlock(dsn, *args, "--json").stdout)
        assert value is not None, args
    assert json.loads(interlock(dsn, "result", "w1", "--json").stdout)["result"] == {"ok": True}
    with Runtime(dsn) as rt:
        rt.start(flows.echo, "w2", {"x": 2})
    forked = interlock(dsn, "fork", "w2", "w2-fork", "--at-seq", "1")
    assert "forked w2 at seq 1 as w2-fork" in forked.stdout
    assert json.loads(interlock(dsn, "describe", "w2-fork", "--json").stdout)["forked_from"]
    assert "migrated w2 to version 1" in interlock(dsn, "migrate", "w2", "--to-version", "1").stdout
    assert "nothing to do" in interlock(dsn, "migrate", "--schema").stdout
    bare = interlock(dsn, "migrate", check=False)
    assert bare.returncode == 2 and "--to-version" in bare.stderr
    gone = interlock(dsn, "fork", "nobody", "w3", "--at-seq", "1", check=False)
    assert gone.returncode == 1 and "no workflow with id 'nobody'" in gone.stderr


def test_a_reader_that_closes_the_pipe_early_ends_it_quietly(dsn, conn) -> None:
    import flows

    from interlock_runtime import Runtime

    with Runtime(dsn) as rt:
        rt.register(flows.echo)
    conn.execute("insert into ilr.workflows (id, name, version, input) select "
                 "'pipe-' || g, 'echo', '1', '{}' from generate_series(1, 1000) g")  # fmt: skip
    shell = (
        f"set -o pipefail; {sys.executable} -m interlock_runtime.cli list --dsn '{dsn}' | head -1"
    )
    proc = subprocess.run(["bash", "-c", shell], capture_output=True, text=True, timeout=60)
    assert proc.stdout.startswith("ID"), proc.stdout
    assert proc.stderr == "", proc.stderr
    assert proc.returncode == 0


def test_verbs_with_parsers_of_their_own_are_checked_too(dsn, conn, capsys) -> None:
    for args in (["watchdog", "--threshold", "nan"], ["watchdog", "--threshold=-1"],
                 ["watchdog", "--every", "-1"], ["watchdog", "--every", "inf"],
                 ["worker", "--module", "flows", "--lease-ttl", "-1"],
                 ["worker", "--module", "flows", "--concurrency", "0"],
                 ["approve", "w1", "--by", "ann", "--expires-in", "nan"]):  # fmt: skip
        status, _, err = _in_process(capsys, *args, "--dsn", dsn)
        assert status == 2 and len(err.strip().splitlines()) == 1, (args, err)
    conn.execute("drop schema ilr cascade")  # a database without the schema: one line too
    status, _, err = _in_process(capsys, "watchdog", "--dsn", dsn)
    assert status == 2 and "has no Interlock schema" in err and "db upgrade" in err, err


def test_the_worker_module_itself_refuses_nonsense_with_one_line() -> None:
    """`python -m interlock_runtime.cli.worker`, not only `interlock worker`, checks its numbers."""
    import subprocess
    import sys
    from pathlib import Path

    for bad in (["--lease-ttl", "-1"], ["--concurrency", "0"], ["--poll", "nan"],
                ["--lease-ttl", "1e308"], ["--module", "bad\x01name"]):  # fmt: skip
        proc = subprocess.run(
            [sys.executable, "-m", "interlock_runtime.cli.worker", "--module", "flows", *bad],
            capture_output=True, text=True, timeout=60, cwd=Path(__file__).parent,
        )  # fmt: skip
        assert proc.returncode == 2, (bad, proc.stderr)
        assert "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
