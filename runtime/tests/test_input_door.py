"""Typed inputs checked at the door (docs/typed.md#checked-at-the-door): a start whose input
does not fit the workflow's declared input type is refused with one line before anything is
written, by the sync client, the async client and `interlock start` alike; against the class
when the caller has the function, against the description its deployment stored otherwise.
"Nothing written" is read from the database itself."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import uuid
from typing import Any

import door_flows as df
import pytest

from conftest import TESTS, wait_for
from interlock_runtime import AsyncRuntime, Runtime, cli, codec
from interlock_runtime.errors import InvalidInput

BY_NAME = ["sync", "async", "cli"]
BY_FUNCTION = ["sync", "async"]

POST = {
    "id": "p-1",
    "topic": {"tags": ["a", "b"], "weights": {"a": 0.5}},
    "tone": "dry",
    "at": "2026-03-01T09:30:00+00:00",
    "day": "2026-03-01",
    "price": "12.30",
    "ref": str(uuid.UUID(int=7)),
    "kind": "news",
    "pinned": True,
}
AUTHOR = {"name": "ann", "age": 41, "tags": ["x"]}


def _with(base: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    """A deep copy of base with the field at dotted `path` set (value None in a list: kept)."""
    doc = json.loads(json.dumps(base))
    *parents, last = path.split(".")
    target = doc
    for part in parents:
        target = target[int(part)] if isinstance(target, list) else target[part]
    if isinstance(target, list):
        target[int(last)] = value
    elif value is _DROP:
        del target[last]
    else:
        target[last] = value
    return doc


_DROP = object()

# (workflow, input, the refusal's words): each must be refused, naming the field.
REFUSED = [
    pytest.param(
        "announce", {"id": 7, "topic": ["a"]}, "id: expected str, got int", id="the-new-users-case"
    ),
    pytest.param(
        "announce",
        {"id": "a-1", "topic": ["a"]},
        "topic: expected str, got list",
        id="a-list-for-a-str",
    ),
    pytest.param("announce", {"id": "a-1"}, "topic: missing", id="missing-field"),
    pytest.param(
        "announce",
        {"id": "a-1", "topic": "t", "tpoic": "t"},
        "tpoic: unknown field",
        id="unknown-field",
    ),
    pytest.param(
        "announce", {"id": None, "topic": "t"}, "id: expected str, got None", id="none-for-a-str"
    ),
    pytest.param("announce", None, "the input: expected Topic, got None", id="no-input"),
    pytest.param("announce", [1, 2], "the input: expected Topic, got list", id="a-list"),
    pytest.param(
        "publish",
        _with(POST, "topic.tags.1", 2),
        "topic.tags[1]: expected str, got int",
        id="nested-list-item",
    ),
    pytest.param(
        "publish",
        _with(POST, "topic.weights", {"a": "heavy"}),
        "topic.weights.a: expected float, got str",
        id="nested-dict-value",
    ),
    pytest.param(
        "publish",
        _with(POST, "topic.colour", "red"),
        "topic.colour: unknown field",
        id="nested-unknown-field",
    ),
    pytest.param(
        "publish",
        _with(POST, "topic.tags", _DROP),
        "topic.tags: missing",
        id="nested-missing-field",
    ),
    pytest.param(
        "publish",
        _with(POST, "reply_to", {"tags": [None]}),
        "reply_to.tags[0]: expected str, got None",
        id="inside-an-optional",
    ),
    pytest.param(
        "publish", _with(POST, "tone", "hot"), "tone: expected one of 'dry', 'warm'", id="enum"
    ),
    pytest.param(
        "publish", _with(POST, "kind", "memo"), "kind: expected one of 'news', 'note'", id="literal"
    ),
    pytest.param(
        "publish",
        _with(POST, "at", "yesterday"),
        "at: 'yesterday' is not a datetime",
        id="datetime",
    ),
    pytest.param("publish", _with(POST, "day", 20260301), "day: expected str, got int", id="date"),
    pytest.param(
        "publish", _with(POST, "price", "NaN"), "price: 'NaN' is not a decimal", id="decimal"
    ),
    pytest.param(
        "publish", _with(POST, "ref", "not-a-uuid"), "ref: 'not-a-uuid' is not a UUID", id="uuid"
    ),
    pytest.param(
        "publish",
        _with(POST, "pinned", 1),
        "pinned: expected bool, got int",
        id="an-int-for-a-bool",
    ),
    pytest.param(
        "publish", _with(POST, "span", [1, 2, 3]), "span: at most 2 items", id="tuple-length"
    ),
    pytest.param(
        "profile",
        {"name": "ann", "age": "old"},
        "age: expected int, got str",
        id="pydantic-wrong-type",
    ),
    pytest.param("profile", {"name": "ann"}, "age: missing", id="pydantic-missing"),
    pytest.param(
        "profile",
        {**AUTHOR, "role": "x"},
        "role: unknown field",
        id="pydantic-unknown-field-forbidden",
    ),
    pytest.param(
        "profile",
        {**AUTHOR, "tags": ["x", 2]},
        "tags[1]: expected str, got int",
        id="pydantic-nested",
    ),
    pytest.param("profile", {**AUTHOR, "since": "soon"}, "since: ", id="pydantic-optional-date"),
]

FLOWS = {
    "announce": df.announce,
    "publish": df.publish,
    "profile": df.profile,
    "untyped": df.untyped,
}


@pytest.fixture
def deployed(dsn: str) -> str:
    """The door flows registered (what a worker's registration stores), by the client."""
    with Runtime(dsn) as rt:
        rt.register(*FLOWS.values())
    return dsn


def _start(
    how: str,
    dsn: str,
    workflow: Any,
    wf_id: str,
    value: Any,
    capsys: Any,
    text: str | None = None,
    **options: Any,
) -> str | None:
    """Start through one client; None when it started, else the refusal's one line."""
    if how == "cli":
        args = ["start", workflow, wf_id, "--input", json.dumps(value) if text is None else text]
        if "version" in options:
            args += ["--version", options["version"]]
        status = cli.main([*args, "--dsn", dsn])
        _, err = capsys.readouterr()
        if status == 0:
            return None
        assert status == 2 and err.count("\n") == 1, (status, err)
        return err.strip()
    try:
        if how == "sync":
            with Runtime(dsn) as rt:
                rt.start(workflow, wf_id, value, **options)
        else:

            async def start() -> None:
                async with AsyncRuntime(dsn) as rt:
                    await rt.start(workflow, wf_id, value, **options)

            asyncio.run(start())
    except InvalidInput as exc:
        assert "\n" not in str(exc), exc
        return str(exc)
    return None


def _nothing_written(conn: Any, wf_id: str) -> None:
    for table in ("ilr.workflows where id", "ilr.steps where workflow_id"):
        count = conn.execute(f"select count(*) as n from {table} = %s", (wf_id,)).fetchone()
        assert count["n"] == 0, (table, wf_id)


@pytest.mark.parametrize("how", BY_NAME)
@pytest.mark.parametrize(("name", "value", "words"), REFUSED)
def test_a_start_by_name_is_refused_against_the_stored_description(
    deployed, conn, capsys, how, name, value, words
) -> None:
    refusal = _start(how, deployed, name, "w-1", value, capsys)
    assert refusal is not None and words in refusal, refusal
    assert "nothing was started" in refusal
    _nothing_written(conn, "w-1")


@pytest.mark.parametrize("how", BY_FUNCTION)
@pytest.mark.parametrize(("name", "value", "words"), REFUSED)
def test_a_start_with_the_function_is_refused_before_any_round_trip(
    dsn, conn, capsys, how, name, value, words
) -> None:
    refusal = _start(how, dsn, FLOWS[name], "w-1", value, capsys)
    assert refusal is not None and words in refusal, refusal
    _nothing_written(conn, "w-1")
    registered = conn.execute("select count(*) as n from ilr.deployments").fetchone()["n"]
    assert registered == 0  # refused before rt.register's round trip


def test_the_function_checks_typed_values_and_the_models_own_validators(dsn, conn) -> None:
    with Runtime(dsn) as rt:
        with pytest.raises(InvalidInput, match=r"id: expected str, got int"):
            rt.start(df.announce, "t-1", df.Topic(7, ["a"]))  # type: ignore[arg-type]
        with pytest.raises(InvalidInput, match=r"name: Value error, a name is not blank"):
            rt.start(df.profile, "t-2", {"name": " ", "age": 3})
        rt.start(df.announce, "t-3", df.Topic("a-1", "news"))
        rt.start(df.profile, "t-4", df.Author(name="ann", age=41))
        rt.start(df.publish, "t-5", POST)
        rt.start(df.publish, "t-6", {**POST, "span": (1, 2), "topic": {"tags": ("a",)}})
    _nothing_written(conn, "t-1")
    _nothing_written(conn, "t-2")


@pytest.mark.parametrize("how", BY_NAME)
def test_fitting_inputs_start_and_untyped_workflows_are_not_checked(
    deployed, conn, capsys, how
) -> None:
    cases = [
        ("announce", {"id": "a-1", "topic": "news"}),
        ("publish", {**POST, "reply_to": None, "span": [1, 2]}),
        ("profile", {**AUTHOR, "since": "2020-01-02"}),
        ("untyped", {"anything": [1, "goes"]}),
    ]
    for i, (name, value) in enumerate(cases):
        assert _start(how, deployed, name, f"ok-{i}", value, capsys) is None
        row = conn.execute("select status from ilr.workflows where id = %s", (f"ok-{i}",))
        assert row.fetchone()["status"] == "pending"


HOSTILE = [
    pytest.param(float("nan"), "NaN", "NaN", id="nan"),
    pytest.param(10**5000, "1" * 5000, "digits", id="huge-int"),
    pytest.param(
        json.loads("[" * 200 + "]" * 200), "[" * 200 + "]" * 200, "levels deep", id="deep-nesting"
    ),
    pytest.param(
        {"id": 10**4000, "topic": "t"}, None, "id: expected str, got int", id="a-long-int-for-a-str"
    ),
    pytest.param(
        {"id": "a", "topic": {"a": {"b": {"c": [[[[[1]]]]]}}}},
        None,
        "topic: expected str, got dict",
        id="nested-for-a-str",
    ),
    pytest.param(
        {"id": "a", "topic": "t", "k" * 100_000: 1},
        None,
        "kkk... (100002 characters)]: unknown field",
        id="a-huge-unknown-field",
    ),
]


@pytest.mark.parametrize("how", BY_NAME)
@pytest.mark.parametrize(("value", "text", "words"), HOSTILE)
def test_hostile_inputs_get_one_line_never_a_traceback(
    deployed, conn, capsys, how, value, text, words
) -> None:
    if how == "cli" and text is None:
        text = json.dumps(value)
    refusal = _start(how, deployed, "announce", "h-1", value, capsys, text=text)
    assert refusal is not None and words in refusal, refusal
    assert "Traceback" not in refusal and len(refusal) < 1200
    _nothing_written(conn, "h-1")


@pytest.mark.parametrize("how", BY_NAME)
def test_an_older_workers_deployment_has_no_description_and_nothing_is_checked(
    deployed, conn, capsys, how
) -> None:
    conn.execute("update ilr.deployments set input_schema = null where name = 'announce'")
    assert _start(how, deployed, "announce", "old-1", {"id": 7, "topic": ["a"]}, capsys) is None
    row = conn.execute("select status from ilr.workflows where id = 'old-1'").fetchone()
    assert row["status"] == "pending"  # the worker's conversion is the only check left


@pytest.mark.parametrize("how", BY_NAME)
def test_awaiting_worker_is_not_checked_and_a_version_is_checked_against_its_own(
    dsn, conn, capsys, how
) -> None:
    # No deployment yet: there is no description to check against; the run awaits a worker.
    assert _start(how, dsn, "announce", "aw-1", {"id": 7}, capsys) is None
    row = conn.execute("select status from ilr.workflows where id = 'aw-1'").fetchone()
    assert row["status"] == "awaiting_worker"
    with Runtime(dsn) as rt:
        rt.register(df.announce, df.untyped)
    # version= names the deployment whose description is read: announce@1 checks, and a
    # version nobody deployed awaits a worker unchecked.
    refusal = _start(how, dsn, "announce", "v-1", {"id": 7}, capsys, version="1")
    assert refusal is not None and "topic: missing" in refusal
    _nothing_written(conn, "v-1")
    assert _start(how, dsn, "announce", "v-2", {"id": 7}, capsys, version="2") is None
    row = conn.execute("select status from ilr.workflows where id = 'v-2'").fetchone()
    assert row["status"] == "awaiting_worker"


def test_the_description_is_stored_at_registration_and_kept_when_unchanged(dsn, conn) -> None:
    from interlock_runtime import input_schema

    with Runtime(dsn) as rt:
        rt.register(df.announce, df.untyped)
        rows = {
            r["name"]: r
            for r in conn.execute("select name, input_schema from ilr.deployments").fetchall()
        }
        assert rows["untyped"]["input_schema"] is None  # no annotation: nothing to check
        stored = rows["announce"]["input_schema"]
        assert stored == input_schema.describe(codec.input_hint(df.announce))
        assert stored["$defs"]["door_flows:Topic"]["required"] == ["id", "topic"]
        rt.register(df.announce)  # a worker's restart writes nothing new
        again = conn.execute(
            "select xmin::text as x from ilr.deployments where name = 'announce'"
        ).fetchone()["x"]
        rt.register(df.announce)
        assert (
            conn.execute(
                "select xmin::text as x from ilr.deployments where name = 'announce'"
            ).fetchone()["x"]
            == again
        )


def test_a_malformed_stored_description_is_one_line(deployed, conn, capsys) -> None:
    conn.execute("""update ilr.deployments set input_schema = '{"$ref": "#/$defs/a", "$defs":
                    {"a": {"$ref": "#/$defs/a"}}}' where name = 'announce'""")
    refusal = _start("cli", deployed, "announce", "m-1", {"id": "a", "topic": "t"}, capsys)
    assert refusal is not None and "malformed" in refusal
    conn.execute("""update ilr.deployments set input_schema = '[1, "x"]'
                    where name = 'announce'""")
    assert _start("cli", deployed, "announce", "m-2", {"id": 7}, capsys) is None


@pytest.mark.slow
def test_the_new_users_case_end_to_end_with_a_worker(dsn, conn, workers) -> None:
    """A worker registers announce; `interlock start` (a process of its own) refuses the
    user's input with exit status 2 and one line; a fitting input runs to its result."""
    w = workers("W", module="door_flows", poll=0.1)
    wait_for(
        lambda: conn.execute("select 1 from ilr.deployments where name = 'announce'").fetchone(),
        30,
        "the registration",
    )

    def interlock(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "interlock_runtime.cli", *args, "--dsn", dsn],
            capture_output=True,
            text=True,
            timeout=60,
            cwd=TESTS,
        )

    bad = interlock("start", "announce", "news-1", "--input", '{"id": 7, "topic": ["a"]}')
    assert bad.returncode == 2, bad
    assert bad.stderr.count("\n") == 1 and "id: expected str, got int" in bad.stderr, bad.stderr
    _nothing_written(conn, "news-1")
    good = interlock("start", "announce", "news-2", "--input", '{"id": "7", "topic": "a"}')
    assert good.returncode == 0, good.stderr
    with Runtime(dsn) as rt:
        assert rt.result("news-2", timeout=30) == "7: a"
    w.close()


