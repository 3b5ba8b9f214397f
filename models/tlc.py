"""Run the TLC matrix (models/catalog.yaml + models/matrix.yaml) and write the report.

    python -m models.tlc            # `make tlc`: every config, writes results/runtime_tlc.{md,json}
                                   #   and results/tlc_traces/<config>__<invariant>.json
    python -m models.tlc --quick    # `make tlc-quick`: the configs marked quick; writes nothing
    python -m models.tlc --only Signals Broken_NoFencing       # those configs; writes nothing
    python -m models.tlc --only Quick_t2_G1 --merge  # and replaces them in results/runtime_tlc.*
    python -m models.tlc --full     # `make tlc-full`: models/full.yaml, the spec's sizes (see there)
    python -m models.tlc --show .data/tlc/traces/X__Inv.json [--all-vars]   # print a saved trace

Every violation's counterexample is saved to .data/tlc/traces/<config>__<invariant>.json (the
format conformance/trace_replay.py replays; models/tlc_trace.py) whatever the mode, and
printed at the end: state 1 in full, then only the variables that changed (--all-vars: every
variable).  A violation that agrees with its prediction (a broken config of --quick) is only
named, unless --only named its config.

Each config's runs come from Catalog.plan: one "hold" run with every invariant predicted to hold
(and the Reach_* witnesses noted by a state constraint in the same exploration), one run per
invariant predicted V, one run per broken config's named invariant. If a hold run finds a
violation, that invariant is recorded as V (a disagreement) and the run is repeated without it.
A run that ends without TLC's success or violation message (parse error, missing operator, no
Java, no jar, crash, timeout) is an error for its config, never a hold.

Provenance: each report names the commit and whether the tree differed from it (dirty: a
tracked or untracked file outside results/ changed; the same rule as prove/gitstate.py), each
exploration's distinct states separately, each config's time, and per constant the spec's size
beside the size checked (SPEC_BASE).

Exit status: 0 when every outcome matches its prediction and no run errored, else 1.
Model check for the stated constants, not a proof of the Python or SQL.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from models import catalog as catalog_mod
from models import gen_cfg, tlc_pending, tlc_trace
from world import gitstate

ROOT = Path(__file__).resolve().parents[1]
MODELS = ROOT / "models"

RESULTS = ROOT / "results"
TRACES = RESULTS / "tlc_traces"
RUN_TLC = ROOT / "run_tlc.sh"
EXPLAIN = MODELS / "disagreements.yaml"
MSG = re.compile(r"@!@!@STARTMSG (\d+):(\d+) @!@!@\n(.*?)@!@!@ENDMSG \1 @!@!@", re.S)
REACHED = re.compile(r'<<"REACHED", "(\w+)">>')
VIOLATION_CODES = {
    2107,
    2110,
    2116,
    2121,
    2122,
    2217,
    2218,
    2264,
}  # violation, its trace, loop marks
ASSUMPTIONS = (
    "A1 no process pause across the local send deadline (PAUSE lifts it); "
    "A2 the target finishes any request within settle_margin after send_deadline "
    "(SERVER_SLOW lifts it); A3 external premises are true as of their read "
    "(PremiseTrueAtSend shows the window); A4 durable commits; A5 bounded clock-rate difference."
)
# The spec's base sizes (docs/design.md#model-checking): what a complete check would use.  The matrix
# checks smaller values; the report puts both side by side.  The spec names six world events;
# the model has a seventh (local_change, the local SQL premise), counted in the spec's size.
SPEC_BASE = {
    "MaxClock": 12,
    "LeaseTTL": 3,
    "SendTimeout": 2,
    "SettleMargin": 2,
    "DedupAge": 6,
    "MaxCrashes": 2,
}
SPEC_EVENTS = 7
_print_lock = threading.Lock()


def log(msg: str) -> None:
    with _print_lock:
        print(msg, flush=True)


# ---------------------------------------------------------------------- TLA+ values -> JSON
class _ValueParser:
    """Parse TLC's printed values: records, functions (k :> v @@ ...), sequences, sets,
    strings, integers, booleans and model values."""

    TOKEN = re.compile(
        r'\s*(?:(?P<str>"(?:[^"\\]|\\.)*")|(?P<num>-?\d+)|(?P<op>\|->|:>|@@|<<|>>|[\[\](){},])'
        r"|(?P<id>[A-Za-z_][A-Za-z0-9_]*))"
    )

    def __init__(self, text: str):
        self.toks: list[tuple[str, str]] = []
        pos = 0
        text = text.strip()
        while pos < len(text):
            m = self.TOKEN.match(text, pos)
            if not m or m.end() == pos:
                raise ValueError(f"cannot tokenize at {text[pos : pos + 20]!r}")
            kind = m.lastgroup
            self.toks.append((kind, m.group(kind)))
            pos = m.end()
            while pos < len(text) and text[pos].isspace():
                pos += 1
        self.i = 0

    def peek(self) -> tuple[str, str] | None:
        return self.toks[self.i] if self.i < len(self.toks) else None

    def take(self, want: str | None = None) -> tuple[str, str]:
        tok = self.toks[self.i]
        if want is not None and tok[1] != want:
            raise ValueError(f"expected {want!r}, got {tok[1]!r}")
        self.i += 1
        return tok

    def value(self):
        kind, tok = self.take()
        if kind == "str":
            return json.loads(tok)
        if kind == "num":
            return int(tok)
        if kind == "id":
            return {"TRUE": True, "FALSE": False}.get(tok, tok)
        if tok == "<<":
            return self._items(">>")
        if tok == "{":
            return {"set": self._items("}")}
        if tok == "[":
            out = {}
            while self.peek()[1] != "]":
                key = self.take()[1]
                self.take("|->")
                out[key] = self.value()
                if self.peek()[1] == ",":
                    self.take(",")
            self.take("]")
            return out
        if tok == "(":
            out = {}
            while self.peek()[1] != ")":
                key = self.value()
                self.take(":>")
                out[str(key)] = self.value()
                if self.peek()[1] == "@@":
                    self.take("@@")
            self.take(")")
            return out
        raise ValueError(f"unexpected {tok!r}")

    def _items(self, close: str) -> list:
        items = []
        while self.peek()[1] != close:
            items.append(self.value())
            if self.peek()[1] == ",":
                self.take(",")
        self.take(close)
        return items


def tla_to_json(text: str):
    try:
        p = _ValueParser(text)
        v = p.value()
        if p.peek() is not None:
            raise ValueError("trailing tokens")
        return v
    except (ValueError, IndexError, TypeError):
        return {"tla": text.strip()}


def parse_state(body: str) -> dict:
    lines = body.strip("\n").split("\n")
    head = lines[0]
    m = re.match(r"(\d+): (.*)$", head)
    index, action = (int(m.group(1)), m.group(2)) if m else (None, head)
    am = re.match(r"<(\w+)", action)
    name = am.group(1) if am else action.strip("<>")
    if name == "Initial":
        name = "Init"
    chunks: list[str] = []
    for line in lines[1:]:
        if line.startswith("/\\ "):
            chunks.append(line[3:])
        elif chunks:
            chunks[-1] += "\n" + line
        elif line.strip():
            chunks.append(line)
    state = {}
    for c in chunks:
        var, _, val = c.partition(" = ")
        state[var.strip()] = tla_to_json(val)
    return {"index": index, "action": name, "vars": state}


# ---------------------------------------------------------------------- one TLC run
def parse_output(text: str, rc: int) -> dict:
    out: dict = {
        "version": None,
        "generated": None,
        "distinct": None,
        "depth": None,
        "violated": None,
        "trace": [],
        "loop_to": None,
        "success": False,
        "errors": [],
        "reached": sorted(set(REACHED.findall(text))),
        "rc": rc,
    }
    for code_s, cls_s, body in MSG.findall(text):
        code, cls = int(code_s), int(cls_s)
        body_s = body.strip()
        if code == 2262:
            out["version"] = body_s
        elif code in (2110, 2107):
            m = re.search(r"Invariant (\w+) is violated", body_s)
            out["violated"] = m.group(1) if m else body_s
        elif code == 2116:
            out["violated"] = "temporal"
        elif code in (2217, 2218) or (cls == 4 and re.match(r"\d+: ", body_s)):
            if "Stuttering" in body_s.split("\n")[0]:
                out["loop_to"] = "stuttering"
            else:
                out["trace"].append(parse_state(body_s))
        elif code == 2122 or body_s.startswith("Back to state"):
            m = re.search(r"Back to state (\d+)", body_s)
            out["loop_to"] = int(m.group(1)) if m else body_s
        elif code == 2199:
            m = re.search(r"([\d,]+) states generated, ([\d,]+) distinct states found", body_s)
            if m:
                out["generated"] = int(m.group(1).replace(",", ""))
                out["distinct"] = int(m.group(2).replace(",", ""))
        elif code == 2194:
            m = re.search(r"depth of the complete state graph search is (\d+)", body_s)
            out["depth"] = int(m.group(1)) if m else None
        elif code == 2193:
            out["success"] = True
        elif cls == 1 and code not in VIOLATION_CODES:
            out["errors"].append(f"TLC {code}: {body_s[:400]}")
        elif "No error has been found" in body_s:
            out["success"] = True
    if "Temporal properties were violated" in text and not out["violated"]:
        out["violated"] = "temporal"
    if out["violated"] == "temporal" and out["depth"] is None:
        out["depth"] = len(out["trace"]) or None
    if not out["success"] and not out["violated"] and not out["errors"]:
        tail = text.strip().splitlines()[-5:]
        out["errors"].append(f"TLC exited {rc} without a result: {' | '.join(tail)[:400]}")
    if out["violated"] and out["errors"]:
        pass  # a violation with extra warnings still counts as a violation
    return out


def run_tlc(cfg_path: Path, workers: int, heap: str, timeout: int) -> dict:
    tla = cfg_path.with_suffix(".tla")
    cmd = [str(RUN_TLC), "-workers", str(workers), "-heap", heap, str(tla), str(cfg_path)]
    t0 = time.monotonic()
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=ROOT)
        text, rc = p.stdout + "\n" + p.stderr, p.returncode
    except subprocess.TimeoutExpired as e:
        text = (e.stdout or b"").decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
        res = parse_output(text, -1)
        res["errors"] = [f"timeout after {timeout}s"]
        res["success"] = False
        res["violated"] = None
        res["seconds"] = round(time.monotonic() - t0, 1)
        return res
    except OSError as e:
        return {"errors": [f"cannot run {RUN_TLC.name}: {e}"], "seconds": 0.0, "reached": [],
                "trace": [], "violated": None, "success": False, "version": None,
                "distinct": None, "generated": None, "depth": None, "rc": -1}  # fmt: skip
    res = parse_output(text, rc)
    if rc in (2, 3, 4, 5):
        res["errors"].insert(0, p.stderr.strip()[:400] or f"run_tlc.sh exited {rc}")
        res["success"], res["violated"] = False, None
    res["seconds"] = round(time.monotonic() - t0, 1)
    return res


# ---------------------------------------------------------------------- one config
def check_config(cat, cfg, opts, outdir: Path) -> dict:
    result = {
        "name": cfg.name,
        "spec": cfg.spec,
        "mode": cfg.mode,
        "tier": cfg.tier,
        "events": list(cfg.events),
        "toggles": list(cfg.toggles),
        "broken": cfg.broken,
        "kind": cfg.kind,
        "constants": gen_cfg.constants(cat, cfg),
        "why": cfg.why,
        "runs": [],
        "invariants": {},
        "witnesses": {},
    }
    tlc_trace.forget(cfg.name)
    reached: set[str] = set()
    wits_wanted: list[str] = []
    outcomes: dict[str, dict] = {}
    for run in cat.plan(cfg):
        wits_wanted += [w for w in run.witnesses if w not in wits_wanted]
        props = list(run.properties)
        attempt = 0
        while props:
            attempt += 1
            r = run if attempt == 1 else catalog_mod.Run(
                run.config, run.cfg.replace(".cfg", f"_{attempt}.cfg"), run.spec, run.purpose,
                tuple(props), run.expected, run.witnesses)  # fmt: skip
            path = gen_cfg.write_run(cat, r, outdir)
            log(f"  {cfg.name}: {r.purpose} {','.join(props)[:70]} ...")
            res = run_tlc(path, opts.workers, opts.heap, opts.timeout)
            reached |= set(res["reached"])
            rec = {
                "cfg": str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else path.name,
                "purpose": r.purpose,
                "properties": props,
                "tlc_version": res["version"],
                "generated": res["generated"],
                "distinct": res["distinct"],
                "depth": res["depth"],
                "seconds": res["seconds"],
                "violated": None,
                "errors": res["errors"],
            }
            result["runs"].append(rec)
            log(
                f"  {cfg.name}: {r.purpose} -> "
                + (
                    f"V {res['violated']}"
                    if res["violated"]
                    else "ERROR"
                    if res["errors"]
                    else "ok"
                )
                + f" ({res['distinct']} states, {res['seconds']}s)"
            )
            if res["violated"] and not res["errors"]:
                name = props[0] if res["violated"] == "temporal" else res["violated"]
                rec["violated"] = name
                if name not in props:
                    rec["errors"].append(f"TLC reported {name}, which this run did not check")
                    for p in props:
                        outcomes[p] = {"outcome": "error", "error": rec["errors"][-1]}
                    break
                trace = tlc_trace.document(
                    cfg.name, name, "liveness" if res["violated"] == "temporal" else "safety",
                    res["version"], result["constants"], res["loop_to"], res["trace"])  # fmt: skip
                # every violation is kept in the scratch directory; results/ only when written
                tlc_trace.save(trace)
                tfile = tlc_trace.save(trace, TRACES) if opts.write else None
                outcomes[name] = {
                    "outcome": "V",
                    "trace_length": len(res["trace"]),
                    "trace": str(tfile.relative_to(ROOT)) if tfile else None,
                    "actions": [s["action"] for s in res["trace"]],
                }
                props = [p for p in props if p != name]
                if r.purpose != "hold":
                    break
                continue
            if res["errors"]:
                for p in props:
                    outcomes[p] = {"outcome": "error", "error": "; ".join(res["errors"])[:500]}
                break
            for p in props:
                outcomes[p] = {"outcome": "hold"}
            break

    rows = [
        i
        for i in cat.invariants.values()
        if "M" in i.layers
        and i.spec == cfg.spec
        and (
            cfg.broken
            or (i.kind == cfg.kind and (cfg.kind == "safety" or i.name in cfg.properties))
        )
    ]
    for inv in rows:
        if cfg.broken:
            if cfg.broken not in inv.broken_by:
                continue
            pred = "V"
        else:
            pred = cat.predict(inv.name, cfg)
        o = outcomes.get(inv.name, {"outcome": "n/a" if pred == "n/a" else "not run"})
        entry = {"predicted": pred, **o}
        if o["outcome"] == "hold" and not cfg.broken:
            wit = [w for w in inv.witnesses if w in reached]
            entry["witnesses_reached"] = wit
            if not wit:
                entry["outcome"] = "hold (vacuous)"
        entry["agree"] = entry["outcome"] == pred
        result["invariants"][inv.name] = entry
    for w in wits_wanted:
        result["witnesses"][w] = {"predicted": cat.predict(w, cfg), "reached": w in reached}
    done = [r for r in result["runs"]]
    # the largest single exploration (never a sum: see explorations())
    result["distinct"] = max((r["distinct"] or 0 for r in done), default=0)
    result["depth"] = max((r["depth"] or 0 for r in done), default=0)
    result["seconds"] = round(sum(r["seconds"] for r in done), 1)
    result["tlc_version"] = next((r["tlc_version"] for r in done if r["tlc_version"]), None)
    result["errors"] = [e for r in done for e in r["errors"]]
    return result


# ---------------------------------------------------------------------- report
def load_explanations() -> dict[str, str]:
    if not EXPLAIN.exists():
        return {}
    import yaml

    data = yaml.safe_load(EXPLAIN.read_text()) or {}
    return {str(k): str(v) for k, v in data.items()}


def disagreements(results: list[dict], explain: dict[str, str]) -> list[dict]:
    out = []
    for r in results:
        for name, e in r["invariants"].items():
            if not e["agree"]:
                key = f"{r['name']}/{name}"
                out.append({
                    "config": r["name"], "invariant": name, "predicted": e["predicted"],
                    "outcome": e["outcome"], "explanation": explain.get(key, "UNEXPLAINED"),
                })  # fmt: skip
        for w, e in r["witnesses"].items():
            if e["predicted"] == "reach" and not e["reached"]:
                key = f"{r['name']}/{w}"
                out.append({
                    "config": r["name"], "invariant": w, "predicted": "reach",
                    "outcome": "not reached", "explanation": explain.get(key, "UNEXPLAINED"),
                })  # fmt: skip
        for err in r["errors"]:
            out.append({"config": r["name"], "invariant": "-", "predicted": "-",
                        "outcome": "error", "explanation": err[:300]})  # fmt: skip
    return out


def _cell(e: dict) -> str:
    o = e["outcome"]
    if o == "V" and e.get("trace_length"):
        o = f"V ({e['trace_length']} states)"
    return o if e["agree"] else f"**{o}** ✗"


def git_commit() -> str:
    return gitstate.commit()[:7] or "unknown"


def git_dirty() -> bool:
    """True when a tracked or untracked file outside results/ differs from the commit (the one
    rule of world/gitstate.py, which every report uses)."""
    return gitstate.dirty()


def provenance(commit: str, dirty: bool | None) -> str:
    if dirty is None:
        return f"commit {commit} (dirty flag unknown)"
    return (
        f"commit {commit} ({'dirty: uncommitted changes outside results/' if dirty else 'clean'})"
    )


def explorations(r: dict) -> list[dict]:
    """One entry per TLC exploration of a config (its runs), never summed: each run explores
    its own state space, and a repeated hold run re-explores the same one."""
    return [{"purpose": x["purpose"], "properties": x["properties"], "distinct": x["distinct"],
             "depth": x["depth"], "seconds": x["seconds"], "complete": x.get("complete", True)}
            for x in r.get("runs", [])]  # fmt: skip


def states_cell(r: dict) -> str:
    parts = []
    for x in explorations(r):
        n = "?" if x["distinct"] is None else f"{x['distinct']:,}"
        what = "hold" if x["purpose"] == "hold" else ",".join(x["properties"])[:40]
        if not x.get("complete", True):
            n += " partial"
        parts.append(f"{n} ({what})")
    return "; ".join(parts) or "-"


def size_cells(r: dict) -> dict[str, str]:
    """Per constant of SPEC_BASE, and the world events: "spec / checked" for one config."""
    consts = r.get("constants", {})
    out = {k: "-" if consts.get(k) is None else f"{spec} / {consts[k]}"
           for k, spec in SPEC_BASE.items()}  # fmt: skip
    out["events"] = (
        f"{SPEC_EVENTS} / {len(r.get('events', []))}" if r.get("spec") == "Runtime" else "-"
    )
    return out


def write_report(cat, results: list[dict], wall: float, opts, previous: dict | None = None) -> None:
    explain = load_explanations()
    dis = disagreements(results, explain)
    version = next((r["tlc_version"] for r in results if r["tlc_version"]), "unknown")
    prev = previous or {}
    doc = {
        "generated_at": prev.get("generated_at")
        or dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "git_commit": prev.get("git_commit") or git_commit(),
        "git_dirty": prev["git_dirty"] if "git_dirty" in prev else git_dirty(),
        "tlc_version": version,
        "label": "model check for the stated constants, not a proof of the Python or SQL",
        "assumptions": ASSUMPTIONS,
        "wall_seconds": round(wall, 1),
        "jobs": opts.jobs,
        "workers_per_run": opts.workers,
        "configs": results,
        "disagreements": dis,
    }
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "runtime_tlc.json").write_text(json.dumps(doc, indent=1) + "\n")
    (RESULTS / "runtime_tlc.md").write_text(render_markdown(doc, dis))


def render_markdown(doc: dict, dis: list[dict]) -> str:
    """results/runtime_tlc.md from the report document (what runtime_tlc.json holds)."""
    results, version, wall = doc["configs"], doc["tlc_version"], doc["wall_seconds"]
    md = ["# TLC results: Runtime.tla and Signals.tla", ""]
    md += [
        "Model check for the stated constants, not a proof of the Python or SQL.",
        f"Generated by `make tlc` (`python -m models.tlc`) at {doc['generated_at']}, "
        f"{provenance(doc['git_commit'], doc.get('git_dirty'))}; {version}; "
        f"{doc['jobs']} TLC processes at a time, {doc['workers_per_run']} worker each; "
        f"wall time {wall / 60:.1f} min.",
        "",
        f"Assumptions: {ASSUMPTIONS}",
        "",
        "Predictions come from `models/catalog.yaml` (docs/design.md#predictions as revised by docs/design.md#model-findings); the "
        "configs from `models/matrix.yaml`. Key: hold = no counterexample; V = violated, with "
        "the shortest trace (BFS) saved under `results/tlc_traces/`; n/a = not applicable to "
        "the mode or tier; **bold ✗** = disagreement with the prediction.",
        "",
        "## Summary",
        "",
        "Distinct states are given per exploration (one TLC run) of a config, never added up: "
        "each run explores its own state space.",
        "",
        "| config | mode | tier | events | toggles / broken | distinct states per exploration "
        "| depth | time (s) | agree | disagree |",
        "|---|---|---|---|---|---:|---:|---:|---:|---:|",
    ]
    for r in results:
        agree = sum(1 for e in r["invariants"].values() if e["agree"])
        bad = sum(1 for d in dis if d["config"] == r["name"])
        tb = ", ".join(r["toggles"] + ([f"BROKEN {r['broken']}"] if r["broken"] else [])) or "-"
        if r["kind"] == "liveness":
            tb = (tb + ", " if tb != "-" else "") + "liveness (URGENT)"
        md.append(
            f"| {r['name']} | {r['mode']} | {r['tier'] or '-'} | {', '.join(r['events']) or '-'} "
            f"| {tb} | {states_cell(r)} | {r['depth']} | {r['seconds']} | {agree} | {bad} |"
        )
    md += [
        "",
        "## Spec size / checked size",
        "",
        "Each cell is the spec's base size / the size this config checked "
        "(docs/design.md#model-checking); a smaller checked size is a shortfall of this matrix, which "
        "must fit in 45 minutes. `make tlc-full` (results/runtime_tlc_full.md) runs the main "
        "configs at the spec's sizes within a time budget.",
        "",
        "| config | " + " | ".join(SPEC_BASE) + " | world events | time (s) |",
        "|---|" + "---:|" * (len(SPEC_BASE) + 2),
    ]
    for r in results:
        cells = size_cells(r)
        row = " | ".join(cells[k] for k in SPEC_BASE)
        md.append(f"| {r['name']} | {row} | {cells['events']} | {r['seconds']} |")
    md += ["", "## Disagreements", ""]
    if not dis:
        md.append(
            "None: every outcome matches its prediction, and every hold has a reached witness."
        )
    for d in dis:
        md.append(
            f"- **{d['config']} / {d['invariant']}**: predicted {d['predicted']}, "
            f"outcome {d['outcome']}. {d['explanation']}"
        )
    md += ["", "## Broken configs (each must produce a counterexample on its named invariant)", ""]
    md += ["| broken config | invariant | outcome | trace | actions |", "|---|---|---|---|---|"]
    for r in results:
        if not r["broken"]:
            continue
        for name, e in r["invariants"].items():
            acts = " → ".join(e.get("actions", [])[1:])
            md.append(f"| {r['broken']} | {name} | {_cell(e)} | {e.get('trace') or '-'} | {acts} |")
    md += ["", "## Per config", ""]
    for r in results:
        if r["broken"]:
            continue
        md += [f"### {r['name']}", ""]
        if r["why"]:
            md += [r["why"], ""]
        consts = ", ".join(f"{k} = {v}" for k, v in r["constants"].items())
        md += [f"Constants: {consts}.", ""]
        md += ["| invariant | prediction | outcome | witnesses reached |", "|---|---|---|---|"]
        for name, e in r["invariants"].items():
            w = ", ".join(e.get("witnesses_reached", [])) or "-"
            md.append(f"| {name} | {e['predicted']} | {_cell(e)} | {w} |")
        if r["witnesses"]:
            miss = [w for w, e in r["witnesses"].items() if not e["reached"]]
            got = [w for w, e in r["witnesses"].items() if e["reached"]]
            md += ["", f"Witnesses reached: {', '.join(got) or 'none'}."]
            if miss:
                md.append(f"Not reached: {', '.join(miss)}.")
        md.append("")
    return "\n".join(md) + "\n"


def rejudge(cat, results: list[dict]) -> None:
    """Re-evaluate predictions of stored results against the current catalog (after a revision
    of a prediction, with its reason in the catalog); outcomes are TLC's and stay as they are."""
    for r in results:
        cfg = cat.config(r["name"])
        reached = {w for w, e in r["witnesses"].items() if e["reached"]}
        for name, e in r["invariants"].items():
            if not cfg.broken:
                e["predicted"] = cat.predict(name, cfg)
            if e["outcome"] in ("hold", "hold (vacuous)") and not cfg.broken:
                wit = [w for w in cat.invariants[name].witnesses if w in reached]
                e["witnesses_reached"] = wit
                e["outcome"] = "hold" if wit else "hold (vacuous)"
            e["agree"] = e["outcome"] == e["predicted"]
        for w, e in r["witnesses"].items():
            e["predicted"] = cat.predict(w, cfg)


