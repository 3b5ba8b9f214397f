"""scenarios/README.md's actions, kill-point and claims tables are what prove/scenario_docs.py
generates today from prove.scenario.ACTIONS, interlock_runtime.killpoints and the claims."""

from __future__ import annotations

import difflib

import pytest

from prove import scenario_docs
from prove.scenario import ACTIONS


def test_the_scenario_guide_tables_are_generated_from_the_code() -> None:
    current = scenario_docs.README.read_text()
    want = scenario_docs.render(current)
    diff = "".join(difflib.unified_diff(current.splitlines(True), want.splitlines(True),
                                        "scenarios/README.md", "generated"))  # fmt: skip
    if diff:
        pytest.fail(f"run `python -m prove.scenario_docs`\n{diff}", False)


def test_every_action_and_kill_point_is_in_the_guide() -> None:
    text = scenario_docs.README.read_text()
    for name in ACTIONS:
        assert f"| `{name}` |" in text, name
    for point in scenario_docs.POINTS:
        assert f"| `{point}` |" in text, point
    assert scenario_docs.main(["--check"]) == 0


def test_a_kill_point_without_a_sentence_stops_the_generator(monkeypatch) -> None:
    monkeypatch.setattr(scenario_docs, "POINTS", (*scenario_docs.POINTS, "new_point"))
    with pytest.raises(SystemExit, match="new_point"):
        scenario_docs.kill_points_table()
