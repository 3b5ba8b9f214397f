"""Hostile input through the client API and the CLI: quotes, NULs, lone surrogates, huge
strings, odd ids. Either it is stored and reads back identical, or it is refused with
InvalidInput (a clear message) and nothing is written. Never another exception."""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import flows
import hypothesis.strategies as st
import psycopg
import pytest
from hypothesis import HealthCheck, example, given, seed, settings
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from interlock_runtime import InvalidInput, Runtime, WorkflowNotFound, db, stored, validate
from interlock_runtime.errors import DatabaseUnreachable

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
        assert same(rt.describe(wf)["input"], stored.json_value(value, "input"))


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


# -- the hostile-input contract, fuzzed (docs/errors.md) ------------------------------------------
#
# Five classes of input that must be refused: ids, names, numbers, JSON documents, DSNs. Each
# case runs through the CLI as a real subprocess (exit status 2, one line on stderr, no
# "Traceback") and through the client API (InvalidInput or DatabaseUnreachable), under a time
# limit (a hang fails), with every table of the ilr schema hashed before and after: a refused
# case changes no row. ILR_FUZZ_EXAMPLES sets the CLI cases per class (default 8, bounded for
# `make test`, about 50 s); the API runs five times as many. The failures issue 19 reported
# run first in every class (KNOWN_CLI, KNOWN_API). The figures are printed at the end.

FUZZ_CLI = int(os.environ.get("ILR_FUZZ_EXAMPLES") or 10)
FUZZ_SEED = int(os.environ.get("ILR_HYPOTHESIS_SEED") or 0)  # the root conftest's seed: the
# inner @given functions below are not collected, so they take it here
FUZZ_API = 5 * FUZZ_CLI
CASE_SECONDS = 20.0  # a CLI case (a process start included) or an API call that takes longer hangs
REPLAY_SECONDS = 3.0  # once a case has hung, Hypothesis replays it while shrinking: fail faster


def _time_limit() -> float:
    return REPLAY_SECONDS if any(f["hangs"] for f in FIGURES.values()) else CASE_SECONDS


TESTS = Path(__file__).resolve().parent
FIGURES: dict[str, Counter] = {}
CLASSES = ("ids", "names", "numbers", "json", "dsn")

_ID_OK = re.compile(r"[A-Za-z0-9_.:@/#=+-]{1,200}")
# characters str.isprintable() refuses, none of them NUL (argv cannot carry NUL)
INVISIBLE = [chr(i) for i in range(1, 32)] + ["\x7f", "\x85", "\xa0", "\u200b", "\u200e", "\u202e",
             "\u2028", "\u2029", "\ufeff", "\ue000", "\U000e0001", "\u061c", "\u3000"]  # fmt: skip
INVALID_UTF8 = st.sampled_from([b"\xff", b"\xc3\x28", b"\xed\xa0\x80", b"\x80abc", b"ok\xfe"])


def _bad_id(cli: bool) -> st.SearchStrategy:
    plain = st.one_of(
        st.sampled_from(
            [
                "",
                " ",
                "a b",
                "a\n",
                "é",
                "'; drop table ilr.workflows; --",
                "a\tb",
                "id\u202e",
                "x" * 201,
            ]
        ),  # fmt: skip
        st.text(max_size=40).filter(lambda s: not _ID_OK.fullmatch(s) and "\x00" not in s),
        st.integers(201, 3000).map(lambda n: "w" * n),
    )
    if cli:
        return plain | INVALID_UTF8
    return plain | st.sampled_from(["a\x00b", "\ud800", 7, None, b"w1", ["w1"]])


def _bad_name(cli: bool) -> st.SearchStrategy:
    spliced = st.tuples(st.text(alphabet="abc", max_size=5), st.sampled_from(INVISIBLE),
                        st.text(alphabet="xyz", max_size=5)).map("".join)  # fmt: skip
    plain = st.one_of(spliced, st.sampled_from(["", "   ", "\t"]),
                      st.integers(257, 100_000).map(lambda n: "n" * n))  # fmt: skip
    if cli:
        return plain | INVALID_UTF8.map(lambda b: b"ann" + b)
    huge = st.integers(100_001, 10_000_000).map(lambda n: "p" * n)
    return plain | huge | st.sampled_from(["a\x00", "\udcff", 5, b"ann", ["ann"]])


def _nest(depth: int, inner: str = "1") -> str:
    return "[" * depth + inner + "]" * depth


CLI_BAD_JSON = st.one_of(
    st.integers(65, 20_000).map(_nest),
    st.integers(65, 5_000).map(lambda d: '{"a":' * d + "1" + "}" * d),
    st.sampled_from(
        [
            "NaN",
            "Infinity",
            "-Infinity",
            '{"a": NaN}',
            "[1, Infinity]",
            '{"a": "\\u0000"}',
            '["\\ud800"]',
            "{nope",
            "",
            "[1,",
            "'single'",
            "1" * 5000,
        ]
    ),  # fmt: skip
    st.text(max_size=30).filter(lambda s: "\x00" not in s and not _is_json(s)),
)