# ---------------------------------------------------------------------- the spec's sizes
FULL = MODELS / "full.yaml"
FULL_STATE = MODELS / ".tlc-full"
# TLC's periodic progress report.  In simulation mode it reads "Progress(-1) at ...: N states
# generated, -1 distinct states found, -1 states left on queue" (N: states checked so far).
PROGRESS = re.compile(
    r"Progress\((-?\d+)\).*?:\s*([\d,]+) states generated.*?(-?[\d,]+) distinct states found"
    r".*?(-?[\d,]+) states left on queue"
)


def load_full(path: Path = FULL) -> dict:
    import yaml

    spec = yaml.safe_load(path.read_text())
    for k in ("constants", "configs", "budget_minutes", "checkpoint_minutes", "simulate"):
        if k not in spec:
            raise catalog_mod.CatalogError(path, "top level", f"missing '{k}'")
    return spec


def full_config(cat, name: str, spec: dict) -> catalog_mod.Config:
    """The matrix config `name` at the spec's sizes: its mode, tier and toggles, the spec's
    constants over its own, and every world event when events is `all`."""
    import dataclasses

    base = cat.config(name)
    consts = dict(base.constants)
    for k, v in spec["constants"].items():
        if k not in consts:
            raise catalog_mod.CatalogError(FULL, f"constants '{k}'", f"unknown for {base.spec}")
        consts[k] = v
    events = cat.events if spec.get("events") == "all" else base.events
    return dataclasses.replace(base, name=f"Full_{name}", constants=consts, events=tuple(events),
                               quick=False)  # fmt: skip


