"""Scenarios that are loops, not timelines: S11r, S12, S14 (docs/design.md#scenarios).

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

Every driver plays its iterations through `DriverRun.iterate(play_one)`, which gives three
things once for all of them:

- a checkpoint: each finished iteration is one JSON line of `iterations.jsonl` in the run
  directory, appended and flushed as it finishes. With the sweep's --resume the runner keeps
  that file (the rest of the interrupted attempt moves to `interrupted-<k>/`) and `iterate`
  returns the recorded iterations as they are, playing only the missing ones and those that
  were harness errors. A line cut by a crash is not a finished iteration: it is ignored and
  overwritten.
- the harness's own lateness (prove/lateness.py) over each iteration's window: an iteration
  during which the harness was later than the run's `max_harness_lateness` measured nothing;
  it is played again (a fresh attempt with the same i, up to HARNESS_RETRIES more times), and
  if every attempt was late it is kept as a harness-error iteration, which `summarize` leaves
  out of n and correct_n and lists in `harness_error_iterations`. A play_one that returns a
  record with a `harness_error` of its own (MIX: a timeline Run that ended in a harness error)
  is retried the same way.
- a missed aim: a play_one whose timing did not land where its plan put it (S12's revoke
  aimed before the POST's arrival but fired after it) returns a record with `drop`, a short
  reason. It is played again like a harness error (up to AIM_RETRIES more times, the same
  planned offset, so the offsets stay as drawn); an iteration that missed every attempt is
  kept as dropped: out of n, listed with its reason.
- progress: one line per finished iteration (i/n, verdict, ETA) through `DriverRun.progress`.

`summarize` lists every iteration left out of n in `dropped_iterations`, each with its
index, kind (`lateness`, `service`, `missed aim`) and reason, so a report can show them and
ask whether its verdict would change had they gone the other way.
"""

from __future__ import annotations

import importlib
import json
import os
import shutil
import time
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

CHECKPOINT = "iterations.jsonl"  # the finished iterations of a loop run, one JSON line each
HARNESS_RETRIES = 2  # an iteration the harness was too late for is played up to 2 more times
AIM_RETRIES = 4  # an iteration whose aim missed is played up to 4 more times

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
    resume: bool = False  # reuse the finished iterations in dir/CHECKPOINT
    progress: Callable[[str], None] = field(default=lambda line: None)  # one line per iteration
    attempt: int = 0  # the attempt of the iteration being played (0, then retries)
    resumed: int = 0  # iterations taken from the checkpoint by `iterate`

    def note(self, what: str, **fields: Any) -> None:
        """One line of the run's timeline (faults, world events, signals)."""
        self.log.append({"t": round(time.time() - self.t0, 3), "what": what, **fields})

    def iterate(self, play_one: Callable[[int], dict], n: int | None = None) -> list[dict]:
        """Records of iterations 0..n-1 (default self.iterations), in order: those in the
        checkpoint (with resume) exactly as recorded, the others played by `play_one(i)`
        (a JSON-able dict), each judged for harness lateness and retried (module docstring).
        play_one must depend on (tier, seed, i) only, not on which iterations ran before, so
        that a resumed or retried iteration i plays the same plan."""
        from prove import lateness
        from prove.runner import harness_lateness

        n = self.iterations if n is None else n
        bound = float(self.timing.get("max_harness_lateness", lateness.DEFAULT_BOUND))
        path = self.dir / CHECKPOINT
        done: dict[int, dict] = {}
        if self.resume and path.exists():
            lines, end = read_checkpoint(path)
            # a dropped iteration measured nothing: this attempt plays it again
            done = {k: v["record"] for k, v in lines.items()
                    if k < n and v.get("run_id") == self.run_id
                    and not dropped(v["record"] or {})}  # fmt: skip
            os.truncate(path, end)  # drop a torn last line before appending after it
        self.resumed = len(done)
        if done:
            self.note("resumed", iterations=sorted(done))
            self.progress(f"{self.run_id}: {len(done)}/{n} iterations resumed from {CHECKPOINT}")
        out: list[dict] = []
        t_start, played = time.time(), 0
        with open(path, "a" if self.resume else "w") as f:
            for i in range(n):
                if i in done:
                    out.append(done[i])
                    continue
                rec = self._attempts(i, play_one, bound, harness_lateness, lateness.verdict)
                line = json.dumps({"i": i, "run_id": self.run_id, "record": rec}, default=str)
                f.write(line + "\n")
                f.flush()
                os.fsync(f.fileno())  # a finished iteration survives a crash of the machine too
                out.append(json.loads(line)["record"])  # the same form a resume will read
                played += 1
                el = time.time() - t_start
                left = el / played * sum(1 for j in range(i + 1, n) if j not in done)
                verdict = ("HARNESS ERROR" if rec.get("harness_error")
                           else "MISSED AIM" if rec.get("drop")
                           else "ok" if rec.get("correct", True) else "INCORRECT")  # fmt: skip
                self.progress(f"{self.run_id}: iteration {i + 1}/{n} {verdict} | "
                              f"{el:.0f}s elapsed, ~{left:.0f}s left in this run")  # fmt: skip
        return out

    def _attempts(self, i: int, play_one: Callable[[int], dict], bound: float,
                  window: Callable, verdict: Callable) -> dict:  # fmt: skip
        """Play iteration i until an attempt was not a harness error (at most 1 + retries)."""
        earlier: list[dict] = []
        errors = misses = 0
        attempt = 0
        while True:
            self.attempt = attempt
            t_begin = time.time()
            rec = play_one(i)
            late = window(self.services, t_begin, time.time())
            err = rec.get("harness_error") or verdict(late, bound)
            rec["harness_lateness"] = late
            rec["harness_error"] = err
            rec["harness_retries"] = list(earlier)
            if err:
                errors += 1
                self.note("harness error", i=i, attempt=attempt, error=err)
            elif rec.get("drop"):
                misses += 1
                self.note("missed aim", i=i, attempt=attempt, reason=rec["drop"])
            else:
                break
            if errors > HARNESS_RETRIES or misses > AIM_RETRIES:
                break
            earlier.append({"attempt": attempt, "harness_error": err, "drop": rec.get("drop"),
                            "harness_lateness": late, "workflow": rec.get("workflow")})  # fmt: skip
            attempt += 1
        self.attempt = 0
        return rec


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


