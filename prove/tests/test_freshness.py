"""The results index (prove/freshness.py) and the resumable refresh (prove/refresh.py).

Most tests build a small git repository of their own: one declared result whose JSON records
a commit, code under code/ that it measures, and other files that it does not."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import pytest
import yaml

from prove import freshness, refresh
from prove.freshness import BEGIN, END, REPO, set_banner, strip_banner

SOURCES = """\
results:
  - name: fake
    files: [results/fake.md, results/fake.json]
    markdown: results/fake.md
    command: make fake
    commits:
      - {json: results/fake.json, commit: git.commit, dirty: git.dirty}
    paths: [code/, "!code/tests/", lib.py]
  - name: other
    files: [results/other.json]
    command: python -m other
    commits:
      - {json: results/other.json, commit: commit}
    paths: [elsewhere/]
"""

MD = "# Fake result\n\nMade at some commit.\n\n## Section\n\nbody\n"


class Repo:
    """A throwaway git repository with fixed commit dates (so hashes are reproducible)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.n = 0
        self.git("init", "-q", "-b", "main")

    def git(self, *args: str) -> str:
        self.n += 1
        date = f"2026-01-01T00:{self.n // 60:02d}:{self.n % 60:02d}+00:00"
        env = {
            **os.environ,
            "GIT_AUTHOR_NAME": "t",
            "GIT_AUTHOR_EMAIL": "t@example.org",
            "GIT_COMMITTER_NAME": "t",
            "GIT_COMMITTER_EMAIL": "t@example.org",
            "GIT_AUTHOR_DATE": date,
            "GIT_COMMITTER_DATE": date,
        }
        out = subprocess.run(
            ["git", *args], cwd=self.root, env=env, capture_output=True, text=True, check=True
        )
        return out.stdout.strip()

    def write(self, rel: str, text: str) -> None:
        path = self.root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)

    def commit(self, message: str, **files: str) -> str:
        for key, text in files.items():  # code__a_py is code/a.py
            self.write(re.sub(r"_(py|json|md|yaml)$", r".\1", key.replace("__", "/")), text)
        self.git("add", "-A")
        self.git("commit", "-q", "-m", message)
        return self.git("rev-parse", "HEAD")

    def record(self, commit: str, dirty: bool = False) -> None:
        """Commit the fake result as made at `commit`."""
        self.write("results/fake.json", json.dumps({"git": {"commit": commit, "dirty": dirty}}))
        self.write("results/fake.md", MD)
        self.write("results/other.json", json.dumps({"commit": commit}))
        self.commit("results: fake")

    def row(self, name: str = "fake") -> dict:
        index = freshness.build_index(self.root)
        return next(r for r in index["results"] if r["name"] == name)


@pytest.fixture
def repo(tmp_path: Path) -> Repo:
    r = Repo(tmp_path)
    r.write("prove/results_sources.yaml", SOURCES)
    r.commit("start", code__a_py="a = 1\n", lib_py="x = 1\n", other__b_py="b = 1\n")
    return r


def test_touching_a_declared_path_makes_it_stale_with_the_count(repo: Repo) -> None:
    made = repo.git("rev-parse", "HEAD")
    repo.record(made)
    assert repo.row()["status"] == "current"
    repo.commit("a", code__a_py="a = 2\n")
    repo.commit("a and lib", code__a_py="a = 3\n", lib_py="x = 2\n")
    repo.commit("not measured", other__b_py="b = 2\n")
    repo.commit("left out", code__tests__t_py="t = 1\n")
    row = repo.row()
    assert row["status"] == "stale" and row["since"] == 2, row
    assert row["reason"] == (
        f"2 commits touched code/ (2), lib.py (1) since {made[:7]}; 2 files now differ"
    )
    assert row["top_paths"] == [["code/", 2], ["lib.py", 1]]
    assert row["last_change"] == repo.git("log", "-1", "--format=%cI", "HEAD~2")


def test_a_change_undone_leaves_it_current(repo: Repo) -> None:
    """Staleness is the code's content, not its history: a commit that touched a declared file
    and a later one that put it back leave the result current (the count still shows them)."""
    made = repo.git("rev-parse", "HEAD")
    repo.record(made)
    before = (repo.root / "code" / "a.py").read_text()
    repo.commit("a", code__a_py="a = 9\n")
    assert repo.row()["status"] == "stale"
    repo.commit("undo", code__a_py=before)
    row = repo.row()
    assert row["status"] == "current" and row["since"] == 2 and row["reason"] == "", row