def _num(s: str) -> int:
    return int(s.replace(",", ""))


def parse_progress(text: str) -> dict:
    """The last progress report of an interrupted run: exhaustive (depth, generated, distinct,
    queue) or simulation (states checked)."""
    out: dict = {}
    found = PROGRESS.findall(text)
    if found:
        d, g, n, q = found[-1]
        if int(d) < 0:  # simulation
            out.update(states_checked=_num(g))
        else:
            out.update(depth=int(d), generated=_num(g), distinct=_num(n), queue=_num(q))
    return out


def run_budgeted(cmd: list[str], budget_s: float) -> tuple[str, int | None, float]:
    """Run TLC for at most budget_s; at the budget stop it and its JVM (the whole process
    group).  Returns (output, exit code or None when stopped, seconds)."""
    import signal

    t0 = time.monotonic()
    with tempfile.TemporaryFile(mode="w+") as out:
        p = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, text=True, cwd=ROOT,
                             start_new_session=True)  # fmt: skip
        try:
            rc: int | None = p.wait(timeout=budget_s)
        except subprocess.TimeoutExpired:
            rc = None
            for sig, wait in ((signal.SIGTERM, 10), (signal.SIGKILL, 10)):
                try:
                    os.killpg(p.pid, sig)
                    p.wait(timeout=wait)
                    break
                except subprocess.TimeoutExpired:
                    continue
                except ProcessLookupError:
                    break
        out.seek(0)
        return out.read(), rc, round(time.monotonic() - t0, 1)