# -- the description and its check alone (no database) ---------------------------------------


def _refusal(hint: Any, value: Any) -> str | None:
    from interlock_runtime import input_schema

    try:
        input_schema.check_local(hint, codec.encode(value), "w")
    except InvalidInput as exc:
        return str(exc)
    return None


def test_self_referring_and_mixed_types_are_described_and_checked() -> None:
    deep = df.Thread("a", [df.Thread("b", [df.Thread("c")])])
    assert _refusal(df.Thread, deep) is None
    bad = {"text": "a", "replies": [{"text": "b", "replies": [{"text": 3}]}]}
    assert "replies[0].replies[0].text: expected str, got int" in (_refusal(df.Thread, bad) or "")
    node = {"name": "r", "children": [{"name": "c", "children": [{"name": None}]}]}
    assert "node.children[0].children[0].name: expected str, got None" in (
        _refusal(df.Mixed, {"node": node}) or ""
    )
    assert _refusal(df.Mixed, df.Mixed(df.Node(name="r"), df.Thread("t"))) is None
    assert _refusal(df.Post, {**POST, "span": (1, 2)}) is None  # a tuple is a JSON array


def test_a_stored_description_that_is_not_one_is_not_obeyed_blindly() -> None:
    from interlock_runtime import input_schema

    loop = {"$ref": "#/$defs/a", "$defs": {"a": {"$ref": "#/$defs/a"}}}
    with pytest.raises(InvalidInput, match="malformed"):
        input_schema.check(loop, {}, "w")
    for junk in ([1], "x", None, {"type": 7}, {"properties": [1]}, {"anyOf": "x"}):
        input_schema.check(junk, {"a": 1}, "w")  # nothing it knows: nothing refused