def _is_json(text: str) -> bool:
    try:
        json.loads(text)
    except (ValueError, RecursionError):
        return False
    return True


def _deep(levels: int) -> list:
    value: list = []
    for _ in range(levels):
        value = [value]
    return value


def _cycle() -> list:
    a: list = []
    a.append(a)
    return a


API_BAD_JSON = st.one_of(
    st.sampled_from([float("nan"), float("inf"), -float("inf")]).map(lambda f: {"x": [f]}),
    st.integers(64, 5000).map(_deep),
    st.integers(1 << 20, (1 << 20) + 5000).map(lambda n: {"blob": "x" * n}),
    st.sampled_from([{1, 2}, b"bytes", object(), 1j, {"k": "\x00"}, ["\ud800"], {"\udcff": 1}]),
    st.builds(_cycle),
)

NUMBER_TEXT = {  # option: bad values as text
    "timeout": ["nan", "inf", "-inf", "-1", "-0.001", "1e400", "4e8", "soon", "", "0x10"],
    "expires": ["nan", "inf", "-1", "0", "-1e-9", "1e400", "4e8", "week", ""],
    "limit": ["-1", "0", "100001", "1.5", "nan", "1e3", "many", ""],
    "seq": ["0", "-3", "2147483648", "1.5", "nan", "x"],
    "lease": ["-1", "0", "0.1", "nan", "inf", "86401"],
    "concurrency": ["0", "-4", "257", "100000"],
    "poll": ["-1", "0", "nan", "inf", "3601"],
}
NUMBER_API = [float("nan"), float("inf"), -float("inf"), -1, -0.5, 10**400, True, "5", None, [1]]


def _cli_case(kind: str) -> st.SearchStrategy:
    """(argv after `interlock`, with its --dsn or None for the test database)."""
    if kind == "ids":
        return st.tuples(st.sampled_from([
            lambda x: ["describe", x], lambda x: ["query", x], lambda x: ["result", x, "--timeout", "1"],
            lambda x: ["cancel", x], lambda x: ["signal", x, "go"],
            lambda x: ["fork", "w1", x, "--at-seq", "1"], lambda x: ["fork", x, "w9", "--at-seq", "1"],
            lambda x: ["revoke", x, "--by", "ann"], lambda x: ["receipt", x],
            lambda x: ["reconcile", x, "--evidence", "seen", "--by", "ann"],
            lambda x: ["approve", x, "--by", "ann", "--payload", "{}"],
            lambda x: ["start", "echo", x], lambda x: ["migrate", x, "--to-version", "1"],
        ]), _bad_id(cli=True)).map(lambda t: (t[0](t[1]), None))  # fmt: skip
    if kind == "names":
        return st.tuples(st.sampled_from([
            lambda x: ["signal", "w1", x], lambda x: ["cancel", "w1", "--by", x],
            lambda x: ["signal", "w1", "go", "--sender", x], lambda x: ["start", x, "w9"],
            lambda x: ["start", "echo", "w9", "--version", x], lambda x: ["revoke", "g1", "--by", x],
            lambda x: ["approve", "w1", "--by", x, "--payload", "{}"],
            lambda x: ["approve", "w1", "--by", "ann", "--action", x, "--payload", "{}"],
            lambda x: ["list", "--name", x], lambda x: ["breaker", "reset", x],
            lambda x: ["reconcile", "eff_x", "--evidence", "seen", "--by", x],
            lambda x: ["migrate", "w1", "--to-version", x], lambda x: ["list", "--status", x],
        ]), _bad_name(cli=True)).map(lambda t: (t[0](t[1]), None))  # fmt: skip
    if kind == "numbers":
        verbs = {
            "timeout": lambda x: ["result", "w1", "--timeout", x],
            "expires": lambda x: [
                "approve",
                "w1",
                "--by",
                "ann",
                "--payload",
                "{}",
                "--expires-in",
                x,
            ],  # fmt: skip
            "limit": lambda x: ["list", "--limit", x],
            "seq": lambda x: ["fork", "w1", "w9", "--at-seq", x],
            "lease": lambda x: ["worker", "--module", "flows", "--lease-ttl", x],
            "concurrency": lambda x: ["worker", "--module", "flows", "--concurrency", x],
            "poll": lambda x: ["worker", "--module", "flows", "--poll", x],
        }
        return st.sampled_from(sorted(verbs)).flatmap(
            lambda k: st.sampled_from(NUMBER_TEXT[k]).map(lambda x: (verbs[k](f"={x}"), None))
        )
    if kind == "json":
        return st.tuples(st.sampled_from([
            lambda x: ["start", "echo", "w9", "--input", x],
            lambda x: ["signal", "w1", "go", "--payload", x],
            lambda x: ["approve", "w1", "--by", "ann", "--payload", x],
        ]), CLI_BAD_JSON).map(lambda t: (t[0](t[1]), None))  # fmt: skip
    malformed = st.one_of(
        st.text(alphabet="abcxyz ;", min_size=1, max_size=20).map(lambda s: f"garbage{s}"),
        st.integers(65536, 10**6).map(lambda p: f"postgresql://postgres@127.0.0.1:{p}/x"),
        st.sampled_from(["port=abc", "host=127.0.0.1 port=1 dbname='unclosed", "port=0"]),
        INVALID_UTF8.map(lambda b: b"host=" + b),
    )
    down = st.sampled_from(["postgresql://postgres@127.0.0.1:1/x", "host=127.0.0.1 port=1"])
    verbs = [["list"], ["describe", "w1"], ["result", "w1", "--timeout", "1"], ["signal", "w1", "go"],
             ["cancel", "w1"], ["db", "status"], ["approve", "w1", "--by", "ann"], ["watchdog"],
             ["breaker", "list"], ["revoke", "g1", "--by", "ann"], ["migrate", "--schema"]]  # fmt: skip
    # a worker waits for a database that is down (by design: it logs db_unavailable and
    # retries), so it gets malformed DSNs only
    worker = st.tuples(st.just(["worker", "--module", "flows"]), malformed)
    return st.tuples(st.sampled_from(verbs), malformed | down) | worker


