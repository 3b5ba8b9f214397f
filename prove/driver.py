"""Scenarios that are loops, not timelines: S11r, S12, S14 (spec 11.3).

Most scenarios are a timeline of actions played once per seed (prove/runner.py). A few are a
loop of many short iterations in one run (S12: 1000 revoke races per tier) or drive several
workflows at once (S14: versioning). Such a scenario names a driver instead of a timeline:

    driver: prove.races:revoke_race       # module:function
    iterations: {quick: 40, full: 1000}

The runner calls `function(run: DriverRun) -> dict` once per seed. The driver builds what it
needs (targets, stubs, databases, worker subprocesses) on `run.stack`, and returns

    {"outcome": {...}, "iterations": [...], "artifacts": {...}, "faults": {...},
     "ground_truth": {...}, "timings": {...}}

where `outcome` carries, summed over the iterations: n, correct_n, duplicate_applications,
wrong_amount, sent_under_revoked_grant, sent_on_changed_premise, blocked_never_sent, plus
expected / observed (short strings), prediction_held (bool or None), oracle_failures (a few
lines) and failing_iterations (indexes). The runner adds identity, versions and errors, and
sets outcome.correct = (correct_n == n). The report counts each iteration as one run of the
cell, so a 1000-iteration loop has n = 1000.
"""

from __future__ import annotations

import importlib
import time
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

OUTCOME_COUNTERS = (
    "duplicate_applications",
    "wrong_amount",
    "sent_under_revoked_grant",
    "sent_on_changed_premise",
    "blocked_never_sent",
)


@dataclass
class DriverRun:
    """What a driver gets: the sweep's services, the cell, and a place for its files."""

    services: Any  # prove.runner.Services: admin_dsn, template, temporal, versions
    scn: Any  # prove.scenario.Scenario
    variant: Any  # prove.scenario.Variant (params, timing)
    system: str  # runtime | temporal_idem | temporal_check
    tier: int
    seed: int
    iterations: int
    run_id: str
    dir: Path  # this run's directory (logs, ledgers); created empty
    stack: ExitStack  # close what you start here
    timing: dict = field(default_factory=dict)
    log: list[dict] = field(default_factory=list)
    t0: float = field(default_factory=time.time)

    def note(self, what: str, **fields: Any) -> None:
        """One line of the run's timeline (faults, world events, signals)."""
        self.log.append({"t": round(time.time() - self.t0, 3), "what": what, **fields})


def load(spec: str) -> Callable[[DriverRun], dict]:
    """`module:function` -> the function; a clear error when either is missing."""
    mod_name, _, fn_name = spec.partition(":")
    if not mod_name or not fn_name:
        raise ValueError(f"driver {spec!r}: write it as module:function (prove.races:s12)")
    try:
        mod = importlib.import_module(mod_name)
    except ImportError as e:
        raise ValueError(f"driver {spec!r}: cannot import {mod_name}: {e}") from None
    fn = getattr(mod, fn_name, None)
    if not callable(fn):
        raise ValueError(f"driver {spec!r}: {mod_name} has no function {fn_name}")
    return fn


def summarize(iterations: list[dict]) -> dict:
    """Sum per-iteration outcomes ({correct: bool, counters..., failures: [...]}) into the
    run's outcome (the keys the report reads)."""
    out: dict[str, Any] = {"n": len(iterations), "correct_n": 0, "failing_iterations": [],
                           "oracle_failures": []}  # fmt: skip
    for k in OUTCOME_COUNTERS:
        out[k] = 0
    for i, it in enumerate(iterations):
        if it.get("correct"):
            out["correct_n"] += 1
        else:
            out["failing_iterations"].append(i)
            for f in it.get("failures") or ["incorrect"]:
                if len(out["oracle_failures"]) < 10:
                    out["oracle_failures"].append(f"iteration {i}: {f}")
        for k in OUTCOME_COUNTERS:
            out[k] += int(it.get(k) or 0)
    out["correct"] = out["n"] > 0 and out["correct_n"] == out["n"]
    return out