def test_committing_results_and_the_index_keeps_it_current(repo: Repo) -> None:
    repo.record(repo.git("rev-parse", "HEAD"))
    assert freshness.main(["--root", str(repo.root)]) == 0
    repo.commit("index")
    repo.commit("regenerated", results__fake_md=MD + "more\n", results__extra_json="{}")
    row = repo.row()
    assert row["status"] == "current" and row["since"] == 0, row
    repo.commit("a path left out", code__tests__t_py="t = 1\n", other__b_py="b = 2\n")
    # the index is dated by the declared paths, not HEAD: still up to date after these commits
    assert freshness.main(["--root", str(repo.root), "--check"]) == 0


def test_a_short_recorded_commit_is_resolved(repo: Repo) -> None:
    made = repo.git("rev-parse", "HEAD")
    repo.record(made[:7])  # as the TLC reports record it
    repo.commit("a", code__a_py="a = 2\n")
    row = repo.row()
    assert row["status"] == "stale" and row["commits"][0]["commit"] == made, row


def test_every_real_result_markdown_round_trips_a_banner() -> None:
    for s in _declared():
        if s.markdown and (REPO / s.markdown).is_file():
            text = strip_banner((REPO / s.markdown).read_text())
            marked = set_banner(text, "> **Stale:** x")
            assert marked.splitlines()[1] == BEGIN, s.markdown  # right under the heading
            assert strip_banner(marked) == text, s.markdown


def test_a_result_from_a_dirty_tree_is_never_current(repo: Repo) -> None:
    repo.record(repo.git("rev-parse", "HEAD"), dirty=True)
    row = repo.row()
    assert row["status"] == "dirty" and row["dirty"] is True and row["since"] == 0, row


def test_an_unknown_or_missing_commit_is_reported(repo: Repo) -> None:
    repo.record("0123456789abcdef0123456789abcdef01234567")
    row = repo.row()
    assert row["status"] == "unknown commit", row
    assert "0123456 not in this repository's history" in row["reason"]
    (repo.root / "results/other.json").write_text("{}")
    other = repo.row("other")
    assert other["status"] == "unknown commit" and "records no commit" in other["reason"]


def test_a_commit_off_heads_history_is_unknown(repo: Repo) -> None:
    repo.git("checkout", "-q", "-b", "side")
    side = repo.commit("side", code__a_py="a = 9\n")
    repo.git("checkout", "-q", "main")
    repo.record(side)
    assert repo.row()["status"] == "unknown commit"


def test_every_recorded_commit_is_reported_and_the_oldest_decides(repo: Repo) -> None:
    sources = SOURCES.replace("{json: results/fake.json,", '{json: "results/runs/*.json",')
    first = repo.commit("declare runs", prove__results_sources_yaml=sources)
    second = repo.commit("a", code__a_py="a = 2\n")
    repo.write("results/runs/1.json", json.dumps({"git": {"commit": first, "dirty": False}}))
    repo.write("results/runs/2.json", json.dumps({"git": {"commit": second, "dirty": False}}))
    row = repo.row()
    assert {c["short"] for c in row["commits"]} == {first[:7], second[:7]}
    assert row["status"] == "stale" and row["since"] == 1, row
    assert f"since {first[:7]};" in row["reason"]


def test_the_index_is_reproducible(repo: Repo) -> None:
    repo.record(repo.git("rev-parse", "HEAD"))
    repo.commit("a", code__a_py="a = 2\n")
    assert freshness.main(["--root", str(repo.root), "--no-banners"]) == 0
    first = [(repo.root / p).read_text() for p in (freshness.INDEX_MD, freshness.INDEX_JSON)]
    assert freshness.main(["--root", str(repo.root), "--no-banners"]) == 0
    second = [(repo.root / p).read_text() for p in (freshness.INDEX_MD, freshness.INDEX_JSON)]
    assert first == second
    assert "| fake |" in first[0] and "**stale**" in first[0]
    assert json.loads(first[1])["totals"] == {
        "current": 1,
        "stale": 1,
        "dirty": 0,
        "unknown commit": 0,
    }


def test_check_exits_1_on_a_difference(repo: Repo, capsys: pytest.CaptureFixture[str]) -> None:
    repo.record(repo.git("rev-parse", "HEAD"))
    root = ["--root", str(repo.root)]
    assert freshness.main([*root, "--check"]) == 1  # no index yet
    assert "run `python -m prove.freshness`" in capsys.readouterr().err
    assert freshness.main(root) == 0
    assert freshness.main([*root, "--check"]) == 0
    before = (repo.root / freshness.INDEX_MD).read_text()
    repo.commit("a", code__a_py="a = 2\n")
    assert freshness.main([*root, "--check"]) == 1
    assert (repo.root / freshness.INDEX_MD).read_text() == before  # --check writes nothing