# The numbers are given as --option=VALUE so that a value starting with "-" stays a value.
def _fix_equals(argv: list) -> list:
    out: list = []
    for item in argv:
        if isinstance(item, str) and item.startswith("=") and out:
            out[-1] = f"{out[-1]}{item}"
        else:
            out.append(item)
    return out


def _snapshot(conn: psycopg.Connection) -> dict[str, tuple]:
    """Every table of the ilr schema: its row count and an md5 over its rows."""
    tables = [r["tablename"] for r in conn.execute(
        "select tablename from pg_tables where schemaname = 'ilr' order by tablename")]  # fmt: skip
    out = {}
    for t in tables:
        q = sql.SQL("select count(*) as n, md5(coalesce(string_agg(x::text, '|' order by "
                    "x::text), '')) as h from ilr.{} x").format(sql.Identifier(t))  # fmt: skip
        row = conn.execute(q).fetchone()
        out[t] = (row["n"], row["h"])
    return out


def _changed(before: dict, after: dict) -> int:
    return sum(abs(after.get(t, (0, ""))[0] - n) or (after.get(t, (0, ""))[1] != h)
               for t, (n, h) in before.items())  # fmt: skip


def _figures(kind: str) -> Counter:
    return FIGURES.setdefault(kind, Counter())


def _seed_database(dsn: str) -> None:
    with Runtime(dsn) as rt:
        rt.register(flows.echo, flows.waiter)
        if not rt.list(name="waiter"):
            rt.start(flows.waiter, "w1", {})
            rt.grant("agent", "refund", by="ops", grant_id="g1", expires_in=3600)
            rt.signal("w1", "note", {"n": 1})


def _run_cli(
    dsn: str, argv: list, case_dsn: str | None, limit: float
) -> subprocess.CompletedProcess:
    args = [sys.executable, "-m", "interlock_runtime.cli", *_fix_equals(argv), "--dsn",
            case_dsn or dsn]  # fmt: skip
    env = dict(
        os.environ, PYTHONPATH=os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")])
    )
    return subprocess.run(args, capture_output=True, timeout=limit, env=env, cwd=TESTS)


# The failures issue 19 reported, run first in every fuzz run on top of the generated cases.
KNOWN_CLI = {
    "ids": [["describe", "a b"], ["result", b"w\xff"], ["revoke", "g 1", "--by", "ann"],
            ["list", "--name", "x\x01"]],
    "names": [["cancel", "w1", "--by", "n" * 5000], ["signal", "w1", "go", "--sender", "\x1b[31m"]],
    "numbers": [["result", "w1", "--timeout=nan"], ["approve", "w1", "--by", "ann", "--payload",
                "{}", "--expires-in=-1"], ["list", "--limit=-1"],
                ["worker", "--module", "flows", "--lease-ttl=-1"],
                ["worker", "--module", "flows", "--concurrency=0"], ["fork", "w1", "w9", "--at-seq=0"],
                ["worker", "--module", "flows", "--poll=nan"]],
    "json": [["start", "echo", "w9", "--input", _nest(30_000)], ["signal", "w1", "go", "--payload",
             '{"a": NaN}']],
}  # fmt: skip
KNOWN_CLI_DSN = [(["describe", "w1"], b"host=\xff"), (["list"], "garbage"),
                 (["list"], "postgresql://postgres@127.0.0.1:1/x")]  # fmt: skip
KNOWN_API = {
    "names": [(lambda rt, x: rt.grant(x, "refund", by="ann"), "p" * 10_000_000)],
    "numbers": [(lambda rt, x: rt.result("w1", timeout=x), float("nan")),
                (lambda rt, x: rt.approve("w1", {}, by="ann", expires_in=x), -1),
                (lambda rt, x: rt.grant("agent", "refund", by="ann", expires_in=x), -1),
                (lambda rt, x: rt.grant("agent", "refund", by="ann",
                                        constraints={"amount": {"max": x}}), -500),
                (lambda rt, x: rt.list(limit=x), -1)],
    "ids": [(lambda rt, x: rt.describe(x), "a\x00"), (lambda rt, x: rt.revoke(x), "g 1")],
}  # fmt: skip


