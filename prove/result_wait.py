"""What a caller of result() waits after the run's end: start, then result(), as a user writes it.

    python -m prove.result_wait                      # writes results/result_wait.md and .json
    python -m prove.result_wait --before CHECKOUT    # and the runtime of an older checkout beside it
    python -m prove.result_wait --reps 1 --n 20 --json /tmp/rw.json  # a quick look

The workflow is the bench's shape 1 (prove/bench_flows.bench_one_step: one step that sleeps
20 ms), served by one worker subprocess (concurrency 8, LISTEN wake-ups), in a fresh, empty
database of the project's cluster (each variant makes its own schema). Per repetition and
variant, in a subprocess whose runtime is that variant's: `n` workflows one after another,
each `rt.start(...)` then `rt.result(..., timeout=30)` with result()'s default poll, through
the sync client and then through AsyncRuntime. Latency: from before start() to result()'s
return (time.perf_counter). The worker's own view is not used: the step's 20 ms is the one
known part, and "after the step" is the latency less 20 ms.

The rule, fixed before the data: per variant and client, the p50 and p95 of each repetition;
the summary is the median of the repetitions' p50 with their [min-max]. The after variant is
called faster only when its slowest repetition's p50 is below the before variant's fastest.
"""

from __future__ import annotations

import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from prove import checkouts
from prove.bench import RESULTS, ROOT, STEP_MS, git_facts, machine_facts, pct, scratch_database

FULL = {"reps": 3, "n": 100, "warmup": 5}
CLIENTS = ("sync", "async")


def one_pass(admin: str, n: int, warmup: int) -> dict[str, Any]:
    """In the variant's subprocess: a worker, then `n` start+result per client."""
    from interlock_runtime import AsyncRuntime, Runtime
    from interlock_runtime.testing import WorkerProcess

    out: dict[str, Any] = {"load": [os.getloadavg()[0]]}
    with scratch_database(admin, "ilr_result_wait") as (dsn, _), \
            tempfile.TemporaryDirectory(prefix="ilr-rw-") as logdir:  # fmt: skip
        with Runtime(dsn):  # the schema, before the worker connects
            pass
        worker = WorkerProcess(dsn, "rw-1", Path(logdir), "prove.bench_flows",
                               pythonpath=os.environ.get("PYTHONPATH", ""), lease_ttl=30.0,
                               poll=1.0, concurrency=8, cwd=str(ROOT))  # fmt: skip
        try:
            worker.wait_event("registered", timeout=60)
            time.sleep(0.5)  # its LISTEN follows the registration
            tag = uuid.uuid4().hex[:6]
            with Runtime(dsn) as rt:
                lat = []
                for i in range(warmup + n):
                    t0 = time.perf_counter()
                    rt.start("bench_one_step", f"s{tag}-{i}", {"ms": STEP_MS})
                    rt.result(f"s{tag}-{i}", timeout=30)
                    lat.append((time.perf_counter() - t0) * 1000.0)
                out["sync"] = lat[warmup:]

            async def awaited() -> list[float]:
                async with AsyncRuntime(dsn) as art:
                    lat = []
                    for i in range(warmup + n):
                        t0 = time.perf_counter()
                        await art.start("bench_one_step", f"a{tag}-{i}", {"ms": STEP_MS})
                        await art.result(f"a{tag}-{i}", timeout=30)
                        lat.append((time.perf_counter() - t0) * 1000.0)
                    return lat[warmup:]

            out["async"] = asyncio.run(awaited())
        finally:
            worker.close()
    out["load"].append(os.getloadavg()[0])
    return out


