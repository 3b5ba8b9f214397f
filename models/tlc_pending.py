"""Invariants the model names that the committed TLC results have not checked yet.

A new catalog row of layer M is in no config of results/runtime_tlc.json until TLC runs the
configs that name it.  The whole matrix takes about 25 minutes here; the cross-reference needs
only a quick run:

    python -m models.tlc --only Quick_t2_G1

command() picks those configs: the quick ones whose runs name the invariant, plus, when none
of them is a plain config (no broken variant, no toggle: what the Prove report cross-references,
prove/report.py tlc_outcomes), the plain one that took least time last.  models/gen_cfg.py
prints the command; the Prove report shows "not yet checked" with it instead of "n/a".

A run that writes nothing to results/ (`--only` without `--merge`, `--quick`) keeps its
outcomes in .data/tlc/working.json, stamped with a hash of the models it checked.  A working
Prove run takes a pending row's outcome from there while the models are unchanged; the
published report reads results/ alone, so it needs `--merge` (or `make tlc`).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
from pathlib import Path

from models import catalog as catalog_mod

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "results" / "runtime_tlc.json"
WORKING = ROOT / ".data" / "tlc" / "working.json"
# What a TLC outcome depends on: the specs, the catalog and the matrix.
MODEL_FILES = ("models/*.tla", "models/catalog.yaml", "models/matrix.yaml")


def read_results(path: Path = RESULTS) -> dict | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def naming(cat: catalog_mod.Catalog, name: str) -> list[catalog_mod.Config]:
    """The configs whose TLC runs check invariant `name`."""
    return [c for c in cat.configs if any(name in r.properties for r in cat.plan(c))]


def unchecked(cat: catalog_mod.Catalog, doc: dict | None) -> list[str]:
    """Layer-M rows that some config checks but no config of the results document has."""
    if doc is None:
        return []
    seen = {n for c in doc.get("configs", []) for n in c.get("invariants", {})}
    return [i.name for i in cat.invariants.values()
            if "M" in i.layers and i.name not in seen and naming(cat, i.name)]  # fmt: skip


def _plain(c: catalog_mod.Config) -> bool:
    return c.broken is None and not c.toggles and c.kind == "safety"


def command(cat: catalog_mod.Catalog, names: list[str], doc: dict | None,
            merge: bool = True) -> str:  # fmt: skip
    """The quick TLC run that checks `names` (and, with `merge`, puts them into results/)."""
    seconds = {c["name"]: c.get("seconds", 0) for c in (doc or {}).get("configs", [])}
    chosen: list[str] = []
    for name in names:
        cfgs = naming(cat, name)
        pick = [c for c in cfgs if c.quick]
        plain = [c for c in cfgs if _plain(c)]
        if plain and not any(_plain(c) for c in pick):
            pick.append(min(plain, key=lambda c: seconds.get(c.name, float("inf"))))
        if not pick:
            pick = [min(cfgs, key=lambda c: seconds.get(c.name, float("inf")))]
        chosen += [c.name for c in pick if c.name not in chosen]
    return f"python -m models.tlc --only {' '.join(chosen)}" + (" --merge" if merge else "")


def note(cat: catalog_mod.Catalog, doc: dict | None) -> str | None:
    """One line for the generator to print, or None when nothing is pending."""
    names = unchecked(cat, doc)
    if not names:
        return None
    return (f"not yet checked by TLC (absent from results/runtime_tlc.json): {', '.join(names)}; "
            f"run `{command(cat, names, doc, merge=False)}` (a working Prove run reads it; "
            "add --merge to publish it in results/)")  # fmt: skip


def models_hash(root: Path = ROOT) -> str:
    """A hash of the files a TLC outcome depends on."""
    h = hashlib.sha256()
    for pattern in MODEL_FILES:
        for p in sorted(root.glob(pattern)):
            h.update(p.relative_to(root).as_posix().encode() + b"\0" + p.read_bytes())
    return h.hexdigest()[:16]


def save_working(results: list[dict], path: Path = WORKING) -> Path:
    """Keep a working run's per-config outcomes, replacing earlier ones of the same config;
    configs checked against other models are dropped, as they no longer say anything."""
    stamp = models_hash()
    doc = read_results(path) or {}
    configs = {c["name"]: c for c in doc.get("configs", []) if doc.get("models_hash") == stamp}
    configs.update({r["name"]: r for r in results})
    doc = {"models_hash": stamp, "configs": list(configs.values()),
           "updated": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")}  # fmt: skip
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc, indent=1))
    return path


def read_working(path: Path = WORKING) -> dict | None:
    """The working outcomes, if they were checked against the models as they are now."""
    doc = read_results(path)
    if doc is None or doc.get("models_hash") != models_hash():
        return None
    return doc