def _with_known(check, cases: list):
    for case in reversed(cases):
        check = example(case=case)(check)
    return check


def _cli_fuzz(dsn: str, kind: str):
    fig = _figures(f"cli {kind}")
    _seed_database(dsn)

    @seed(FUZZ_SEED)
    @settings(max_examples=FUZZ_CLI, deadline=None, suppress_health_check=list(HealthCheck))
    @given(case=_cli_case(kind))
    def check(case) -> None:
        argv, case_dsn = case
        with db.connect(dsn) as conn:
            before = _snapshot(conn)
            fig["cases"] += 1
            t0 = time.monotonic()
            try:
                proc = _run_cli(dsn, argv, case_dsn, _time_limit())
            except subprocess.TimeoutExpired:
                fig["hangs"] += 1
                raise AssertionError(f"interlock {argv!r} hung (> {_time_limit()} s)") from None
            fig["seconds"] += time.monotonic() - t0
            changed = _changed(before, _snapshot(conn))
        fig["changed rows"] += changed
        fig["tracebacks"] += b"Traceback" in proc.stderr
        assert b"Traceback" not in proc.stderr, (argv, proc.stderr[-2000:])
        assert proc.returncode == 2, (argv, proc.returncode, proc.stderr[-2000:])
        lines = proc.stderr.decode("utf-8", "replace").strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("interlock"), (argv, lines)
        assert changed == 0, (argv, "changed rows", changed)
        fig["refused"] += 1

    known = [(argv, None) for argv in KNOWN_CLI.get(kind, [])]
    _with_known(check, known + (KNOWN_CLI_DSN if kind == "dsn" else []))()


def test_fuzz_cli_ids(dsn) -> None:
    _cli_fuzz(dsn, "ids")


def test_fuzz_cli_names(dsn) -> None:
    _cli_fuzz(dsn, "names")


def test_fuzz_cli_numbers(dsn) -> None:
    _cli_fuzz(dsn, "numbers")


def test_fuzz_cli_json(dsn) -> None:
    _cli_fuzz(dsn, "json")


def test_fuzz_cli_dsn(dsn) -> None:
    _cli_fuzz(dsn, "dsn")


def _api_case(kind: str) -> st.SearchStrategy:
    """A function of a Runtime that must raise InvalidInput (or DatabaseUnreachable)."""
    if kind == "ids":
        calls = [
            lambda rt, x: rt.describe(x), lambda rt, x: rt.result(x, timeout=0),
            lambda rt, x: rt.cancel(x), lambda rt, x: rt.signal(x, "go"),
            lambda rt, x: rt.fork("w1", 1, x), lambda rt, x: rt.fork(x, 1, "w9"),
            lambda rt, x: rt.revoke(x), lambda rt, x: rt.receipt(x),
            lambda rt, x: rt.reconcile(x, "seen", by="ann"), lambda rt, x: rt.approve(x, {}, by="ann"),
            lambda rt, x: rt.start("echo", x, {}), lambda rt, x: rt.migrate(x, "1"),
            lambda rt, x: rt.claim_history(x), lambda rt, x: rt.effects(x),
            lambda rt, x: rt.grant("agent", "refund", by="ann", grant_id=x if x else "bad id"),
        ]  # fmt: skip
        values = _bad_id(cli=False)
    elif kind == "names":
        calls = [
            lambda rt, x: rt.signal("w1", x), lambda rt, x: rt.cancel("w1", by=x),
            lambda rt, x: rt.signal("w1", "go", sender=x), lambda rt, x: rt.start(x, "w9"),
            lambda rt, x: rt.start("echo", "w9", version=x), lambda rt, x: rt.revoke("g1", by=x),
            lambda rt, x: rt.approve("w1", {}, by=x), lambda rt, x: rt.approve("w1", {}, by="a", action=x),
            lambda rt, x: rt.approve("w1", {}, by="ann", principal=x),
            lambda rt, x: rt.grant(x, "refund", by="ann"), lambda rt, x: rt.grant("agent", x, by="ann"),
            lambda rt, x: rt.grant("agent", "refund", by=x), lambda rt, x: rt.list(name=x),
            lambda rt, x: rt.list(status=x), lambda rt, x: rt.reset_breaker(x),
            lambda rt, x: rt.reconcile("eff_x", "seen", by=x), lambda rt, x: rt.migrate("w1", x),
        ]  # fmt: skip
        values = _bad_name(cli=False)
    elif kind == "numbers":
        calls = [
            lambda rt, x: rt.result("w1", timeout=x if x is not None else -1),
            lambda rt, x: rt.result("w1", timeout=0, poll=x),
            lambda rt, x: rt.grant("agent", "refund", by="ann", expires_in=x if x is not None else 0),
            lambda rt, x: rt.approve("w1", {}, by="ann", expires_in=x if x is not None else 0),
            lambda rt, x: rt.list(limit=x), lambda rt, x: rt.fork("w1", x, "w9"),
            lambda rt, x: rt.recover_orphans({}, lease_ttl=x),
            lambda rt, x: rt.grant("agent", "refund", by="ann",
                                   constraints={"amount": {"max": x if x is not None else -1}}),
        ]  # fmt: skip
        values = (
            st.sampled_from(NUMBER_API) | st.floats(max_value=-1e-9) | st.integers(max_value=-1)
        )
    elif kind == "json":
        calls = [
            lambda rt, x: rt.start("echo", "w9", x), lambda rt, x: rt.signal("w1", "go", x),
            lambda rt, x: rt.approve("w1", x, by="ann"), lambda rt, x: rt.approve("w1", {}, x, by="ann"),
            lambda rt, x: rt.grant("agent", "refund", by="ann", constraints=x),
        ]  # fmt: skip
        values = API_BAD_JSON
    else:
        calls = [lambda rt, x: Runtime(x).close()]
        values = st.one_of(
            st.sampled_from(
                [
                    "garbage",
                    "port=abc",
                    "host=127.0.0.1 port=1 connect_timeout=3",
                    "postgresql://postgres@127.0.0.1:1/x",
                    "postgresql://h:99999/x",
                    "host=127.0.0.1 port=1 dbname='unclosed",
                    "   ",
                ]
            ),  # fmt: skip
            st.text(alphabet="abc ;:/", min_size=1, max_size=12).map(lambda s: f"x{s}"),
        )
    return st.tuples(st.sampled_from(calls), values)


