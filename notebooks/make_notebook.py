"""Writes notebooks/results.ipynb (run it after changing the cells below; the test executes the
notebook top to bottom with nbclient, offline).

The notebook reads only results/*.json and results/runtime_prove_failures/: it draws the same
plots as the reports (by calling the code that draws them) and drills into one failing run."""

from __future__ import annotations

from pathlib import Path

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

CELLS = [
    (
        "md",
        """# Interlock Runtime: the results, from the JSON

Everything here is read from `results/` (produced by `make prove`, `make bench`, `make soak`);
nothing is measured in the notebook. The plots are drawn by the same code as the reports.""",
    ),
    (
        "code",
        """import json
import tempfile
from pathlib import Path

from IPython.display import Image, Markdown, display

ROOT = Path.cwd() if (Path.cwd() / "results").is_dir() else Path.cwd().parent
RESULTS = ROOT / "results"
prove = json.loads((RESULTS / "runtime_prove.json").read_text())
bench = json.loads((RESULTS / "bench.json").read_text())
soak = json.loads((RESULTS / "soak.json").read_text())
print(prove["sweep"], "sweep,", len(prove["cells"]), "cells; bench at", bench["git"]["commit"][:12])""",
    ),
    ("md", "## Prove: correct rate per cell and system (95% Wilson intervals)"),
    (
        "code",
        """from prove.report import plot_correct

out = Path(tempfile.mkdtemp())
display(Image(filename=str(out / plot_correct(prove["cells"], out / "correct.png"))))""",
    ),
    ("md", "## Prove: the tier-3 trade (duplicates against blocked-never-sent per 1,000 runs)"),
    (
        "code",
        """from prove.report import plot_tier3

name = plot_tier3(prove["cells"], out / "tier3.png")
if name:
    display(Image(filename=str(out / name)))""",
    ),
    ("md", "## Prove: can-prove score per system (the audit, from each system's own records)"),
    (
        "code",
        """by_system = {}
for c in prove["cells"]:
    cp = c.get("can_prove") or {}
    if cp.get("n_audited"):
        s = by_system.setdefault(c["system"], [0.0, 0, 0])
        s[0] += cp["can_prove_mean"] * cp["n_audited"]
        s[1] += cp["n_audited"]
        s[2] += cp["false_claims"]
for system, (total, n, false) in sorted(by_system.items()):
    print(f"{system}: mean {total / n:.2f} of 5 over {n} runs, {false} false claims")""",
    ),
    ("md", "## Prove: cells where a prediction did not hold"),
    (
        "code",
        """rows = [
    c
    for c in prove["cells"]
    if c["prediction_checked"] and c["prediction_held"] < c["prediction_checked"]
]
lines = ["| cell | predicted | observed |", "|---|---|---|"]
for c in rows:
    lines.append(
        f"| {c['scenario']} {c['system']} t{c['tier']} {c['variant']} | "
        f"{(c['predicted'] or {}).get('total_cents')} | {c['observed']} |"
    )
display(Markdown("\\n".join(lines)))""",
    ),
    ("md", "## Bench: latency distribution (shape 1) and the refund shape against workers"),
    (
        "code",
        """from prove import bench_plots

for name in bench_plots.write(bench, out):
    display(Image(filename=str(out / name)))""",
    ),
    ("md", "## Soak: the must-be-zero counts"),
    (
        "code",
        """c = soak["counts"]
keys = ("started", "terminal", "lost", "duplicates_tier12", "invariant_violations")
print({k: c[k] for k in keys})
print("verdict:", soak["verdict"], soak["failed"])""",
    ),
    (
        "md",
        """## Drill-down: one failing run

A failing run's file holds its identity, the faults injected, the ground truth read from the
target's ledger and access log, the outcome, and the workers' evidence.""",
    ),
    (
        "code",
        """failures = sorted((RESULTS / "runtime_prove_failures").glob("*.json"))
run = json.loads(failures[0].read_text())
print("run:", run["identity"]["run_id"])
print("faults:", json.dumps(run["faults"], indent=1)[:800])
print("outcome:", json.dumps(run["outcome"], indent=1)[:800])
ledger = run["ground_truth"].get("ledger", [])
print(len(ledger), "refund(s) in the ledger:", [(r.get("amount"), r.get("key")) for r in ledger])""",
    ),
]


def build() -> nbformat.NotebookNode:
    nb = new_notebook()
    nb.metadata["kernelspec"] = {
        "name": "python3",
        "display_name": "Python 3",
        "language": "python",
    }
    nb.cells = [
        new_markdown_cell(src) if kind == "md" else new_code_cell(src) for kind, src in CELLS
    ]
    return nb


if __name__ == "__main__":
    path = Path(__file__).with_name("results.ipynb")
    nbformat.write(build(), path)
    print(f"wrote {path.name}")