def test_a_malformed_declaration_is_named(repo: Repo, capsys: pytest.CaptureFixture[str]) -> None:
    repo.write("prove/results_sources.yaml", "results:\n  - name: x\n    files: []\n")
    assert freshness.main(["--root", str(repo.root)]) == 2
    assert "result 'x': `files` must be a non-empty list" in capsys.readouterr().err
    repo.write("prove/results_sources.yaml", SOURCES.replace("[elsewhere/]", "[results/x]"))
    assert freshness.main(["--root", str(repo.root)]) == 2
    assert "`paths` names results/" in capsys.readouterr().err


# ---------------------------------------------------------------------------------------------
# Banners


def test_banner_is_inserted_updated_and_removed_idempotently() -> None:
    one = set_banner(MD, "> **Stale:** one")
    assert one == f"# Fake result\n{BEGIN}\n> **Stale:** one\n{END}\n\nMade at some commit.\n" + (
        "\n## Section\n\nbody\n"
    )
    assert set_banner(one, "> **Stale:** one") == one
    two = set_banner(one, "> **Stale:** two")
    assert two == one.replace("one", "two") and two.count(BEGIN) == 1
    assert set_banner(two, None) == MD
    assert set_banner(MD, None) == MD
    assert strip_banner(two) == MD and strip_banner(MD) == MD
    bare = "no heading\n"
    assert strip_banner(set_banner(bare, "> x")) == bare
    last = "# Only a heading"  # no newline at the end
    assert strip_banner(set_banner(last, "> x")) == last + "\n"


def test_only_the_text_between_the_markers_is_touched() -> None:
    edited = set_banner(MD, "> old").replace("Made at", "Made by hand at")
    assert set_banner(edited, "> new") == edited.replace("> old", "> new")


def test_main_writes_and_removes_banners(repo: Repo) -> None:
    made = repo.git("rev-parse", "HEAD")
    repo.record(made)
    repo.commit("a", code__a_py="a = 2\n")
    root = ["--root", str(repo.root)]
    md = repo.root / "results/fake.md"
    assert freshness.main([*root, "--no-banners"]) == 0 and md.read_text() == MD
    assert freshness.main(root) == 0
    text = md.read_text()
    assert text.startswith(f"# Fake result\n{BEGIN}\n> **Stale:** made at {made[:7]}; 1 commit ")
    assert "touched code/ (see results/INDEX.md)" in text and strip_banner(text) == MD
    assert freshness.main(root) == 0 and md.read_text() == text
    # regenerated at HEAD (the generator writes no banner): current, and no banner comes back
    repo.write("results/fake.json", json.dumps({"git": {"commit": repo.git("rev-parse", "HEAD")}}))
    md.write_text(text)
    assert freshness.main(root) == 0 and md.read_text() == MD


# ---------------------------------------------------------------------------------------------
# make refresh: resumable, one list of steps


REFRESH_SOURCES = """\
results:
  - {name: one, files: [results/one.json], command: make one, paths: [one/]}
  - {name: two, files: [results/two.json], command: make two, paths: [two/]}
  - {name: hand, files: [results/hand.json], command: make hand, paths: [one/], refresh: false}
  - {name: three, files: [results/three.json], command: make three, paths: [three/],
     commits: [{json: results/three.json, commit: commit}]}
"""


class FakeRunner:
    def __init__(self, fail: str | None = None) -> None:
        self.ran: list[str] = []
        self.fail = fail

    def __call__(self, command: str, root: Path) -> int:
        self.ran.append(command)
        return 3 if command == self.fail else 0


@pytest.fixture
def steps(tmp_path: Path) -> Repo:
    r = Repo(tmp_path)
    r.write("prove/results_sources.yaml", REFRESH_SOURCES)
    r.commit("start", one__x="1", two__x="1", three__x="1")
    r.write("results/three.json", json.dumps({"commit": r.git("rev-parse", "HEAD")}))
    r.commit("results")
    return r


def _refresh(r: Repo, runner: FakeRunner, **kw: object) -> int:
    return refresh.refresh(r.root, runner=runner, index=False, **kw)  # type: ignore[arg-type]


def test_refresh_resumes_after_a_failure_and_skips_finished_steps(steps: Repo) -> None:
    first = FakeRunner(fail="make two")
    assert _refresh(steps, first) == 3
    assert first.ran == ["make one", "make two"]
    again = FakeRunner()
    assert _refresh(steps, again) == 0
    assert again.ran == ["make two", "make three"]  # resumed; hand is never run
    idle = FakeRunner()
    assert _refresh(steps, idle) == 0 and idle.ran == []
    listing = refresh.listing(steps.root)
    assert re.search(r"^hand +manual ", listing, re.M) and re.search(
        r"^one +done at ", listing, re.M
    )