def has_checkpoint(metadir: Path) -> bool:
    return any(metadir.rglob("*.chkpt")) if metadir.exists() else False


def _save_full_trace(res: dict, out: dict, props: list[str], found: list[Path] | None,
                     suffix: str = "") -> None:  # fmt: skip
    """The counterexample of a --full run, into the scratch directory (never results/)."""
    if not out["violated"] or not out["trace"]:
        return
    name = props[0] if out["violated"] == "temporal" else out["violated"]
    doc = tlc_trace.document(res["name"], name, "liveness" if out["violated"] == "temporal"
                             else "safety", out["version"], res["constants"], out["loop_to"],
                             out["trace"])  # fmt: skip
    path = tlc_trace.save(doc, name=f"{res['name']}__{name}{suffix}.json")
    if found is not None:
        found.append(path)


def check_full(cat, name: str, spec: dict, opts, found: list[Path] | None = None) -> dict:
    """One config at the spec's sizes: the exhaustive hold run (resumed from its checkpoint),
    then the simulation runs.  The path of each counterexample's scratch file goes to found."""
    cfg = full_config(cat, name, spec)
    if cfg.name not in {c.name for c in cat.configs}:
        cat.configs.append(cfg)  # gen_cfg renders a run by its config's name
    hold = next((r for r in cat.plan(cfg) if r.purpose == "hold"), None)
    res: dict = {"name": cfg.name, "base": name, "constants": gen_cfg.constants(cat, cfg),
                 "events": list(cfg.events), "toggles": list(cfg.toggles),
                 "reductions": list(spec.get("reductions", [])), "exhaustive": None,
                 "simulations": []}  # fmt: skip
    if hold is None:
        res["errors"] = ["no invariant predicted to hold"]
        return res
    outdir = FULL_STATE / "cfg"
    path = gen_cfg.write_run(cat, hold, outdir)
    # No witness constraint: its TLCGet registers, set by an ASSUME, are not restored by
    # -recover nor shared with simulation workers.  Witnesses are shown by the matrix runs.
    text = path.read_text().replace("CONSTRAINT Witnesses\n", "")
    if "view" in spec.get("reductions", []):
        text += "VIEW View\n"
    if "symmetry" not in spec.get("reductions", []):
        text = text.replace("SYMMETRY Symm\n", "")
    path.write_text(text)
    metadir = FULL_STATE / cfg.name
    resumed = has_checkpoint(metadir) and not opts.fresh
    if not resumed and metadir.exists():
        import shutil

        shutil.rmtree(metadir)
    metadir.mkdir(parents=True, exist_ok=True)
    tla = path.with_suffix(".tla")
    extra = ["-checkpoint", str(opts.checkpoint_minutes or spec["checkpoint_minutes"])]
    if resumed:
        extra += ["-recover", str(_checkpoint_dir(metadir))]
    cmd = [str(RUN_TLC), "-workers", str(opts.workers), "-heap", opts.heap, "-metadir",
           str(metadir), str(tla), str(path), *extra]  # fmt: skip
    budget = 60 * (opts.budget_minutes or spec["budget_minutes"])
    log(f"  {cfg.name}: exhaustive{' (resumed)' if resumed else ''}, budget {budget / 60:g} min")
    text, rc, secs = run_budgeted(cmd, budget)
    out = parse_output(text, rc if rc is not None else -1)
    prog = parse_progress(text)
    ex = {"properties": list(hold.properties), "resumed": resumed, "seconds": secs,
          "budget_seconds": budget, "complete": bool(out["success"]),
          "violated": out["violated"], "distinct": out["distinct"] or prog.get("distinct"),
          "generated": out["generated"] or prog.get("generated"),
          "depth": out["depth"] or prog.get("depth"), "queue": prog.get("queue"),
          "checkpoint": has_checkpoint(metadir),
          "errors": [] if rc is None else out["errors"]}  # fmt: skip
    if out["violated"]:
        ex["trace_length"] = len(out["trace"])
        ex["actions"] = [s["action"] for s in out["trace"]]
        _save_full_trace(res, out, list(hold.properties), found)
    res["exhaustive"] = ex
    log(f"  {cfg.name}: {'complete' if ex['complete'] else 'partial'}, {ex['distinct']} states, "
        f"depth {ex['depth']}, queue {ex['queue']}, {secs}s")  # fmt: skip
    sim = spec["simulate"]
    sim_path = outdir / f"{cfg.name}__sim.cfg"
    # no VIEW: simulation stores no states
    sim_cfg = path.read_text().replace("VIEW View\n", "")
    sim_path.write_text(sim_cfg)
    sim_tla = sim_path.with_suffix(".tla")
    sim_tla.write_text(tla.read_text().replace(f"MODULE {tla.stem} ", f"MODULE {sim_tla.stem} "))
    for seed in sim["seeds"]:
        minutes = opts.sim_minutes or sim["sim_minutes"]
        cmd = [str(RUN_TLC), "-workers", str(opts.workers), "-heap", opts.heap, str(sim_tla),
               str(sim_path), "-simulate", "-depth", str(sim["depth"]), "-seed", str(seed)]  # fmt: skip
        log(f"  {cfg.name}: simulate depth {sim['depth']} seed {seed}, {minutes} min")
        text, rc, secs = run_budgeted(cmd, 60 * minutes)
        o = parse_output(text, rc if rc is not None else -1)
        _save_full_trace(res, o, list(hold.properties), found, f"__seed{seed}")
        p = parse_progress(text)
        res["simulations"].append({
            "seed": seed, "depth": sim["depth"], "seconds": secs,
            "tlc_options": f"-simulate -depth {sim['depth']} -seed {seed}",
            "states_checked": p.get("states_checked"),
            "violated": o["violated"], "errors": [] if rc is None else o["errors"],
        })  # fmt: skip
    return res


