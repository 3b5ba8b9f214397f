"""Fewer commits, same guarantees: a step's record is deferred to the next write, so a
workflow that returns right after its last step commits both in one transaction (issue 9).

The deferral must be invisible: the step's first-run value is what a replay returns, a kill
right after the record still finds it committed, and the completion carries it."""

from __future__ import annotations

import json
import signal

import flows
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from interlock_runtime import Runtime, db, stored
from interlock_runtime.testing import read_jsonl


def _xmins(dsn: str, wf: str) -> tuple[list[int], int]:
    with db.connect(dsn) as c:
        steps = c.execute(
            "select xmin::text::bigint as x from ilr.steps where workflow_id = %s order by seq",
            (wf,),
        ).fetchall()
        row = c.execute(
            "select xmin::text::bigint as x, status from ilr.workflows where id = %s", (wf,)
        ).fetchone()
    assert row["status"] == "completed"
    return [s["x"] for s in steps], row["x"]


def test_last_step_and_completion_commit_together(dsn, workers) -> None:
    with Runtime(dsn) as rt:
        rt.start(flows.echo, "wf-one", {"v": 1})
        workers("W")
        assert rt.result("wf-one", timeout=30) == {"v": 1}
    steps, workflow = _xmins(dsn, "wf-one")
    assert steps == [workflow]  # one transaction wrote the step and the completion


def test_earlier_steps_commit_before_the_next_body_runs(dsn, workers, tmp_path) -> None:
    log = tmp_path / "inv.jsonl"
    with Runtime(dsn) as rt:
        rt.start(flows.three_steps, "wf-three", {"log": str(log)})
        workers("W")
        assert len(rt.result("wf-three", timeout=30)) == 3
    steps, workflow = _xmins(dsn, "wf-three")
    # s1 and s2 each committed on their own (before s2's and s3's bodies ran); s3 with the end.
    assert len(set(steps)) == 3 and steps[2] == workflow and workflow not in steps[:2]


def test_a_step_before_a_decide_commits_with_the_model_call_log(dsn, workers) -> None:
    with Runtime(dsn) as rt:
        rt.start(flows.load_then_decide, "wf-ld", {"case": "c1"})
        workers("W")
        assert rt.result("wf-ld", timeout=30) == {"amount": 2000}
    steps, workflow = _xmins(dsn, "wf-ld")
    with db.connect(dsn) as c:
        logged = c.execute("select xmin::text::bigint as x from ilr.llm_calls").fetchall()
    # load + the call log in one commit; the decide's record with the completion
    assert [r["x"] for r in logged] == [steps[0]] and steps[1] == workflow != steps[0]


def test_first_run_sees_exactly_what_a_replay_sees(dsn, workers) -> None:
    value = {"big": 1e16, "b": 1.5, "aa": [1.0, 2e-7]}
    with Runtime(dsn) as rt:
        rt.start(flows.stored_echo, "wf-stored", value)
        workers("W")
        first = rt.result("wf-stored", timeout=30)
        replayed = rt.describe("wf-stored")["steps"][0]["output"]
    # jsonb orders keys shortest first and prints 1e16 as an integer
    assert first["keys"] == list(replayed) == ["b", "aa", "big"]
    assert first["types"] == {k: type(v).__name__ for k, v in replayed.items()}
    assert first["types"]["big"] == "int"


def test_kill_after_a_merged_record_leaves_it_committed(dsn, workers, tmp_path) -> None:
    log = tmp_path / "inv.jsonl"
    with Runtime(dsn) as rt:
        rt.start(flows.three_steps, "wf-k3", {"log": str(log)})
        killed = workers("K", env={"ILR_KILL_AT": "step_after_record@3"}, lease_ttl=1.5)
        assert killed.proc.wait(timeout=30) == -signal.SIGKILL
        # the kill came after the commit of s3 and the completion: nothing runs again
        assert [r["worker"] for r in rt.result("wf-k3", timeout=5)] == ["K", "K", "K"]
    assert [i["step"] for i in read_jsonl(log)] == ["s1", "s2", "s3"]


text = st.text(
    st.characters(exclude_categories=("Cs",), exclude_characters="\x00"), max_size=5
)  # jsonb refuses both
json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(10**20), 10**20) | text
    | st.floats(allow_nan=False, allow_infinity=False),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(text, inner, max_size=3),
    max_leaves=8,
)  # fmt: skip


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(value=json_values)
def test_as_stored_matches_a_jsonb_round_trip(conn, value) -> None:
    value = json.loads(stored.to_json_text(value, "value"))  # as the step hands it over
    through = conn.execute("select %s::jsonb as v", (db.jsonb(value),)).fetchone()["v"]
    got = db.as_stored(conn, value)
    # type-exact: 1 and 1.0 differ, and key order matters
    assert json.dumps(got) == json.dumps(through)