def _within(seconds: float, fn) -> tuple[bool, BaseException | None]:
    """Run fn in a thread: (finished in time, what it raised)."""
    box: dict = {}

    def body() -> None:
        try:
            fn()
        except BaseException as exc:  # noqa: BLE001 - reported to the caller
            box["exc"] = exc

    t = threading.Thread(target=body, daemon=True)
    t.start()
    t.join(seconds)
    return not t.is_alive(), box.get("exc")


def _api_fuzz(dsn: str, kind: str) -> None:
    fig = _figures(f"api {kind}")
    _seed_database(dsn)

    @seed(FUZZ_SEED)
    @settings(max_examples=FUZZ_API, deadline=None, suppress_health_check=list(HealthCheck))
    @given(case=_api_case(kind))
    def check(case) -> None:
        call, value = case
        with Runtime(dsn) as rt, db.connect(dsn) as conn:
            before = _snapshot(conn)
            fig["cases"] += 1
            done, exc = _within(_time_limit(), lambda: call(rt, value))
            if not done:
                fig["hangs"] += 1
                raise AssertionError(f"{kind} case with {validate.shown(value)} hung")
            changed = _changed(before, _snapshot(conn))
        fig["changed rows"] += changed
        refused = isinstance(exc, InvalidInput | DatabaseUnreachable)
        if exc is not None and not refused:
            fig["tracebacks"] += 1
        assert refused, (kind, validate.shown(value), repr(exc))
        assert "\n" not in str(exc), str(exc)
        assert changed == 0, (kind, validate.shown(value), changed)
        fig["refused"] += 1

    _with_known(check, KNOWN_API.get(kind, []))()


def test_fuzz_api_ids(dsn) -> None:
    _api_fuzz(dsn, "ids")


def test_fuzz_api_names(dsn) -> None:
    _api_fuzz(dsn, "names")


def test_fuzz_api_numbers(dsn) -> None:
    _api_fuzz(dsn, "numbers")


def test_fuzz_api_json(dsn) -> None:
    _api_fuzz(dsn, "json")


def test_fuzz_api_dsn(dsn) -> None:
    _api_fuzz(dsn, "dsn")


# -- the database-fault axes (docs/errors.md#database-faults) ------------------------------------
#
# Role axis: each least-privilege role (sql/roles.sql) x each verb that reads or writes the
# database, as a real process. Fault axis (exclusive: it restarts the cluster): a verb blocked on
# a lock when its backend is terminated or the server restarts. Either way: no traceback, a
# refusal is one line with exit status 1, 2 or 3, and a refused case changes no row of the ilr
# schema (hashed before and after: the ground truth, not the runtime's own report).

FUZZ_ROLES = int(os.environ.get("ILR_FUZZ_ROLE_EXAMPLES") or 60)
FUZZ_FAULTS = int(os.environ.get("ILR_FUZZ_FAULT_EXAMPLES") or 12)
ROLE_LOGINS = {"worker": "ilr_t_fz_worker", "operator": "ilr_t_fz_operator",
               "auditor": "ilr_t_fz_auditor"}  # fmt: skip
