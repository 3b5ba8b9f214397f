"""prove.estimate on hand-made run files: unit costs per run and per loop iteration."""

from __future__ import annotations

import json

import pytest

from prove import estimate


def _run(tmp_path, name: str, scn: str, system: str, start: float, wall: float,
         iterations: int = 0, error: str | None = None) -> None:  # fmt: skip
    rec = {"identity": {"scenario": scn, "system": system,
                        **({"driver": "x:y"} if iterations else {})},
           "timings": {"started_at": float(start), "wall": wall},
           "iterations": [{}] * iterations, "error": error}  # fmt: skip
    (tmp_path / f"{name}.json").write_text(json.dumps(rec))


def test_units_span_and_the_full_sweep(tmp_path) -> None:
    _run(tmp_path, "a", "S01", "runtime", 0, 10.0)
    _run(tmp_path, "b", "S01", "runtime", 0, 12.0)
    _run(tmp_path, "c", "S01", "runtime", 5, 99.0, error="harness too late")  # not a unit cost
    _run(tmp_path, "d", "S12", "runtime", 10, 40.0, iterations=20)
    unit, walls, span = estimate.measured(tmp_path)
    assert unit[("S01", "runtime")] == 11.0 and unit[("S12", "runtime")] == 2.0
    assert walls == 161.0 and span == 104.0
    out = estimate.estimate(tmp_path, "full", jobs=4, measured_jobs=2)
    # S01: 3 tiers x 100 seeds x 11 s; S12: 3 tiers x 1000 iterations x 2 s
    assert out["sequential_hours"] == pytest.approx((3 * 100 * 11 + 3 * 1000 * 2) / 3600)
    assert "S02/runtime" in out["missing"] and "S01/runtime" not in out["missing"]
    assert out["hours"] == pytest.approx(out["sequential_hours"] / (4 * min(1, 161 / 208)))


def test_no_run_files_is_a_clear_error(tmp_path, capsys) -> None:
    assert estimate.main(["--runs-dir", str(tmp_path)]) == 2
    assert "no finished run files" in capsys.readouterr().err
