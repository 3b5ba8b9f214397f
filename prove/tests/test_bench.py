"""`python -m prove.bench --smoke`: the benchmark still runs end to end and measures something."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from prove import bench

REPO = Path(__file__).resolve().parents[2]


def test_percentiles_and_spread():
    assert bench.pct([3.0, 1.0, 2.0], 50) == 2.0
    assert bench.pct(list(map(float, range(101))), 99) == 99.0
    assert bench.pct([], 50) is None
    assert bench.spread([3.0, 1.0, 2.0]) == {"median": 2.0, "min": 1.0, "max": 3.0, "n": 3}


def test_url_of_keyword_dsn():
    url = bench.url_of("host=127.0.0.1 port=55432 user=postgres dbname=x")
    assert url == "postgresql://postgres@127.0.0.1:55432/x"


@pytest.mark.slow
def test_smoke_measures_runtime_and_a_peer(tmp_path):
    results = REPO / "results"
    before = {p.name: p.stat().st_mtime for p in results.glob("bench*")} if results.exists() else {}
    out = tmp_path / "smoke.json"
    r = subprocess.run([sys.executable, "-m", "prove.bench", "--smoke", "--json", str(out)],
                       cwd=str(REPO), capture_output=True, text=True, timeout=240)  # fmt: skip
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-4000:]
    report = json.loads(out.read_text())
    summary = report["shape1"]["summary"]
    assert summary["runtime"]["completed"] > 0, summary["runtime"]
    assert summary["runtime"]["seq_p50_ms"]["median"] >= bench.STEP_MS  # the step really slept
    peers = [s for s in summary if s != "runtime" and summary[s]["completed"] > 0]
    assert peers, summary
    assert report["postgres"]["fsync"] == "on"
    cost = report["shape1"]["reps"][0]["runtime"]["cost"]
    assert cost["write_tx_per_wf"] > 0 and cost["wal_bytes_per_wf"] > 0
    after = {p.name: p.stat().st_mtime for p in results.glob("bench*")} if results.exists() else {}
    assert after == before, "the smoke must not write into results/"


def test_plots_are_drawn_from_the_report_json(tmp_path) -> None:
    from prove import bench_plots

    report = json.loads(
        (Path(__file__).resolve().parents[2] / "results" / "bench.json").read_text()
    )
    names = bench_plots.write(report, tmp_path)
    assert names == ["bench_latency.png", "bench_refund.png"]
    for name in names:
        assert (tmp_path / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert bench_plots.write({}, tmp_path) == []  # nothing to draw: no files claimed
