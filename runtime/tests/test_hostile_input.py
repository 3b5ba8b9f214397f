"""Hostile input through the client API and the CLI: quotes, NULs, lone surrogates, huge
strings, odd ids. Either it is stored and reads back identical, or it is refused with
InvalidInput (a clear message) and nothing is written. Never another exception."""

from __future__ import annotations

import os
import subprocess
import sys

import flows
import hypothesis.strategies as st
import psycopg
from hypothesis import HealthCheck, given, settings

from interlock_runtime import InvalidInput, Runtime, WorkflowNotFound, db

JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**53), 2**53) | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)  # fmt: skip
HOSTILE_TEXT = st.sampled_from(["'; drop table ilr.workflows; --", "\x00", "\ud800", "a" * 5000,
                                "é\u202e", "$done:x", "../../etc", ""]) | st.text()  # fmt: skip
SETTINGS = settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


def same(a, b) -> bool:
    """Equal as JSON values; numbers compare by value (jsonb may return 4e16 as an int)."""
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b
    if isinstance(a, int | float) and isinstance(b, int | float):
        return float(a) == float(b)
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    return a == b


def _count(conn: psycopg.Connection) -> int:
    return conn.execute("select count(*) as n from ilr.workflows").fetchone()["n"]


@SETTINGS
@given(value=JSON)
def test_any_input_reads_back_identical_or_is_refused(dsn, value) -> None:
    with Runtime(dsn) as rt, db.connect(dsn) as conn:
        rt.register(flows.echo)
        before = _count(conn)
        wf = f"h-{before}"
        try:
            rt.start(flows.echo, wf, value)
        except InvalidInput as exc:
            assert "JSON" in str(exc) or "Postgres" in str(exc) or "limit" in str(exc)
            assert _count(conn) == before
            return
        assert same(rt.describe(wf)["input"], db.json_value(value, "input"))


@SETTINGS
@given(wf_id=HOSTILE_TEXT, name=HOSTILE_TEXT, payload=JSON)
def test_hostile_ids_names_and_payloads_are_refused_or_stored(dsn, wf_id, name, payload) -> None:
    with Runtime(dsn) as rt, db.connect(dsn) as conn:
        rt.register(flows.waiter)
        before = _count(conn)
        try:
            rt.start(flows.waiter, wf_id, {})
        except InvalidInput:
            assert _count(conn) == before
            return
        signals = conn.execute("select count(*) as n from ilr.signals").fetchone()["n"]
        try:
            rt.signal(wf_id, name, payload)
        except InvalidInput:
            assert conn.execute("select count(*) as n from ilr.signals").fetchone()["n"] == signals
        try:
            rt.describe(name)
        except (WorkflowNotFound, InvalidInput):
            pass


def test_input_over_the_size_limit_is_refused(dsn, conn) -> None:
    with Runtime(dsn) as rt:
        try:
            rt.start(flows.echo, "big", {"blob": "x" * (1 << 20)})
        except InvalidInput as exc:
            assert "limit" in str(exc)
        else:
            raise AssertionError("a 1 MiB input was accepted")
    assert _count(conn) == 0


def test_hostile_cli_arguments_get_clear_errors(dsn) -> None:
    def cli(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "interlock_runtime.cli", *args, "--dsn", dsn],
                              capture_output=True, timeout=60, env=dict(os.environ))  # fmt: skip

    for args in (["describe", "'; select 1; --"], ["signal", "x\udcff".encode("utf-8", "surrogateescape").decode("utf-8", "replace"), "go"],
                 ["start", "echo", "id with space"], ["signal", "w", "$done:x"],
                 ["start", "echo", "ok-id", "--input", '{"a": "\\u0000"}']):  # fmt: skip
        proc = cli(*args)
        assert proc.returncode in (1, 2), (args, proc.stderr)
        assert b"Traceback" not in proc.stderr, (args, proc.stderr)
