"""The published Prove report recomputes from its committed raw data (prove/prove_raw.py).

The first test is the check itself, on the committed results/: it reads files and runs
nothing. The others show it can fail: a number edited in the report, a run edited in the pack
(with its index's checksum made to match, as a careful forger would), and a damaged pack.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import shutil
from pathlib import Path

import pytest

from prove import prove_raw, report

RESULTS = report.RESULTS


def test_the_published_report_recomputes_from_its_committed_runs() -> None:
    problems = report.verify(RESULTS)
    assert problems == [], "\n".join(problems)


@pytest.fixture
def copy(tmp_path: Path) -> Path:
    for name in ("runtime_prove.md", "runtime_prove.json"):
        shutil.copy(RESULTS / name, tmp_path / name)
    shutil.copytree(RESULTS / prove_raw.DIRNAME, tmp_path / prove_raw.DIRNAME)
    return tmp_path


def test_a_number_edited_in_the_report_is_found(copy: Path) -> None:
    md = copy / "runtime_prove.md"
    text = md.read_text()
    row = next(line for line in text.splitlines() if 'id="cell-s12-t2-base"' in line)
    md.write_text(text.replace(row, row.replace("% (", "9% (", 1)))
    problems = report.verify(copy)
    assert problems and "runtime_prove.md differs" in problems[0]
    assert any("S12" in p for p in problems)


def _rewrite_pack(raw: Path, edit) -> None:  # noqa: ANN001 - a small local helper
    lines = gzip.decompress((raw / prove_raw.ARCHIVE).read_bytes()).decode().splitlines()
    runs = [json.loads(x) for x in lines]
    edit(runs)
    data = gzip.compress(
        ("\n".join(json.dumps(r, sort_keys=True, separators=(",", ":")) for r in runs) + "\n")
        .encode(), mtime=0)  # fmt: skip
    (raw / prove_raw.ARCHIVE).write_bytes(data)
    index = json.loads((raw / prove_raw.INDEX).read_text())
    index["archive"]["sha256"] = hashlib.sha256(data).hexdigest()
    index["archive"]["bytes"] = len(data)
    (raw / prove_raw.INDEX).write_text(json.dumps(index, indent=1, sort_keys=True) + "\n")


def test_a_run_changed_in_the_pack_no_longer_supports_the_report(copy: Path) -> None:
    def flip(runs: list[dict]) -> None:
        run = next(r for r in runs if r["identity"]["run_id"] == "S12-base-runtime-t2-s0")
        it = next(it for it in run["iterations"] if it.get("correct") and not it.get("drop"))
        it["correct"] = False  # the pack now says one more iteration was incorrect
        run["outcome"]["correct_n"] -= 1
        run["outcome"]["correct"] = False

    _rewrite_pack(copy / prove_raw.DIRNAME, flip)
    problems = report.verify(copy)
    assert problems and any("S12" in p for p in problems), problems


def test_a_damaged_pack_is_refused(copy: Path) -> None:
    archive = copy / prove_raw.DIRNAME / prove_raw.ARCHIVE
    data = bytearray(archive.read_bytes())
    data[len(data) // 2] ^= 0xFF
    archive.write_bytes(bytes(data))
    (problem,) = report.verify(copy)
    assert "does not match the sha256" in problem


def test_the_cli_exits_1_on_a_difference_and_0_when_verified(copy: Path, capsys) -> None:
    assert report.main(["--verify", "--results-dir", str(copy)]) == 0
    md = copy / "runtime_prove.md"
    md.write_text(md.read_text() + "an added line\n")
    assert report.main(["--verify", "--results-dir", str(copy)]) == 1
    assert "--render" in capsys.readouterr().err
