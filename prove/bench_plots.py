"""Plots for `make bench` (results/bench.md embeds them): drawn from the report JSON only, so
`python -m prove.bench render results/bench.json results/bench.md` redraws them too.

- bench_latency.png: shape 1's sequential latency distribution per system (every sample of
  every repetition, as a cumulative distribution).
- bench_refund.png: shape 2's throughput and p50/p99 latency against the number of workers (the
  points at the standard clients per worker; the async comparison's larger loads are tables).
"""

from __future__ import annotations

from pathlib import Path

COLORS = {"runtime": "#1f6f43", "runtime_async": "#5fb37a", "dbos": "#7a4fb3", "absurd": "#c07a16",
          "temporal": "#2a5d9f"}  # fmt: skip


def _latency_samples(report: dict) -> dict[str, list[float]]:
    samples: dict[str, list[float]] = {}
    for rep in (report.get("shape1") or {}).get("reps") or []:
        for system, r in rep.items():
            samples.setdefault(system, []).extend(r.get("seq_ms") or [])
    return samples


def _refund_series(report: dict) -> dict[str, list[tuple[int, dict]]]:
    summary = (report.get("shape2") or {}).get("summary") or {}
    by_system: dict[str, list[tuple[int, dict]]] = {}
    for key, s in summary.items():
        system, workers = key.split("@")
        if not workers.isdigit():  # W x C: the async comparison's larger load, not on this axis
            continue
        by_system.setdefault(system, []).append((int(workers), s))
    return by_system


def planned(report: dict) -> list[str]:
    """The plots write() draws for this report, without drawing them (for the Markdown)."""
    names = ["bench_latency.png"] if any(_latency_samples(report).values()) else []
    return names + (["bench_refund.png"] if _refund_series(report) else [])


def write(report: dict, outdir: Path) -> list[str]:
    """Draw the plots the report has data for; returns their file names (relative to outdir)."""
    import matplotlib

    matplotlib.use("Agg")  # files only, no display
    import matplotlib.pyplot as plt

    names: list[str] = []
    samples = _latency_samples(report)
    if any(samples.values()):
        fig, ax = plt.subplots(figsize=(7, 4))
        for system, xs in samples.items():
            if xs:
                xs = sorted(xs)
                ys = [(i + 1) / len(xs) for i in range(len(xs))]
                ax.step(xs, ys, where="post", label=f"{system} (n={len(xs)})",
                        color=COLORS.get(system))  # fmt: skip
        ax.set_xscale("log")
        ax.set_xlabel("end-to-end latency of a one-step workflow, ms (log scale)")
        ax.set_ylabel("fraction of workflows")
        ax.set_title("Shape 1, sequential: latency distribution")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend()
        fig.tight_layout()
        fig.savefig(outdir / "bench_latency.png", dpi=110)
        plt.close(fig)
        names.append("bench_latency.png")

    by_system = _refund_series(report)
    if by_system:
        fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
        for system, pts in by_system.items():
            pts.sort()
            ws = [w for w, _ in pts]

            def med(s: dict, k: str) -> float | None:
                return (s.get(k) or {}).get("median")

            color = COLORS.get(system)
            left.plot(ws, [med(s, "wf_per_s") for _, s in pts], "o-", color=color, label=system)
            right.plot(ws, [med(s, "p50_ms") for _, s in pts], "o-", color=color,
                       label=f"{system} p50")  # fmt: skip
            right.plot(ws, [med(s, "p99_ms") for _, s in pts], "o--", color=color,
                       label=f"{system} p99")  # fmt: skip
        left.set_xlabel("worker processes")
        left.set_ylabel("workflows/s (median of repetitions)")
        left.set_title("Shape 2, refund: throughput")
        right.set_xlabel("worker processes")
        right.set_ylabel("end-to-end latency, ms")
        right.set_yscale("log")
        right.set_title("Shape 2, refund: latency")
        for ax in (left, right):
            ax.grid(True, alpha=0.3)
            ax.legend()
        fig.tight_layout()
        fig.savefig(outdir / "bench_refund.png", dpi=110)
        plt.close(fig)
        names.append("bench_refund.png")
    return names