def _checkpoint_dir(metadir: Path) -> Path:
    """The directory of the newest checkpoint under metadir (TLC's -recover argument)."""
    found = sorted(metadir.rglob("*.chkpt"), key=lambda f: f.stat().st_mtime)
    return found[-1].parent if found else metadir


def guarantees(cat, results: list[dict], inductive: dict | None) -> list[dict]:
    """Per invariant of the hold runs, the strongest guarantee at the spec's sizes: inductive
    (catalog `inductive: true` and results/runtime_inductive.json holding), exhaustive (a
    complete run), or exhaustive to a depth and simulated (docs/verification.md)."""
    ind_ok = bool(inductive and inductive.get("ok"))
    names: list[str] = []
    for r in results:
        for p in (r.get("exhaustive") or {}).get("properties", []):
            if p not in names:
                names.append(p)
    out = []
    for n in names:
        runs = [r for r in results if n in (r.get("exhaustive") or {}).get("properties", [])]
        exs = [r["exhaustive"] for r in runs]
        sims = [s for r in runs for s in r["simulations"] if not s.get("violated")]
        inductive_row = n in cat.invariants and cat.invariants[n].inductive
        if inductive_row and ind_ok:
            g = "inductive"
        elif exs and all(e.get("complete") for e in exs):
            g = "exhaustive"
        else:
            g = "exhaustive to a depth"
        depths = [e.get("depth") for e in exs if e.get("depth") is not None]
        row = {"invariant": n, "guarantee": g, "configs": len(runs),
               "min_depth": min(depths) if depths else None,
               "simulated_depth": max((s["depth"] for s in sims), default=None),
               "simulated_states": sum(s.get("states_checked") or 0 for s in sims)}  # fmt: skip
        if g == "inductive":
            row["inductive_commit"] = inductive.get("git_commit")
        out.append(row)
    return out