ROLE_VERBS = {
    "list": ["list"], "describe": ["describe", "w1"], "query": ["query", "w1"],
    "result": ["result", "w1", "--timeout", "0.2"], "start": ["start", "echo", "w-role"],
    "signal": ["signal", "w1", "go"], "cancel": ["cancel", "w2", "--by", "ann"],
    "fork": ["fork", "w1", "w-fork", "--at-seq", "1"], "migrate": ["migrate", "w1", "--to-version", "1"],
    "migrate --schema": ["migrate", "--schema"], "drain-report": ["drain-report"],
    "receipt": ["receipt", "eff_x"], "ambiguous": ["ambiguous"],
    "reconcile": ["reconcile", "eff_x", "--evidence", "seen", "--by", "ann"],
    "revoke": ["revoke", "g1", "--by", "ann"], "approve": ["approve", "w1", "--by", "ann", "--payload", "{}"],
    "db status": ["db", "status"], "db upgrade": ["db", "upgrade"], "breaker list": ["breaker", "list"],
    "breaker reset": ["breaker", "reset", "t"], "watchdog": ["watchdog"], "roles": ["roles"],
    "queue set": ["queue", "set", "q1", "--concurrency", "2"], "queue list": ["queue", "list"],
    "schedule create": ["schedule", "create", "s-role", "echo", "--every", "5m"],
    "schedule list": ["schedule", "list"], "operator list": ["operator", "list"],
    "operator disable": ["operator", "disable", "bob"],
}  # fmt: skip
"""Every verb that reaches the database and returns (worker and console serve until stopped)."""
DENIED = {
    "signal": {"worker", "auditor"}, "approve": {"worker", "auditor"},
    "revoke": {"worker", "auditor"}, "reconcile": {"worker", "auditor"},
    "queue set": {"worker", "auditor"}, "breaker reset": {"auditor"}, "start": {"auditor"},
    "roles": {"worker", "operator", "auditor"}, "operator disable": {"worker", "operator", "auditor"},
}  # fmt: skip
"""Verbs a role is refused whatever ran before: permission denied, exit 2, naming the login."""


def _role_database(dsn: str) -> dict[str, str]:
    with db.connect(dsn) as conn:
        db.apply_roles(conn, {user: role for role, user in ROLE_LOGINS.items()})
    with Runtime(dsn) as rt:
        rt.start("echo", "w2", {})
    return {role: make_conninfo(**{**conninfo_to_dict(dsn), "user": user})
            for role, user in ROLE_LOGINS.items()}  # fmt: skip


def _check_refusal(fig: Counter, argv: list, proc: subprocess.CompletedProcess, changed: int,
                   login: str | None = None, denied: bool = False) -> None:  # fmt: skip
    """The contract of a CLI case under a role or a fault (the figures are counted first)."""
    err = proc.stderr.decode("utf-8", "replace")
    fig["cases"] += 1
    fig["tracebacks"] += "Traceback" in err
    refused = proc.returncode != 0
    fig["refused"] += refused
    fig["changed rows"] += changed if refused else 0
    fig["permission denied"] += "permission denied" in err
    assert "Traceback" not in err, (argv, err[-2000:])
    if denied:
        assert proc.returncode == 2 and "permission denied" in err, (argv, proc.returncode, err)
    if refused:
        lines = err.strip().splitlines()
        assert proc.returncode in (1, 2, 3), (argv, proc.returncode, err)
        assert len(lines) == 1 and lines[0].startswith("interlock"), (argv, lines)
        assert changed == 0, (argv, "changed rows", changed)
    if "permission denied" in err:
        assert proc.returncode == 2 and f"'{login}'" in err, (argv, err)


def test_fuzz_cli_roles(dsn) -> None:
    """Each role x each verb, seeded (ILR_HYPOTHESIS_SEED); the login is the case's DSN."""
    fig = _figures("cli roles")
    _seed_database(dsn)
    dsns = _role_database(dsn)

    @seed(FUZZ_SEED)
    @settings(max_examples=FUZZ_ROLES, deadline=None, suppress_health_check=list(HealthCheck))
    @given(role=st.sampled_from(sorted(ROLE_LOGINS)), verb=st.sampled_from(sorted(ROLE_VERBS)))
    def check(role: str, verb: str) -> None:
        argv = ROLE_VERBS[verb]
        with db.connect(dsn) as conn:
            before = _snapshot(conn)
            try:
                proc = _run_cli(dsn, argv, dsns[role], _time_limit())
            except subprocess.TimeoutExpired:
                fig["hangs"] += 1
                raise AssertionError(f"interlock {argv!r} as {role} hung") from None
            changed = _changed(before, _snapshot(conn))
        _check_refusal(fig, [role, *argv], proc, changed, ROLE_LOGINS[role],
                       denied=role in DENIED.get(verb, ()))  # fmt: skip

    for role, verbs in sorted(
        {r: [v for v in DENIED if r in DENIED[v]] for r in ROLE_LOGINS}.items()
    ):
        for verb in verbs:  # every refusal the roles promise, in every run
            check = example(role=role, verb=verb)(check)
    check()


