"""Check the inductive invariant of models/RuntimeInductive.tla with TLC and write the report.

    python -m models.inductive           # `make tlc-inductive`: writes results/runtime_inductive.*
    python -m models.inductive --quick   # one config, few draws; writes nothing
    python -m models.inductive --only Interlock_t2_G1 --draws 20000   # a short look

What it runs (models/inductive.yaml), per config at the spec's base constants:
  obligation 1  Init => IInv: TLC from Init, every invariant of IInv checked (one state);
  obligation 2  IInv /\\ Next => IInv': TLC from `draws` random states of IInv
                (RuntimeInductive!SampleInit, seeded), every successor checked, none expanded;
  obligation 3  IInv => Safety: Safety is IInv's first conjunct, so it holds by construction;
                TLC checks it on every state of the two runs above as well.
Then the checks that the argument can fail: each broken variant of Runtime.tla and each
auxiliary conjunct left out (Drop) must make an obligation fail; and the sanity check that IInv
holds on every reachable state at a short clock (an IInv that is not an invariant at all would
pass obligation 2 vacuously on states that never occur and still prove nothing).

The report (results/runtime_inductive.md and .json) records the commit and the dirty flag, the
TLC version, the seed, and per run the method, the states and the time.
Exit status: 0 when every obligation holds, IInv holds on every reachable state checked,
every broken variant in scope is caught and at least one dropped conjunct is, else 1.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import json
import os
import re
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import yaml

from models import catalog as catalog_mod
from models import gen_cfg, tlc_trace
from models import tlc as tlc_mod

ROOT = Path(__file__).resolve().parents[1]
MODELS = ROOT / "models"
SPEC_FILE = MODELS / "RuntimeInductive.tla"
SETTINGS = MODELS / "inductive.yaml"
WORK = ROOT / ".data" / "tlc-inductive"
RESULTS = ROOT / "results"
LABEL = (
    "model check of an inductive invariant for the stated constants, not a proof of the "
    "Python or SQL; obligation 2 is checked on random states of IInv"
)


# ---------------------------------------------------------------------- the module's names
def _definition(text: str, name: str) -> str:
    m = re.search(rf"^{name} ==\n(.*?)(?=\n\n|\n\(\*|\n-{{5}})", text, re.S | re.M)
    if not m:
        raise SystemExit(f"{SPEC_FILE.name}: no definition of {name}")
    return m.group(1)


def covered() -> list[str]:
    """The invariants of Safety, in order."""
    return re.findall(r"[A-Z]\w+", _definition(SPEC_FILE.read_text(), "Safety"))


def aux_names() -> list[str]:
    """The auxiliary conjuncts, in order: the tuple AuxNames (Aux, which follows it, names each
    again, so only the tuple is read)."""
    m = re.search(r"^AuxNames ==\s*<<(.*?)>>", SPEC_FILE.read_text(), re.S | re.M)
    if not m:
        raise SystemExit(f"{SPEC_FILE.name}: no AuxNames tuple")
    return re.findall(r'"(\w+)"', m.group(1))


# ---------------------------------------------------------------------- one TLC run
@dataclasses.dataclass
class Job:
    name: str  # file stem under .data/tlc-inductive/
    kind: str  # init | step | reach
    config: str  # the matrix config it takes mode, tier and toggles from
    constants: dict[str, str]
    invariants: list[str]
    draws: int = 0
    broken: str | None = None
    drop: str = "none"


def job_constants(cat, config: str, consts: dict, broken: str | None, settings: dict,
                  draws: int, drop: str) -> dict[str, str]:  # fmt: skip
    base = cat.config(config)
    merged = dict(base.constants)
    merged.update(consts)
    cfg = dataclasses.replace(base, constants=merged, events=tuple(cat.events), broken=broken)
    out = gen_cfg.constants(cat, cfg)
    out["Samples"] = str(max(draws, 1))
    out["EpochMax"] = str(settings["epoch_max"])
    out["Drop"] = f'"{drop}"'
    return out


def write_job(job: Job) -> Path:
    WORK.mkdir(parents=True, exist_ok=True)
    tla = WORK / f"{job.name}.tla"
    tla.write_text(
        f"---- MODULE {job.name} ----\n"
        "\\* written by models/inductive.py; do not edit.\n"
        "EXTENDS RuntimeInductive\n====\n"
    )
    lines = ["CONSTANTS"] + [f"    {k} = {v}" for k, v in job.constants.items()]
    if job.kind == "step":
        lines += ["INIT SampleInit", "NEXT Next", "CONSTRAINT OneStep"]
    elif job.kind == "init":
        lines += ["INIT Init", "NEXT Next", "CONSTRAINT OneStep"]
    else:
        lines += ["INIT Init", "NEXT Next", "SYMMETRY Symm"]
    lines += [f"INVARIANT {i}" for i in job.invariants]
    cfg = WORK / f"{job.name}.cfg"
    cfg.write_text("\n".join(lines) + "\n")
    return cfg


def run_job(job: Job, seed: int, heap: str) -> dict:
    cfg = write_job(job)
    cmd = [str(tlc_mod.RUN_TLC), "-workers", "1", "-heap", heap, str(cfg.with_suffix(".tla")),
           str(cfg), "-seed", str(seed)]  # fmt: skip
    # TLC unpacks its standard modules into java.io.tmpdir; two runs sharing /tmp can read
    # each other's half-written copy (a spurious "Parsing or semantic analysis failed")
    tmp = WORK / "tmp" / job.name
    tmp.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "JAVA_TOOL_OPTIONS": f"-Djava.io.tmpdir={tmp}"}
    t0 = time.monotonic()
    p = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, env=env)
    text = p.stdout + "\n" + p.stderr
    res = tlc_mod.parse_output(text, p.returncode)
    m = re.search(r"Finished computing initial states: ([\d,]+) (?:distinct )?states? generated"
                  r"(?:, with ([\d,]+) of them distinct)?", text)  # fmt: skip
    initial = None
    if m:
        initial = int((m.group(2) or m.group(1)).replace(",", ""))
    out = {
        "name": job.name,
        "kind": job.kind,
        "config": job.config,
        "broken": job.broken,
        "drop": job.drop,
        "draws": job.draws if job.kind == "step" else None,
        "initial_states": initial,
        "generated": res["generated"],
        "distinct": res["distinct"],
        "violated": res["violated"],
        "success": res["success"],
        "errors": res["errors"],
        "seconds": round(time.monotonic() - t0, 1),
        "tlc_version": res["version"],
        "trace": res["trace"],
    }
    if res["violated"] and len(res["trace"]) >= 2:
        out["action"] = res["trace"][-1]["action"]
        # saved where `python -m models.tlc --show` prints it
        trace = tlc_trace.document(job.name, res["violated"], "inductive", res["version"],
                                   job.constants, None, res["trace"])  # fmt: skip
        out["trace_file"] = str(tlc_trace.save(trace).relative_to(ROOT))
    tag = "holds" if res["success"] else (f"violates {res['violated']}" if res["violated"]
                                           else "ERROR " + "; ".join(res["errors"])[:200])  # fmt: skip
    tlc_mod.log(f"  {job.name}: {tag} ({out['seconds']} s, initial {initial}, "
                f"distinct {res['distinct']})")  # fmt: skip
    return out


# ---------------------------------------------------------------------- the plan
def plan(cat, settings: dict, opts) -> list[Job]:
    inv = covered()
    aux = aux_names()
    all_inv = ["Safety"] + aux
    base = settings["constants"]
    draws = opts.draws or settings["draws"]
    configs = opts.only or settings["configs"]
    jobs: list[Job] = []
    for c in configs:
        k = job_constants(cat, c, base, None, settings, 1, "none")
        jobs.append(Job(f"Init_{c}", "init", c, k, all_inv))
        k = job_constants(cat, c, base, None, settings, draws, "none")
        jobs.append(Job(f"Step_{c}", "step", c, k, all_inv, draws=draws))
    if opts.quick or opts.only:
        return jobs
    reach = settings["reachable"]
    for c in reach["configs"]:
        k = job_constants(cat, c, {**base, **reach["constants"]}, None, settings, 1, "none")
        jobs.append(Job(f"Reach_{c}", "reach", c, k, ["IInv"]))
    for name, b in cat.broken.items():
        if b.spec != "Runtime" or name in settings["out_of_scope"]:
            continue
        c = f"Broken_{name}"
        consts = {**base, **b.constants}
        bd = settings["broken_draws"]
        k = job_constants(cat, c, consts, name, settings, bd, "none")
        jobs.append(Job(f"Broken_{name}", "step", c, k, all_inv, draws=bd, broken=name))
    del inv
    return jobs


def drop_jobs(cat, settings: dict, conjunct: str) -> list[Job]:
    jobs = []
    for c in settings["drop_configs"]:
        d = settings["drop_draws"]
        k = job_constants(cat, c, settings["constants"], None, settings, d, conjunct)
        invs = ["Safety"] + [a for a in aux_names() if a != conjunct]
        jobs.append(Job(f"Drop_{conjunct}_{c}", "step", c, k, invs, draws=d, drop=conjunct))
    return jobs


def ref_jobs(cat, settings: dict) -> list[Job]:
    """Whole IInv at the drop runs' draws: the same seed draws the same states, so a drop run
    that keeps exactly as many states as this one drew none that violates its conjunct."""
    jobs = []
    for c in settings["drop_configs"]:
        d = settings["drop_draws"]
        k = job_constants(cat, c, settings["constants"], None, settings, d, "none")
        jobs.append(Job(f"DropRef_{c}", "step", c, k, ["Safety", *aux_names()], draws=d))
    return jobs


def run_drop(cat, settings: dict, conjunct: str, seed: int, heap: str,
             refs: dict[str, int] | None = None) -> dict:  # fmt: skip
    """Leave `conjunct` out of IInv and look for a successor that breaks the rest.  Status:
    caught (a counterexample to induction), built in (no draw violated the conjunct: the
    sampler constructs it, so leaving it out cannot be tested this way), or not shown needed
    (draws violated it, and still no step broke the rest)."""
    tried = []
    for job in drop_jobs(cat, settings, conjunct):
        r = run_job(job, seed, heap)
        tried.append(r)
        if r["violated"] or r["errors"]:
            break
    last = tried[-1]
    if last["violated"]:
        status = "caught"
    elif refs and all(r["initial_states"] == refs.get(r["config"]) for r in tried):
        status = "built in"
    else:
        status = "not shown needed"
    return {"conjunct": conjunct, "caught": bool(last["violated"]), "status": status,
            "runs": tried}  # fmt: skip


# ---------------------------------------------------------------------- report
def verdict(doc: dict) -> bool:
    ok = all(r["success"] for r in doc["obligations"] + doc["reachable"])
    ok = ok and all(r["violated"] for r in doc["broken"])
    # at least one dropped conjunct must be caught: the report shows inductiveness failing
    # with a counterexample; the others are reported as they came out (caught, built in, or
    # not shown needed by this sample)
    drops = doc["drops"]
    return ok and (not drops or any(d["caught"] for d in drops))


def render(doc: dict) -> str:
    md = ["# The inductive invariant of Runtime.tla", ""]
    md += [f"Generated by `make tlc-inductive` (python -m models.inductive) at commit "
           f"{doc['git_commit']} ({'dirty' if doc['git_dirty'] else 'clean'}), "
           f"{doc['generated_at']}, TLC {doc['tlc_version']}, seed {doc['seed']}, "
           f"{doc['wall_seconds'] / 60:.1f} minutes on this machine.", "",
           f"*{doc['label']}.*", ""]  # fmt: skip
    c = doc["constants"]
    md += ["Constants (the spec's base): " + ", ".join(f"{k} {v}" for k, v in c.items())
           + "; Workers {w1, w2}; every world event; runtime mode, no failover, A1 and A2 "
           "assumed (models/RuntimeInductive.tla, docs/verification.md#the-inductive-argument).",
           ""]  # fmt: skip
    md += ["**Rule, stated before the data.** An obligation holds when TLC ends without a "
           "violation. Obligations 1 and 3 are exhaustive (Init is one state; Safety is a "
           "conjunct of IInv). Obligation 2 is checked on the successors of random states of "
           "IInv: it can miss a counterexample, so every broken variant and every dropped "
           "auxiliary conjunct below must be caught by the same sampler, or the report fails.",
           ""]  # fmt: skip
    md += [f"**Verdict: {'all obligations hold, every break caught' if doc['ok'] else 'FAILED'}"
           "**", ""]  # fmt: skip
    md += ["## Covered invariants", "",
           "Inductive at these constants (all reachable states, to the extent of the sample): "
           + ", ".join(doc["covered"]) + ".", "",
           f"Auxiliary conjuncts ({len(doc['aux'])}): " + ", ".join(doc["aux"]) + ".", ""]  # fmt: skip
    md += ["## The three obligations", "",
           "| config | 1: Init ⇒ IInv | 2: IInv ∧ Next ⇒ IInv′ (sampled) | 3: IInv ⇒ Safety | s |",
           "|---|---|---|---|---|"]  # fmt: skip
    by = {(r["kind"], r["config"]): r for r in doc["obligations"]}
    for cfg in doc["configs"]:
        i, s = by.get(("init", cfg)), by.get(("step", cfg))
        if not (i and s):
            continue

        def res(r):
            if r["success"]:
                return "holds"
            return f"**{r['violated'] or 'error'}**"

        two = (f"{res(s)}: {s['draws']:,} draws, {s['initial_states']:,} states of IInv, "
               f"{s['generated']:,} successors ({s['distinct']:,} distinct)")  # fmt: skip
        three = (
            f"by construction; checked on {(i['distinct'] or 0) + (s['distinct'] or 0):,} states"
        )
        md.append(f"| {cfg} | {res(i)} (exhaustive, {i['initial_states']} state) | {two} | "
                  f"{three} | {i['seconds'] + s['seconds']:.0f} |")  # fmt: skip
    md += [
        "",
        "## IInv on every reachable state (exhaustive, short clock)",
        "",
        "| config | constants | result | distinct states | s |",
        "|---|---|---|---|---|",
    ]
    for r in doc["reachable"]:
        md.append(f"| {r['config']} | MaxClock {doc['reachable_constants'].get('MaxClock')} | "
                  f"{'holds' if r['success'] else r['violated'] or 'error'} | "
                  f"{r['distinct'] or 0:,} | {r['seconds']:.0f} |")  # fmt: skip
    md += ["", "## Each broken variant breaks obligation 2", "",
           "| variant | tier of | result | by the step | states of IInv drawn | s |",
           "|---|---|---|---|---|---|"]  # fmt: skip
    for r in doc["broken"]:
        res = f"violates {r['violated']}" if r["violated"] else "**not caught**"
        md.append(f"| {r['broken']} | {r['config']} | {res} | {r.get('action', '-')} | "
                  f"{r['initial_states'] or 0:,} | {r['seconds']:.0f} |")  # fmt: skip
    for name, why in doc["out_of_scope"].items():
        md.append(f"| {name} | - | outside the scope: {why} | - | - | - |")
    md += [
        "",
        "## Each auxiliary conjunct is needed",
        "",
        "IInv without the conjunct, sampled the same way (same seed, fewer draws): *caught* "
        "names the first invariant a successor broke and the step that broke it; *built in* "
        "means no draw violated the conjunct (the drop run kept exactly the states the whole "
        "IInv kept), because the sampler constructs it, so leaving it out cannot be tested "
        "by sampling (docs/verification.md#the-sampler).",
        "",
        "| left out | result | in | violates | by the step | s |",
        "|---|---|---|---|---|---|",
    ]
    for d in doc["drops"]:
        last = d["runs"][-1]
        secs = sum(r["seconds"] for r in d["runs"])
        status = d["status"] if d["status"] != "not shown needed" else "**not shown needed**"
        where = last["config"] if d["caught"] else ", ".join(r["config"] for r in d["runs"])
        md.append(
            f"| {d['conjunct']} | {status} | {where} | {last['violated'] or '-'} "
            f"| {last.get('action', '-')} | {secs:.0f} |"
        )
    ex = next((d for d in doc["drops"] if d["caught"]), None)
    if ex:
        last = ex["runs"][-1]
        md += ["", f"## A counterexample to induction, read: IInv without {ex['conjunct']}", "",
               f"TLC starts from a state of IInv without {ex['conjunct']} and takes the step "
               f"{last.get('action')}; the successor breaks {last['violated']}. State 1 is the "
               "drawn state, state 2 shows only what the step changed (`python -m models.tlc "
               f"--show {last.get('trace_file')}` prints it again).", "", "```text"]  # fmt: skip
        doc_t = tlc_trace.document(last["name"], last["violated"], "inductive", None, {}, None,
                                   last["trace"])  # fmt: skip
        md += tlc_trace.render(doc_t)
        md += ["```", ""]
    return "\n".join(md) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="one config, 20,000 draws; no report")
    ap.add_argument("--only", nargs="*", help="these configs' obligations only; no report")
    ap.add_argument("--draws", type=int, help="draws per config for obligation 2")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--heap", default="3g")
    opts = ap.parse_args(argv)
    settings = yaml.safe_load(SETTINGS.read_text())
    if opts.quick:
        opts.only = opts.only or ["Interlock_t2_G1"]
        opts.draws = opts.draws or 20000
    cat = catalog_mod.load()
    seed = settings["seed"]
    t0 = time.monotonic()
    jobs = plan(cat, settings, opts)
    tlc_mod.log(f"tlc-inductive: {len(jobs)} runs, seed {seed}")
    with ThreadPoolExecutor(opts.jobs) as pool:
        results = list(pool.map(lambda j: run_job(j, seed, opts.heap), jobs))
        drops = []
        if not (opts.quick or opts.only):
            refs = {r["config"]: r["initial_states"]
                    for r in pool.map(lambda j: run_job(j, seed, opts.heap),
                                      ref_jobs(cat, settings))}  # fmt: skip
            drops = list(pool.map(lambda a: run_drop(cat, settings, a, seed, opts.heap, refs),
                                  aux_names()))  # fmt: skip
    wall = time.monotonic() - t0
    obligations = [r for r in results if r["kind"] in ("init", "step") and not r["broken"]]
    doc = {
        "generated_at": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "git_commit": tlc_mod.git_commit(),
        "git_dirty": tlc_mod.git_dirty(),
        "tlc_version": next((r["tlc_version"] for r in results if r["tlc_version"]), "unknown"),
        "label": LABEL,
        "seed": seed,
        "constants": settings["constants"],
        "epoch_max": settings["epoch_max"],
        "wall_seconds": round(wall, 1),
        "covered": covered(),
        "aux": aux_names(),
        "configs": opts.only or settings["configs"],
        "obligations": obligations,
        "reachable": [r for r in results if r["kind"] == "reach"],
        "reachable_constants": settings["reachable"]["constants"],
        "broken": [r for r in results if r["broken"]],
        "out_of_scope": settings["out_of_scope"],
        "drops": drops,
    }
    doc["ok"] = verdict(doc)
    errors = [r for r in results if r["errors"]]
    for r in errors:
        tlc_mod.log(f"ERROR {r['name']}: {'; '.join(r['errors'])[:400]}")
    if not (opts.quick or opts.only):
        RESULTS.mkdir(exist_ok=True)
        (RESULTS / "runtime_inductive.json").write_text(json.dumps(doc, indent=1) + "\n")
        (RESULTS / "runtime_inductive.md").write_text(render(doc))
        tlc_mod.log("wrote results/runtime_inductive.md and .json")
    tlc_mod.log(f"tlc-inductive: {'OK' if doc['ok'] else 'FAILED'} in {wall / 60:.1f} min")
    return 0 if doc["ok"] and not errors else 1


if __name__ == "__main__":
    sys.exit(main())