def read_checkpoint(path: Path) -> tuple[dict[int, dict], int]:
    """The finished iterations of a checkpoint ({i: line}) and the length in bytes of its
    whole lines. Text after the last newline is a line a crash cut short, and a line that is
    not a JSON object with an index and a record is no finished iteration: both are ignored.
    The last line of an index wins: a later one is a resume's replay of a harness error."""
    data = path.read_bytes()
    out: dict[int, dict] = {}
    end = data.rfind(b"\n") + 1
    for raw in data[:end].splitlines():
        try:
            line = json.loads(raw)
        except ValueError:
            continue
        if isinstance(line, dict) and isinstance(line.get("i"), int) and "record" in line:
            out[line["i"]] = line
    return out, end


def set_aside(run_dir: Path) -> None:
    """Resume: keep the checkpoint, the files its records name (`files`: names in run_dir)
    and earlier set-aside folders; move what else the interrupted attempt left (ledgers,
    worker logs, a half-played iteration) to `interrupted-<k>/`, so the new attempt starts
    from clean files but nothing is lost."""
    keep = {CHECKPOINT}
    path = run_dir / CHECKPOINT
    if path.exists():
        for line in read_checkpoint(path)[0].values():
            keep.update(str(name) for name in (line["record"] or {}).get("files") or [])
    rest = [p for p in run_dir.iterdir()
            if p.name not in keep and not p.name.startswith("interrupted-")]  # fmt: skip
    if not rest:
        return
    k = sum(1 for p in run_dir.iterdir() if p.name.startswith("interrupted-"))
    aside = run_dir / f"interrupted-{k}"
    aside.mkdir()
    for p in rest:
        shutil.move(str(p), str(aside / p.name))


def counted(iterations: list[dict]) -> list[dict]:
    """The iterations that are measurements (not harness errors, not missed aims)."""
    return [it for it in iterations if not dropped(it)]


def dropped(it: dict) -> dict | None:
    """Why an iteration measured nothing ({kind, reason}), or None when it is counted."""
    err = it.get("harness_error")
    if err:
        kind = "lateness" if "too late" in str(err) else "service"
        return {"kind": kind, "reason": str(err)[:200]}
    if it.get("drop"):
        return {"kind": "missed aim", "reason": str(it["drop"])[:200]}
    return None


def summarize(iterations: list[dict]) -> dict:
    """Sum per-iteration outcomes ({correct: bool, counters..., failures: [...]}) into the
    run's outcome (the keys the report reads). Harness-error iterations measured nothing:
    they are left out of n, correct_n and the counters, and listed by index."""
    out: dict[str, Any] = {"n": len(counted(iterations)), "correct_n": 0,
                           "failing_iterations": [], "oracle_failures": [],
                           "harness_error_iterations": [], "dropped_iterations": []}  # fmt: skip
    for k in OUTCOME_COUNTERS:
        out[k] = 0
    for i, it in enumerate(iterations):
        why = dropped(it)
        if why:
            out["dropped_iterations"].append({"i": i, **why})
            if it.get("harness_error"):
                out["harness_error_iterations"].append(i)
            continue
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