API_CALLS = {
    "ambiguous": lambda rt: rt.ambiguous(), "approve": lambda rt: rt.approve("w1", {}, by="ann"),
    "breakers": lambda rt: rt.breakers(), "cancel": lambda rt: rt.cancel("w2", by="ann"),
    "claim_history": lambda rt: rt.claim_history("w1"),
    "create_schedule": lambda rt: rt.create_schedule("s-api", "echo", every=300),
    "delete_schedule": lambda rt: rt.delete_schedule("s-api"),
    "deployments": lambda rt: rt.deployments(), "describe": lambda rt: rt.describe("w1"),
    "describe_queue": lambda rt: rt.describe_queue("default"),
    "describe_schedule": lambda rt: rt.describe_schedule("s-api"),
    "drain_report": lambda rt: rt.drain_report(), "effects": lambda rt: rt.effects("w1"),
    "fork": lambda rt: rt.fork("w1", 1, "w-fork"),
    "grant": lambda rt: rt.grant("agent", "refund", by="ann"), "list": lambda rt: rt.list(),
    "migrate": lambda rt: rt.migrate("w1", "1"),
    "pause_schedule": lambda rt: rt.pause_schedule("s-api"), "query": lambda rt: rt.query("w1"),
    "queue": lambda rt: rt.queue("q1", concurrency=2), "queues": lambda rt: rt.queues(),
    "receipt": lambda rt: rt.receipt("eff_x"),
    "reconcile": lambda rt: rt.reconcile("eff_x", "seen", by="ann"),
    "recover_orphans": lambda rt: rt.recover_orphans({}),
    "register": lambda rt: rt.register(flows.echo), "reset_breaker": lambda rt: rt.reset_breaker("t"),
    "result": lambda rt: rt.result("w1", timeout=0), "result_now": lambda rt: rt.result_now("w1"),
    "resume_schedule": lambda rt: rt.resume_schedule("s-api"),
    "revoke": lambda rt: rt.revoke("g1", by="ann"), "schedules": lambda rt: rt.schedules(),
    "signal": lambda rt: rt.signal("w1", "go"), "start": lambda rt: rt.start("echo", "w-api"),
    "status_record": lambda rt: rt.status_record("w1"),
    "trigger_schedule": lambda rt: rt.trigger_schedule("s-api"),
}  # fmt: skip
"""A call of each public method of Runtime that reaches the database (handle reads nothing)."""
API_DENIED = {"approve": {"worker", "auditor"}, "signal": {"worker", "auditor"},
              "revoke": {"worker", "auditor"}, "grant": {"worker", "auditor"},
              "queue": {"worker", "auditor"}, "start": {"auditor"}, "register": {"auditor"},
              "create_schedule": {"worker", "auditor"}}  # fmt: skip


def test_fuzz_api_roles(dsn) -> None:
    """Each role x each public method, through Runtime and AsyncRuntime, seeded: a refusal is a
    documented InterlockError (or result's TimeoutError) on one line and changes no row."""
    from interlock_runtime import AsyncRuntime, InterlockError
    from interlock_runtime.errors import PermissionDenied

    fig = _figures("api roles")
    _seed_database(dsn)
    dsns = _role_database(dsn)
    clients = {role: Runtime(d) for role, d in dsns.items()}

    def via_async(role: str, call):
        async def main() -> None:
            async with AsyncRuntime(dsns[role]) as art:
                await asyncio.to_thread(call, await art.runtime())
                await art.list()

        asyncio.run(main())

    @seed(FUZZ_SEED)
    @settings(max_examples=FUZZ_ROLES, deadline=None, suppress_health_check=list(HealthCheck))
    @given(role=st.sampled_from(sorted(ROLE_LOGINS)), method=st.sampled_from(sorted(API_CALLS)),
           client=st.sampled_from(["sync", "async"]))  # fmt: skip
    def check(role: str, method: str, client: str) -> None:
        call = API_CALLS[method]
        with db.connect(dsn) as conn:
            before = _snapshot(conn)
            if client == "sync":
                done, exc = _within(_time_limit(), lambda: call(clients[role]))
            else:
                done, exc = _within(_time_limit(), lambda: via_async(role, call))
            changed = _changed(before, _snapshot(conn))
        fig["cases"] += 1
        fig["hangs"] += not done
        assert done, (role, method, client, "hung")
        documented = exc is None or isinstance(exc, InterlockError | TimeoutError)
        fig["tracebacks"] += not documented
        assert documented, (role, method, client, repr(exc))
        if exc is not None:
            fig["refused"] += 1
            fig["changed rows"] += changed
            assert "\n" not in str(exc) and changed == 0, (role, method, str(exc), changed)
        if role in API_DENIED.get(method, ()):
            assert isinstance(exc, PermissionDenied), (role, method, repr(exc))
            assert f"'{ROLE_LOGINS[role]}'" in str(exc) and f"rt.{method} needs" in str(exc)

    try:
        for method, roles in sorted(API_DENIED.items()):
            for role in sorted(roles):
                check = example(role=role, method=method, client="sync")(check)
        check()
    finally:
        for rt in clients.values():
            rt.close()


FAULT_VERBS = ["list", "describe", "query", "result", "start", "signal", "cancel", "fork",
               "migrate", "drain-report", "receipt", "reconcile", "revoke", "approve",
               "breaker list", "breaker reset", "watchdog", "queue set", "queue list",
               "schedule create", "schedule list"]  # fmt: skip
GOES_ON = {"list", "describe", "query", "start", "migrate", "drain-report", "receipt",
           "breaker list", "breaker reset", "schedule list"}  # fmt: skip
"""Verbs whose client call is safe to repeat (db_faults.SAFE_TO_REPEAT): struck by a fault, they
reconnect and go on (exit 0, or 1 for a refusal), never exit 2."""
FAULT_APP = "ilr-fuzz-fault"