def write_full_report(results: list[dict], spec: dict, opts, wall: float, cat=None) -> None:
    ind_path = RESULTS / "runtime_inductive.json"
    inductive = json.loads(ind_path.read_text()) if ind_path.exists() else None
    doc = {"generated_at": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
           "git_commit": git_commit(), "git_dirty": git_dirty(), "spec": spec,
           "workers_per_run": opts.workers, "wall_seconds": round(wall, 1),
           "configs": results,
           "guarantees": guarantees(cat or catalog_mod.load(), results, inductive)}  # fmt: skip
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "runtime_tlc_full.json").write_text(json.dumps(doc, indent=1) + "\n")
    (RESULTS / "runtime_tlc_full.md").write_text(render_full(doc))


def _fmt(n) -> str:
    return "-" if n is None else f"{n:,}"


def render_full(doc: dict) -> str:
    spec = doc["spec"]
    md = ["# TLC at the spec's sizes: Runtime.tla", "",
          "Model check for the stated constants, not a proof of the Python or SQL. "
          f"Generated by `make tlc-full` (`python -m models.tlc --full`) at {doc['generated_at']}, "
          f"{provenance(doc['git_commit'], doc.get('git_dirty'))}; "
          f"{doc['workers_per_run']} worker; wall time {doc['wall_seconds'] / 60:.1f} min.", "",
          "Constants: " + ", ".join(f"{k} = {v}" for k, v in spec["constants"].items())
          + f"; events: {spec.get('events')}; reductions: {', '.join(spec.get('reductions', []))}"
          " (models/full.yaml says why each is sound). A partial run stopped at its budget: "
          "no violation among the states it reached, which is not a proof for the rest.", "",
          "## Exhaustive runs", "",
          "| config | spec / checked | result | distinct states | depth | queue left | time (s) "
          "| budget (s) | resumed |",
          "|---|---|---|---:|---:|---:|---:|---:|---|"]  # fmt: skip
    for r in doc["configs"]:
        ex = r.get("exhaustive") or {}
        sizes = ", ".join(f"{k} {v} / {r['constants'].get(k)}" for k, v in SPEC_BASE.items())
        if ex.get("violated"):
            result = f"V {ex['violated']}"
        elif ex.get("errors"):
            result = "ERROR: " + "; ".join(ex["errors"])[:120]
        else:
            result = "complete, holds" if ex.get("complete") else "partial (budget)"
        n = ex.get("distinct")
        md.append(f"| {r['name']} | {sizes} | {result} | {'-' if n is None else f'{n:,}'} "
                  f"| {ex.get('depth', '-')} | {_fmt(ex.get('queue'))} | {ex.get('seconds', '-')} "
                  f"| {ex.get('budget_seconds', '-')} | {ex.get('resumed', False)} |")  # fmt: skip
    md += ["", "## Simulation runs", "",
           "| config | TLC options | states checked | result | time (s) |",
           "|---|---|---:|---|---:|"]  # fmt: skip
    for r in doc["configs"]:
        for s in r.get("simulations", []):
            result = f"V {s['violated']}" if s.get("violated") else (
                "ERROR" if s.get("errors") else "no violation")  # fmt: skip
            n = s.get("states_checked")
            md.append(f"| {r['name']} | `{s['tlc_options']}` | {'-' if n is None else f'{n:,}'} "
                      f"| {result} | {s['seconds']} |")  # fmt: skip
    md += ["", "## The guarantee per invariant at these sizes", "",
           "*inductive*: covered by the inductive invariant (results/runtime_inductive.md), so it "
           "holds in every reachable state at these constants, to the extent of that report's "
           "sampled obligation 2; *exhaustive*: every reachable state was checked; *exhaustive "
           "to a depth*: every state up to the smallest depth below, and random behaviours to "
           "the simulated depth (docs/verification.md#the-inductive-argument).", "",
           "| invariant | guarantee | configs | exhaustive to depth | simulated to depth "
           "| simulated states |", "|---|---|---:|---:|---:|---:|"]  # fmt: skip
    for g in doc.get("guarantees", []):
        what = g["guarantee"]
        if what == "inductive":
            what += f" (at {g.get('inductive_commit')})"
        md.append(
            f"| {g['invariant']} | {what} | {g['configs']} | {_fmt(g['min_depth'])} "
            f"| {_fmt(g['simulated_depth'])} | {_fmt(g['simulated_states'])} |"
        )
    return "\n".join(md) + "\n"


