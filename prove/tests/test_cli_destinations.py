"""Working runs never touch the published results (docs/results.md#raw-data): only
`--publish` (what `make prove` passes) writes results/, never with a partial selection, and run
files are deleted only with `--fresh`."""

from __future__ import annotations

import pytest

from prove import __main__ as cli
from prove import report, runner


def _dest(*argv: str):
    return cli.destinations(cli.parser().parse_args(list(argv)))


def test_a_working_run_writes_under_data_and_only_publish_writes_results() -> None:
    assert _dest("--scenarios", "S10", "--seeds", "1") == (cli.WORK / "runs", cli.WORK / "results")
    assert _dest() == (cli.WORK / "runs", cli.WORK / "results")  # no selection, no --publish
    assert _dest("--publish") == (cli.PUBLISHED_RUNS, report.RESULTS)
    assert _dest("--publish", "--full", "--resume", "--runs-dir", "r") == (
        runner.Path("r"), report.RESULTS)  # fmt: skip
    assert _dest("--no-report")[1] is None
    for path in (cli.WORK, cli.PUBLISHED_RUNS):
        assert path.is_relative_to(runner.REPO / ".data")


@pytest.mark.parametrize("selection", [["--scenarios", "S10"], ["--seeds", "1"],
                                       ["--systems", "runtime"], ["--tiers", "1"],
                                       ["--crash-plans", "external"], ["--no-stripe"],
                                       ["--scenario-dir", "x"], ["--results-dir", "x"],
                                       ["--no-report"]])  # fmt: skip
def test_publish_is_refused_with_any_selection(selection, capsys) -> None:
    assert cli.main(["--publish", *selection]) == 2
    err = capsys.readouterr().err
    assert "--publish" in err and selection[0] in err and ".data/prove/scratch/" in err


def test_resume_and_fresh_exclude_each_other(capsys) -> None:
    assert cli.parser().parse_args(["--fresh"]).fresh
    with pytest.raises(SystemExit):
        cli.parser().parse_args(["--resume", "--fresh"])
    assert "not allowed with argument --resume" in capsys.readouterr().err


@pytest.mark.pg
def test_run_files_are_deleted_only_with_fresh(tmp_path, monkeypatch, capsys) -> None:
    """The services start for real (Postgres); the sweep itself is replaced by nothing."""
    monkeypatch.setattr(runner, "sweep", lambda *a, **k: [])
    runs = tmp_path / "runs"
    runs.mkdir()
    old = runs / "S01-base-runtime-t1-s0.json"
    old.write_text('{"finished": true}')
    argv = ["--scenarios", "S01", "--systems", "runtime", "--tiers", "1", "--seeds", "1",
            "--no-stripe", "--no-zygote", "--no-report", "--runs-dir", str(runs)]  # fmt: skip
    assert cli.main(argv) == 0
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert old.read_text() == '{"finished": true}' and str(runs.name) in last, last
    assert cli.main([*argv, "--fresh"]) == 0
    assert not old.exists()