def _lock_everything(holder: psycopg.Connection) -> None:
    """Every ilr table but the schema's version, locked in the holder's open transaction: a verb
    that touches one waits, so its backend is busy when the fault strikes."""
    tables = [r["tablename"] for r in holder.execute(
        "select tablename from pg_tables where schemaname = 'ilr' and tablename <> "
        "'schema_version' order by tablename")]  # fmt: skip
    holder.execute(sql.SQL("lock table {} in access exclusive mode").format(
        sql.SQL(", ").join(sql.Identifier("ilr", t) for t in tables)))  # fmt: skip


def _waiting_backend(admin: psycopg.Connection) -> int | None:
    row = admin.execute("select pid from pg_stat_activity where application_name = %s and "
                        "wait_event_type = 'Lock'", (FAULT_APP,)).fetchone()  # fmt: skip
    return None if row is None else row["pid"]


@pytest.mark.exclusive  # restarts the cluster: every other test would see it
def test_fuzz_cli_faults(dsn, capsys) -> None:
    """A verb waiting on a lock when its backend is terminated or the server restarts, seeded
    (ILR_HYPOTHESIS_SEED). It goes on (exit 0: a safe call repeated) or stops with one line;
    a stopped one changed no row. Then the figures of this axis are printed."""
    from interlock_runtime import local_postgres

    fig = _figures("cli faults")
    _seed_database(dsn)
    with Runtime(dsn) as rt:
        rt.start("echo", "w2", {})
    env = dict(os.environ, PGAPPNAME=FAULT_APP,
               PYTHONPATH=os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")]))  # fmt: skip

    @seed(FUZZ_SEED)
    @settings(max_examples=FUZZ_FAULTS, deadline=None, suppress_health_check=list(HealthCheck))
    @given(fault=st.sampled_from(["terminate", "restart"]), verb=st.sampled_from(FAULT_VERBS))
    def check(fault: str, verb: str) -> None:
        argv = ROLE_VERBS[verb]
        with db.connect(dsn) as conn:
            before = _snapshot(conn)
        holder = db.connect(dsn)
        holder.execute("begin")
        _lock_everything(holder)
        proc = subprocess.Popen([sys.executable, "-m", "interlock_runtime.cli", *argv, "--dsn", dsn],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, cwd=TESTS)  # fmt: skip
        with db.connect(dsn) as admin:
            deadline = time.monotonic() + 20
            while proc.poll() is None and _waiting_backend(admin) is None:
                assert time.monotonic() < deadline, f"{argv} neither waited nor ended"
                time.sleep(0.02)
            pid = _waiting_backend(admin)
            if pid is not None and fault == "terminate":
                admin.execute("select pg_terminate_backend(%s)", (pid,))
        fig[f"{fault} struck"] += pid is not None
        if pid is not None and fault == "restart":
            local_postgres.restart_immediate()  # the holder's lock goes with it
        else:
            holder.execute("rollback")
        holder.close()
        try:
            out, err = proc.communicate(timeout=_time_limit() + 30)
        except subprocess.TimeoutExpired:
            proc.kill()
            fig["hangs"] += 1
            raise AssertionError(f"interlock {argv!r} hung after a {fault}") from None
        with db.connect(dsn) as conn:
            changed = _changed(before, _snapshot(conn))
        done = subprocess.CompletedProcess(proc.args, proc.returncode, out, err)
        fig[f"{fault}: exit {proc.returncode}"] += 1
        if os.environ.get("ILR_FUZZ_VERBOSE"):
            print(fault, argv, proc.returncode, err.decode("utf-8", "replace").strip()[:300])
        _check_refusal(fig, [fault, *argv], done, changed)
        if pid is not None and verb in GOES_ON:
            assert proc.returncode in (0, 1), (fault, argv, proc.returncode, err[-1000:])

    check()
    with capsys.disabled():
        print(f"\ndatabase-fault fuzz (hypothesis seed {FUZZ_SEED}, rerun with "
              f"ILR_HYPOTHESIS_SEED={FUZZ_SEED}; ILR_FUZZ_FAULT_EXAMPLES={FUZZ_FAULTS}): {dict(fig)}")  # fmt: skip
    assert fig["tracebacks"] == fig["hangs"] == fig["changed rows"] == 0, fig


def test_fuzz_figures(capsys) -> None:
    """Print what the fuzz tests above ran (they run first, in file order)."""
    with capsys.disabled():
        print(f"\nhostile-input fuzz (hypothesis seed {FUZZ_SEED}, rerun with "
              f"ILR_HYPOTHESIS_SEED={FUZZ_SEED}; ILR_FUZZ_EXAMPLES={FUZZ_CLI} CLI "
              f"cases per class, {FUZZ_API} API):")  # fmt: skip
        for name in sorted(FIGURES):
            f = FIGURES[name]
            print(f"  {name:<12} cases {f['cases']:>4}  refused {f['refused']:>4}  tracebacks "
                  f"{f['tracebacks']}  hangs {f['hangs']}  changed rows {f['changed rows']}")  # fmt: skip
    for name, f in FIGURES.items():
        assert f["tracebacks"] == f["hangs"] == f["changed rows"] == 0, (name, f)
