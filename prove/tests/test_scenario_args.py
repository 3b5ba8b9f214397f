"""Every timeline argument is range-checked when the scenario loads (prove/scenario.py's
ACTIONS), so a scenario that validates cannot fail at run time on an argument: each value is
checked as every variant and system family will run it, and against the steps before it."""

from __future__ import annotations

import inspect
import textwrap
from pathlib import Path

import pytest

from prove.runner import Run
from prove.scenario import ACTIONS, ScenarioError, load

HEAD = textwrap.dedent("""\
    id: S99
    title: argument checks
    description: one action under test
    tiers: [1]
    systems: [runtime, temporal_idem]
    claims: []
    seeds: {quick: 1, full: 1}
    servers: private
    params: {pause: 2}
    variants:
      - name: base
      - name: other
        params: {pause: -1}
    oracle:
      require: {agent_applications: {le: 1}}
    predicted: []
    invariants: []
    timeline:
      - workers: {via_proxy: true, stop_at: claimed}
      - start:
    """)


def _file(tmp_path: Path, *steps: str, head: str = HEAD) -> Path:
    path = tmp_path / "S99.yaml"
    path.write_text(head + "".join(f"  - {s}\n" for s in steps))
    return path


def _valid(action: str) -> dict:
    spec = ACTIONS[action]
    if action == "partition":
        return {"after": 1, "until": 2}
    return {k: spec.args[k].get("minimum", 0) for k in spec.required}


def _yaml(args: dict) -> str:
    return "{" + ", ".join(f"{k}: {v}" for k, v in args.items()) + "}" if args else ""


def test_every_action_takes_exactly_what_its_runner_method_takes() -> None:
    """A runner argument without a schema would go unchecked: ACTIONS and Run.a_<name> agree,
    and an argument the runner cannot do without is required."""
    for name, spec in ACTIONS.items():
        params = dict(inspect.signature(getattr(Run, f"a_{name}")).parameters)
        params.pop("self")
        assert set(params) == set(spec.args), name
        no_default = {k for k, p in params.items() if p.default is inspect.Parameter.empty}
        assert no_default == set(spec.required), name


@pytest.mark.parametrize(("action", "arg"), [(a, k) for a, s in ACTIONS.items()
                                              for k, v in s.args.items() if "minimum" in v])  # fmt: skip
def test_a_value_below_its_minimum_is_refused_at_load(tmp_path, action, arg) -> None:
    args = _valid(action)
    load(_file(tmp_path, f"{action}: {_yaml(args)}"))  # the valid form loads
    low = ACTIONS[action].args[arg]["minimum"] - 1
    if ACTIONS[action].args[arg]["type"] == "number":
        low = ACTIONS[action].args[arg]["minimum"] - 0.5
    with pytest.raises(ScenarioError) as e:
        load(_file(tmp_path, f"{action}: {_yaml({**args, arg: low})}"))
    assert e.value.where.startswith(f"timeline[2].{action}"), str(e.value)
    assert "must be" in e.value.msg or "before" in e.value.msg or "after" in e.value.msg


@pytest.mark.parametrize(
    ("steps", "where", "expected"),
    [
        (["sleep: {seconds: -4}"], "timeline[2].sleep.seconds", "must be a number >= 0"),
        (["sleep:"], "timeline[2].sleep", "sleep needs seconds"),
        (["sleep: {secs: 3}"], "timeline[2].sleep", "'seconds' is required"),
        (["restart: {count: 0}"], "timeline[2].restart.count", "an integer >= 1"),
        (["restart: {count: 2.5}"], "timeline[2].restart.count", "an integer >= 1"),
        (["approve: {amount: 0}"], "timeline[2].approve.amount", "an integer >= 1"),
        (["target_delay: {count: 2}"], "timeline[2].target_delay", "'ms' is required"),
        (["redecide: {\"on\": 3}"], "timeline[2].redecide.on", "true or false"),
        # a $param checked as each variant resolves it
        (["sleep: {seconds: $pause}"], "timeline[2].sleep.seconds",
         "not -1 (variant other, runtime)"),
        # a per-family value that leaves a required argument out for the other family
        (["sleep: {seconds: {runtime: 1}}"], "timeline[2].sleep.seconds",
         "sleep needs seconds; it has no value (variant base, temporal)"),
        (["partition: {after: 3, until: 2}"], "timeline[2].partition.until",
         "until (2) must be after after (3)"),
        (["partition: {after: 1, until: 500}"], "timeline[2].partition.until",
         "beyond the run: run_timeout is 120 s"),
        (["wait_stopped: {resume_after: 121}"], "timeline[2].wait_stopped.resume_after",
         "beyond the run"),
        (["resume: {after: 500}"], "timeline[2].resume.after", "beyond the run"),
    ],
)  # fmt: skip
def test_bad_arguments_name_the_step_and_the_rule(tmp_path, steps, where, expected) -> None:
    with pytest.raises(ScenarioError) as e:
        load(_file(tmp_path, *steps))
    assert e.value.where == where and expected in e.value.msg, str(e.value)


def test_steps_that_need_an_earlier_step_or_a_private_server(tmp_path) -> None:
    plain = HEAD.replace("  - workers: {via_proxy: true, stop_at: claimed}\n", "  - workers:\n")
    for step, expected in (("partition: {after: 1, until: 2}", "via_proxy: true"),
                           ("wait_stopped:", "stop_at")):  # fmt: skip
        with pytest.raises(ScenarioError, match=expected):
            load(_file(tmp_path, step, head=plain))
    with pytest.raises(ScenarioError, match="servers: private"):
        load(_file(tmp_path, "server_restart:", head=HEAD.replace("servers: private\n", "")))


def test_a_file_kept_in_a_pack_is_read_as_it_ran(tmp_path) -> None:
    """The report renders committed raw data from the scenario files as they were run: one
    from before `claims:` or before an argument check still loads, as_run (and only so)."""
    old = _file(tmp_path, "sleep: {seconds: -4}", head=HEAD.replace("claims: []\n", ""))
    scn = load(old, as_run=True)
    assert scn.claims is None
    with pytest.raises(ScenarioError, match="'claims' is required"):
        load(old)