def run(cfg: dict[str, Any], variants: dict[str, Path]) -> dict[str, Any]:
    """Every variant (name -> a checkout's root) once per repetition, interleaved."""
    from interlock_runtime.testing import admin_dsn

    admin = admin_dsn()
    report: dict[str, Any] = {"config": cfg, "git": git_facts(), "machine": machine_facts(),
                              "variants": {v: checkouts.commit_of(root) for v, root in variants.items()},
                              "reps": {v: [] for v in variants}}  # fmt: skip
    for rep in range(cfg["reps"]):
        for variant, root in variants.items():
            env = dict(os.environ, PYTHONPATH=os.pathsep.join((str(root / "runtime"), str(ROOT))))
            with tempfile.NamedTemporaryFile(suffix=".json") as f:
                subprocess.run([sys.executable, "-m", "prove.result_wait", "pass", admin,
                                str(cfg["n"]), str(cfg["warmup"]), f.name],
                               cwd=str(ROOT), env=env, check=True, timeout=600)  # fmt: skip
                data = json.loads(Path(f.name).read_text())
            row = {"rep": rep + 1, "load": data["load"]}
            for client in CLIENTS:
                row[client] = {"p50": pct(data[client], 50), "p95": pct(data[client], 95),
                               "mean": statistics.fmean(data[client]), "n": len(data[client])}  # fmt: skip
            report["reps"][variant].append(row)
            print(f"rep {rep + 1} {variant}: " + ", ".join(
                f"{c} p50 {row[c]['p50']:.1f} ms" for c in CLIENTS), flush=True)  # fmt: skip
    report["summary"] = summary(report)
    return report


def summary(report: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for variant, rows in report["reps"].items():
        for client in CLIENTS:
            p50s = [r[client]["p50"] for r in rows]
            out[f"{variant}/{client}"] = {"median_p50": statistics.median(p50s),
                                          "min_p50": min(p50s), "max_p50": max(p50s),
                                          "median_p95": statistics.median(
                                              r[client]["p95"] for r in rows)}  # fmt: skip
    if "before" in report["reps"]:
        for client in CLIENTS:
            b, a = out[f"before/{client}"], out[f"after/{client}"]
            out[f"verdict/{client}"] = "faster" if a["max_p50"] < b["min_p50"] else "not shown"
    return out


def render(report: dict[str, Any]) -> str:
    g, m, s = report["git"], report["machine"], report["summary"]
    lines = ["# result(): the wait after the run's end", "",
             f"Made by `{report['command']}` at {g['commit'][:12]} (dirty: {g['dirty']}); "
             f"{m['cores']} cores, {m['cpu']}, Python {m['python']}.", "",
             (__doc__ or "").split("\n\n", 2)[2].strip(), "",
             "| variant (commit) | client | p50 ms [min-max of reps] | p50 less the 20 ms step | "
             "p95 ms (median of reps) |", "|---|---|---|---|---|"]  # fmt: skip
    for variant, facts in report["variants"].items():
        for client in CLIENTS:
            x = s[f"{variant}/{client}"]
            lines.append(f"| {variant} ({facts['commit'][:12]}{', dirty' if facts['dirty'] else ''})"
                         f" | {client} | {x['median_p50']:.1f} [{x['min_p50']:.1f}-"
                         f"{x['max_p50']:.1f}] | {x['median_p50'] - STEP_MS:.1f} | "
                         f"{x['median_p95']:.1f} |")  # fmt: skip
    if "before" in report["variants"]:
        lines += ["", "Verdict (the rule above): " + "; ".join(
            f"{c}: {s[f'verdict/{c}']}" for c in CLIENTS) + "."]  # fmt: skip
    lines += ["", "Every repetition:", "", "| variant | rep | client | p50 ms | p95 ms | mean ms | "
              "load 1 min (start -> end) |", "|---|---|---|---|---|---|---|"]  # fmt: skip
    for variant, rows in report["reps"].items():
        for r in rows:
            for c in CLIENTS:
                lines.append(f"| {variant} | {r['rep']} | {c} | {r[c]['p50']:.1f} | "
                             f"{r[c]['p95']:.1f} | {r[c]['mean']:.1f} | "
                             f"{r['load'][0]:.2f} -> {r['load'][1]:.2f} |")  # fmt: skip
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["pass"]:
        admin, n, warmup, out = argv[1], int(argv[2]), int(argv[3]), argv[4]
        Path(out).write_text(json.dumps(one_pass(admin, n, warmup)))
        return 0
    args, cfg = checkouts.parse("prove.result_wait", __doc__ or "", FULL, "measure", argv)
    report = run(cfg, checkouts.variants(args.before, ROOT))
    report["command"] = checkouts.command("prove.result_wait", argv, report["variants"])
    checkouts.save(report, render(report), "result_wait", RESULTS, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
