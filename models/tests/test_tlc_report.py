"""The TLC report of models/tlc.py: provenance (commit and dirty flag), distinct states per
exploration (never summed), spec size beside checked size, and the command it names.  Fast: a
synthetic result document, no TLC."""

from __future__ import annotations

import subprocess

from models import tlc
from world import gitstate


def _config(name: str, runs: list[tuple[str, list[str], int]], **kw) -> dict:
    base = {
        "name": name, "spec": "Runtime", "mode": "interlock", "tier": "t2",
        "events": ["revoke", "cancel"], "toggles": [], "broken": None, "kind": "safety",
        "constants": {"MaxClock": 6, "LeaseTTL": 2, "SendTimeout": 1, "SettleMargin": 1,
                      "DedupAge": 3, "MaxCrashes": 1},
        "why": "", "invariants": {}, "witnesses": {}, "errors": [], "tlc_version": "TLC2",
        "runs": [{"purpose": p, "properties": props, "distinct": d, "depth": 9, "seconds": 1.5,
                  "generated": None, "violated": None, "errors": [], "cfg": "x.cfg",
                  "tlc_version": "TLC2"} for p, props, d in runs],
        "depth": 9, "seconds": 3.0,
    }  # fmt: skip
    base.update(kw)
    return base


def _doc(configs: list[dict], dirty) -> dict:
    return {"generated_at": "2026-01-01T00:00:00+00:00", "git_commit": "abc1234",
            "git_dirty": dirty, "tlc_version": "TLC2", "wall_seconds": 60.0, "jobs": 1,
            "workers_per_run": 1, "configs": configs}  # fmt: skip


def test_header_names_models_tlc_and_the_dirty_flag():
    md = tlc.render_markdown(_doc([], True), [])
    assert "python -m models.tlc" in md and "prove.tlc" not in md
    assert "commit abc1234 (dirty" in md
    assert "commit abc1234 (clean)" in tlc.render_markdown(_doc([], False), [])


def test_states_are_reported_per_exploration_not_summed():
    r = _config("C", [("hold", ["A", "B"], 261300), ("violate", ["PremiseTrueAtSend"], 2750)])
    md = tlc.render_markdown(_doc([r], False), [])
    row = next(line for line in md.splitlines() if line.startswith("| C |"))
    assert "261,300 (hold)" in row and "2,750 (PremiseTrueAtSend)" in row
    assert "264,050" not in md  # the old summed figure


def test_distinct_of_a_config_is_its_largest_exploration(tmp_path):
    r = _config("C", [("hold", ["A"], 10), ("violate", ["B"], 7)])
    assert [x["distinct"] for x in tlc.explorations(r)] == [10, 7]


def test_spec_size_beside_checked_size_and_time():
    r = _config("C", [("hold", ["A"], 10)])
    md = tlc.render_markdown(_doc([r], False), [])
    assert "## Spec size / checked size" in md
    row = [line for line in md.splitlines() if line.startswith("| C |")][-1]
    assert "12 / 6" in row and "3 / 2" in row and "6 / 3" in row and "2 / 1" in row
    assert f"{tlc.SPEC_EVENTS} / 2" in row and row.rstrip().endswith("| 3.0 |")


def test_git_dirty_follows_the_tree(tmp_path, monkeypatch):
    repo = tmp_path / "r"
    repo.mkdir()
    for cmd in (["init", "-q"], ["config", "user.email", "t@t"], ["config", "user.name", "t"]):
        subprocess.run(["git", *cmd], cwd=repo, check=True)
    (repo / "a.txt").write_text("1\n")
    subprocess.run(["git", "add", "a.txt"], cwd=repo, check=True)
    subprocess.run(["git", "commit", "-qm", "a"], cwd=repo, check=True)
    monkeypatch.setattr(gitstate, "REPO", repo)
    assert tlc.git_dirty() is False
    (repo / "results").mkdir()
    (repo / "results" / "out.md").write_text("generated\n")
    assert tlc.git_dirty() is False  # results do not make the code dirty
    (repo / "a.txt").write_text("2\n")
    assert tlc.git_dirty() is True
    assert len(tlc.git_commit()) >= 7