def test_refresh_records_each_steps_wall_time_across_interruptions(steps: Repo) -> None:
    ticks = iter(range(0, 1000, 60))  # each reading of the clock is a minute after the last
    clock = lambda: float(next(ticks))  # noqa: E731
    assert _refresh(steps, FakeRunner(fail="make two"), clock=clock) == 3
    assert _refresh(steps, FakeRunner(), clock=clock) == 0
    state = refresh.load_state(steps.root)
    assert {k: v["seconds"] for k, v in state["done"].items()} == {
        "one": 60.0, "two": 60.0, "three": 60.0
    }  # fmt: skip
    assert [(a["step"], a["exit"]) for a in state["attempts"]] == [
        ("one", 0), ("two", 3), ("two", 0), ("three", 0)
    ]  # fmt: skip
    listing = refresh.listing(steps.root)
    assert re.search(r"^one +done at \w+ +1\.0 min ", listing, re.M)
    assert "finished steps: 3.0 min; every attempt, failed and repeated ones included: 4.0 min" in (
        listing
    )


def test_refresh_keeps_steps_whose_code_did_not_change_since(steps: Repo) -> None:
    assert _refresh(steps, FakeRunner()) == 0
    steps.commit("results committed", results__one_json="{}")
    steps.commit("two changed", two__x="2")
    later = FakeRunner()
    assert _refresh(steps, later) == 0
    assert later.ran == ["make two"]


def test_refresh_fresh_starts_over(steps: Repo) -> None:
    assert _refresh(steps, FakeRunner()) == 0
    over = FakeRunner()
    assert _refresh(steps, over, fresh=True) == 0
    assert over.ran == ["make one", "make two", "make three"]


def test_refresh_only_and_stale_only(steps: Repo) -> None:
    only = FakeRunner()
    assert _refresh(steps, only, only="two") == 0 and only.ran == ["make two"]
    with pytest.raises(SystemExit, match="no step 'nope'"):
        _refresh(steps, FakeRunner(), only="nope")
    with pytest.raises(SystemExit, match="make hand"):
        _refresh(steps, FakeRunner(), only="hand")
    # one and two record no commit (unknown), three is current until three/ changes
    stale = FakeRunner()
    assert _refresh(steps, stale, stale_only=True, fresh=True) == 0
    assert stale.ran == ["make one", "make two"]
    steps.commit("three changed", three__x="2")
    later = FakeRunner()
    assert _refresh(steps, later, stale_only=True, fresh=True) == 0
    assert later.ran == ["make one", "make two", "make three"]


# ---------------------------------------------------------------------------------------------
# This repository's declarations


def _declared() -> list[freshness.Source]:
    return freshness.load_sources(REPO)


def test_every_result_is_declared() -> None:
    """A result cannot be published undeclared: every file or directory under results/."""
    declared = [f for s in _declared() for f in s.files]
    index = {freshness.INDEX_MD, freshness.INDEX_JSON}
    tracked = subprocess.run(
        ["git", "ls-files", "results"], cwd=REPO, capture_output=True, text=True, check=True
    ).stdout.split()
    # results/raw/ holds each result's raw data, declared with that result: look inside it
    top = [p for p in (REPO / "results").iterdir() if p.name != "raw"]
    raw = list((REPO / "results" / "raw").iterdir()) if (REPO / "results" / "raw").is_dir() else []
    on_disk = [str(p.relative_to(REPO)) for p in top + raw]
    missing = sorted(
        f
        for f in {*tracked, *on_disk} - index
        if not any(f == d or (d.endswith("/") and (f + "/").startswith(d)) for d in declared)
    )
    assert not missing, f"declare these in {freshness.SOURCES}: {missing}"


def test_every_declared_command_and_path_exists() -> None:
    targets = set()
    for mk in ("Makefile", "models/tlc.mk"):
        targets |= set(re.findall(r"^([a-z][\w-]*):", (REPO / mk).read_text(), re.M))
    bad = []
    for s in _declared():
        words = s.command.split()
        if words[0] == "make":
            ok = words[1] in targets
        elif words[:2] == ["python", "-m"]:
            mod = Path(*words[2].split("."))
            ok = (REPO / mod).with_suffix(".py").is_file() or (REPO / mod / "__main__.py").is_file()
        else:
            ok = False
        if not ok:
            bad.append(f"{s.name}: {s.command}")
        bad += [f"{s.name}: no path {p}" for p in s.paths if not (REPO / p.lstrip("!")).exists()]
        if (
            s.markdown
            and s.markdown not in s.files
            and not any(s.markdown.startswith(f) for f in s.files if f.endswith("/"))
        ):
            bad.append(f"{s.name}: markdown {s.markdown} is not one of its files")
    assert not bad, bad


def test_the_declarations_parse_as_documented() -> None:
    raw = yaml.safe_load((REPO / freshness.SOURCES).read_text())
    assert [s.name for s in _declared()] == [e["name"] for e in raw["results"]]