def main_full(opts) -> int:
    cat = catalog_mod.load()
    spec = load_full()
    names = opts.only or spec["configs"]
    t0 = time.monotonic()
    found: list[Path] = []
    for n in names:
        tlc_trace.forget(f"Full_{n}")
    results = [check_full(cat, n, spec, opts, found) for n in names]
    write_full_report(results, spec, opts, time.monotonic() - t0, cat)
    bad = [r["name"] for r in results
           if (r.get("exhaustive") or {}).get("violated")
           or any(s.get("violated") for s in r["simulations"])]  # fmt: skip
    log(f"tlc-full: {len(results)} configs, violations in: {', '.join(bad) or 'none'}")
    for path in found:
        doc = tlc_trace.load(path)
        log("")
        log("\n".join(tlc_trace.header(doc, path)))
        log("\n".join(tlc_trace.render(doc, opts.all_vars)))
    return 1 if bad else 0


# ---------------------------------------------------------------------- main
def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="only the configs marked quick")
    ap.add_argument("--only", nargs="*", metavar="CONFIG",
                    help="only these configs of models/matrix.yaml (writes nothing to results/ "
                         "unless --merge); each violation's trace is printed")  # fmt: skip
    ap.add_argument("--all-vars", action="store_true",
                    help="print every variable of every state of a trace, not only the changes")  # fmt: skip
    ap.add_argument("--show", metavar="TRACE.json",
                    help="print a saved trace (.data/tlc/traces/ or results/tlc_traces/) and stop")  # fmt: skip
    ap.add_argument("--jobs", type=int, default=int(os.environ.get("TLC_JOBS", "2")))
    ap.add_argument("--workers", type=int, default=int(os.environ.get("TLC_WORKERS", "1")))
    ap.add_argument("--heap", default=os.environ.get("TLC_HEAP", "3g"))
    ap.add_argument("--timeout", type=int, default=int(os.environ.get("TLC_TIMEOUT", "2400")))
    ap.add_argument("--no-write", dest="write", action="store_false", default=None)
    ap.add_argument("--merge", action="store_true",
                    help="with --only: replace those configs in results/runtime_tlc.json")  # fmt: skip
    ap.add_argument("--report-only", action="store_true",
                    help="re-render results/runtime_tlc.md from results/runtime_tlc.json")  # fmt: skip
    ap.add_argument("--full", action="store_true",
                    help="models/full.yaml: the spec's sizes, budgeted, resumable")  # fmt: skip
    ap.add_argument("--fresh", action="store_true", help="with --full: ignore checkpoints")
    ap.add_argument("--budget-minutes", type=float, default=None,
                    help="with --full: per config (default: models/full.yaml)")  # fmt: skip
    ap.add_argument("--checkpoint-minutes", type=int, default=None,
                    help="with --full: TLC checkpoint interval (default: models/full.yaml)")  # fmt: skip
    ap.add_argument("--sim-minutes", type=float, default=None,
                    help="with --full: per simulation seed (default: models/full.yaml)")  # fmt: skip
    opts = ap.parse_args(argv)
    if opts.show:
        return show(opts.show, opts.all_vars)
    if opts.full:
        return main_full(opts)
    if opts.report_only:
        doc = json.loads((RESULTS / "runtime_tlc.json").read_text())
        cat = catalog_mod.load()
        rejudge(cat, doc["configs"])
        opts.jobs, opts.workers = doc["jobs"], doc["workers_per_run"]
        write_report(cat, doc["configs"], doc["wall_seconds"], opts, doc)
        dis = disagreements(doc["configs"], load_explanations())
        print(f"tlc: report re-rendered, {len(dis)} disagreement(s)")
        return 1 if dis else 0
    if opts.write is None:
        opts.write = not opts.quick and (not opts.only or opts.merge)
    try:
        cat = catalog_mod.load()
    except catalog_mod.CatalogError as e:
        print(f"tlc: {e}", file=sys.stderr)
        return 2
    configs = cat.configs
    if opts.quick:
        configs = [c for c in configs if c.quick]
    if opts.only:
        unknown = set(opts.only) - {c.name for c in configs}
        if unknown:
            print(f"tlc: unknown config(s): {', '.join(sorted(unknown))}", file=sys.stderr)
            return 2
        configs = [c for c in configs if c.name in opts.only]
    if opts.write:
        gen_cfg.generate(cat)  # every .cfg of the matrix, fresh
    previous = None
    if opts.merge:
        previous = json.loads((RESULTS / "runtime_tlc.json").read_text())
    scratch = None if opts.write else tempfile.TemporaryDirectory(prefix="tlc-cfg-")
    outdir = gen_cfg.GENERATED if scratch is None else Path(scratch.name)
    log(f"tlc: {len(configs)} configs, {opts.jobs} at a time, {opts.workers} worker(s) each")
    t0 = time.monotonic()
    # the biggest explorations first, so the two slots finish together
    order = sorted(
        configs,
        key=lambda c: (c.broken is not None, c.kind == "liveness", -int(c.constants.get("MaxClock", 0)), -len(c.events)),
    )  # fmt: skip
    with ThreadPoolExecutor(max_workers=max(1, opts.jobs)) as pool:
        futs = {c.name: pool.submit(check_config, cat, c, opts, outdir) for c in order}
        by_name = {n: f.result() for n, f in futs.items()}
    results = [by_name[c.name] for c in configs]
    if scratch is not None:
        scratch.cleanup()
    wall = time.monotonic() - t0
    if previous is not None:
        fresh = {r["name"]: r for r in results}
        old = {r["name"]: r for r in previous["configs"]}
        results = [
            fresh.get(c.name) or old[c.name]
            for c in cat.configs
            if c.name in fresh or c.name in old
        ]
        rejudge(cat, results)
        wall = previous["wall_seconds"]
        previous = {"merged_at": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")}
    if not opts.write:
        # a working run: its outcomes serve working Prove runs (models/tlc_pending.py)
        log(f"tlc: outcomes kept in {tlc_pending.save_working(results).relative_to(ROOT)}")
    if opts.write:
        write_report(cat, results, wall, opts)
        if TRACES.exists():
            keep = {f"{r['name']}__{n}.json" for r in results for n in r["invariants"]}
            for f in TRACES.glob("*.json"):
                if f.name not in keep:
                    f.unlink()
    dis = disagreements(results, load_explanations())
    log("")
    log(f"{'config':34} {'states':>12} {'depth':>5} {'time':>7}  result")
    for r in results:
        bad = [d for d in dis if d["config"] == r["name"]]
        log(
            f"{r['name']:34} {r['distinct']:>12,} {r['depth']:>5} {r['seconds']:>6}s  "
            + ("ok" if not bad else "; ".join(f"{d['invariant']}: {d['outcome']}" for d in bad))
        )
    log(f"tlc: {len(dis)} disagreement(s), wall {wall:.0f}s")
    for d in dis:
        log(f"  {d['config']}/{d['invariant']}: predicted {d['predicted']}, got {d['outcome']}"
            f" - {d['explanation']}")  # fmt: skip
    print_counterexamples(results, set(opts.only or ()), opts.all_vars)
    return 1 if dis else 0


def print_counterexamples(results: list[dict], named: set[str], all_vars: bool) -> None:
    """Each violation of this run, from its scratch file: printed in full when it disagrees
    with the prediction or its config was named by --only, else the file's name alone (the
    broken configs of --quick violate as predicted)."""
    for r in results:
        for inv, e in r["invariants"].items():
            path = tlc_trace.SCRATCH / tlc_trace.file_name(r["name"], inv)
            if e["outcome"] != "V" or not path.exists():
                continue
            doc = tlc_trace.load(path)
            log("")
            if e["agree"] and r["name"] not in named:
                log(f"counterexample {r['name']} / {inv} (as predicted): "
                    f"{tlc_trace.show_path(path)}")  # fmt: skip
                continue
            log("\n".join(tlc_trace.header(doc, path, e["predicted"])))
            log("\n".join(tlc_trace.render(doc, all_vars)))


def show(path: str, all_vars: bool) -> int:
    """`--show FILE`: print a saved trace."""
    try:
        doc = tlc_trace.load(Path(path))
    except ValueError as e:
        print(f"tlc: {e}", file=sys.stderr)
        return 2
    print("\n".join(tlc_trace.header(doc, None)))
    print("\n".join(tlc_trace.render(doc, all_vars)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