def test_a_typed_start_by_name_is_one_round_trip_once_its_description_is_known(
    deployed, conn, tmp_path
) -> None:
    """The first start by name reads the description in its transaction; the next ones check
    against it and send its md5 with the one-statement start, which inserts only if the
    deployment still holds it. A description changed since is read again, both ways."""
    from psycopg import pq

    with Runtime(deployed) as rt:
        rt.start("announce", "r-0", {"id": "a", "topic": "t"})
        trace = tmp_path / "start.trace"
        with open(trace, "w") as f:
            rt._conn.pgconn.trace(f.fileno())
            rt._conn.pgconn.set_trace_flags(pq.Trace.SUPPRESS_TIMESTAMPS)
            rt.start("announce", "r-1", {"id": "b", "topic": "t"})
            rt._conn.pgconn.untrace()
        ready = [line for line in trace.read_text().splitlines() if "\tReadyForQuery" in line]
        assert len(ready) == 1, trace.read_text()
        # The deployment's description changes under the client: `id` becomes an int.
        conn.execute("""update ilr.deployments set input_schema = jsonb_set(input_schema,
                        '{$defs,door_flows:Topic,properties,id}', '{"type": "integer"}')
                        where name = 'announce'""")
        with pytest.raises(InvalidInput, match="id: expected int, got str"):
            rt.start("announce", "r-2", {"id": "c", "topic": "t"})  # remembered: a str fits
        _nothing_written(conn, "r-2")
        rt.start("announce", "r-3", {"id": 3, "topic": "t"})  # remembered: an int is refused
    statuses = conn.execute("select id, status from ilr.workflows order by id").fetchall()
    assert [(r["id"], r["status"]) for r in statuses] == [
        ("r-0", "pending"),
        ("r-1", "pending"),
        ("r-3", "pending"),
    ]
