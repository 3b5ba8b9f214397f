"""Invariants the model names that the committed TLC results have not checked yet.

A new catalog row of layer M is in no config of results/runtime_tlc.json until TLC runs the
configs that name it.  The whole matrix takes about 45 minutes; the cross-reference needs only
a quick run, merged into the results:

    python -m models.tlc --only Quick_t2_G1 --merge

command() picks those configs: the quick ones whose runs name the invariant, plus, when none
of them is a plain config (no broken variant, no toggle: what the Prove report cross-references,
prove/report.py tlc_outcomes), the plain one that took least time last.  models/gen_cfg.py
prints the command; the Prove report shows "not yet checked" with it instead of "n/a".
"""

from __future__ import annotations

import json
from pathlib import Path

from models import catalog as catalog_mod

RESULTS = Path(__file__).resolve().parents[1] / "results" / "runtime_tlc.json"


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


def command(cat: catalog_mod.Catalog, names: list[str], doc: dict | None) -> str:
    """The quick TLC run that checks `names` and merges them into the results."""
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
    return f"python -m models.tlc --only {' '.join(chosen)} --merge"


def note(cat: catalog_mod.Catalog, doc: dict | None) -> str | None:
    """One line for the generator to print, or None when nothing is pending."""
    names = unchecked(cat, doc)
    if not names:
        return None
    return (f"not yet checked by TLC (absent from results/runtime_tlc.json): {', '.join(names)}; "
            f"run `{command(cat, names, doc)}`")  # fmt: skip
