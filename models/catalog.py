"""Load and validate the invariant catalog (models/catalog.yaml) and the TLC matrix (matrix.yaml).

The catalog is the single source of truth for invariant names (docs/design.md#invariant-catalog). Loading validates it:
a typo in a name, an unknown mode, tier, event or toggle is a CatalogError naming the file and
the entry.  The pieces a row names that are written elsewhere (its operator in the .tla module,
its code check in conformance/invariants.py's INVARIANTS, its Reach_* witness and the witness's
operator) are collected over every row and refused together, in one MissingPieces message
(docs/invariants.md walks through writing them).

Importable as `models.catalog` or by path (it imports nothing from the project; the code
checks are read as text).

    cat = load()                         # models/catalog.yaml + models/matrix.yaml
    cat.predict("NoOverlappingSends", cat.config("Interlock_t2_G1"))   # -> "hold"
    cat.plan(cat.config("Interlock_t2_G1"))                            # -> [Run, ...]
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import yaml

HERE = Path(__file__).resolve().parent
CATALOG = HERE / "catalog.yaml"
MATRIX = HERE / "matrix.yaml"
# The code checks of layer C (read as text: models never imports the harnesses above it)
CHECKS = HERE.parent / "conformance" / "invariants.py"
GUIDE = "docs/invariants.md"

INV_VALUES = ("hold", "V", "n/a")
WIT_VALUES = ("reach", "n/a")
LAYERS = ("M", "C")
KINDS = ("safety", "liveness")
RULE_KEYS = ("value", "tiers", "events_any", "toggles_any")
_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml: 20x faster than pure Python
IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")

# tier label -> (Tier, Queryable) constants of Runtime.tla
TIER_CONSTANTS = {"t1q": (1, True), "t1": (1, False), "t2": (2, True), "t3": (3, False)}


class CatalogError(ValueError):
    """A catalog or matrix problem; the message names the file and the entry."""

    def __init__(self, path: Path | str, entry: str, msg: str):
        self.path, self.entry, self.msg = str(path), entry, msg
        super().__init__(f"{_show(path)}: {entry}: {msg}")


class MissingPieces(CatalogError):
    """Rows that name pieces written elsewhere (a TLA+ operator, a code check, a witness) which
    do not exist yet: every one of them, in one message."""

    def __init__(self, path: Path | str, missing: dict[str, list[str]]):
        self.missing = missing
        n = sum(len(v) for v in missing.values())
        lines = [f"{n} (write them all, then run `python -m models.gen_cfg` again; {GUIDE} "
                 "says how):"]  # fmt: skip
        for entry, pieces in missing.items():
            lines.append(f"  {entry}:")
            lines += [f"    - {p}" for p in pieces]
        super().__init__(path, "missing pieces", "\n".join(lines))


def code_checks(path: Path = CHECKS) -> set[str] | None:
    """The keys of INVARIANTS in conformance/invariants.py, read without importing it (None
    when the file is absent, as outside a checkout)."""
    import ast

    if not path.exists():
        return None
    for node in ast.parse(path.read_text()).body:
        target = node.target if isinstance(node, ast.AnnAssign) else (
            node.targets[0] if isinstance(node, ast.Assign) else None)  # fmt: skip
        if isinstance(target, ast.Name) and target.id == "INVARIANTS":
            if isinstance(node.value, ast.Dict):
                return {k.value for k in node.value.keys if isinstance(k, ast.Constant)}
    return set()


def _show(path: Path | str) -> str:
    p = Path(path)
    try:
        return str(p.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(p)


@dataclass(frozen=True)
class Invariant:
    name: str
    meaning: str
    layers: tuple[str, ...]
    kind: str = "safety"
    spec: str | None = None
    operator: str | None = None
    check: str | None = None
    predict: dict[str, Any] = field(default_factory=dict)
    broken_by: tuple[str, ...] = ()
    witnesses: tuple[str, ...] = ()
    # covered by the inductive argument of models/RuntimeInductive.tla (its Safety)
    inductive: bool = False


@dataclass(frozen=True)
class Witness:
    name: str
    meaning: str
    spec: str
    operator: str
    predict: dict[str, Any]


@dataclass(frozen=True)
class Broken:
    name: str
    spec: str
    value: str
    meaning: str
    constants: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Config:
    name: str
    spec: str
    mode: str
    tier: str | None
    events: tuple[str, ...]
    toggles: tuple[str, ...]
    broken: str | None
    kind: str
    quick: bool
    constants: dict[str, Any]
    properties: tuple[str, ...] = ()
    expect: dict[str, str] = field(default_factory=dict)
    why: str = ""


@dataclass(frozen=True)
class Run:
    """One TLC invocation: a generated .cfg checking `properties` of one config."""

    config: str
    cfg: str  # file name under models/generated/
    spec: str
    purpose: str  # hold | violate | liveness
    properties: tuple[str, ...]
    expected: str  # hold | V
    witnesses: tuple[str, ...] = ()  # Reach_* predicates noted during the same exploration


@dataclass
class Catalog:
    path: Path
    matrix_path: Path
    modes: tuple[str, ...]
    tiers: tuple[str, ...]
    events: tuple[str, ...]
    toggles: tuple[str, ...]
    specs: tuple[str, ...]
    broken: dict[str, Broken]
    invariants: dict[str, Invariant]
    witnesses: dict[str, Witness]
    event_groups: dict[str, tuple[str, ...]]
    defaults: dict[str, dict[str, Any]]
    configs: list[Config]

    # ------------------------------------------------------------------ queries
    def config(self, name: str) -> Config:
        for c in self.configs:
            if c.name == name:
                return c
        raise KeyError(name)

    def checks(self) -> dict[str, str]:
        """Invariant name -> code check name, for every layer-C row."""
        return {i.name: i.check for i in self.invariants.values() if "C" in i.layers}

    def predict(self, name: str, cfg: Config) -> str:
        """The catalog's prediction for invariant or witness `name` in config `cfg`."""
        if name in cfg.expect:
            return cfg.expect[name]
        row = self.invariants.get(name) or self.witnesses[name]
        if row.spec != cfg.spec:
            return "n/a"
        if isinstance(row, Invariant) and cfg.kind == "safety" and row.kind == "liveness":
            return "n/a"
        if isinstance(row, Invariant) and row.kind == "safety" and cfg.kind == "liveness":
            return "n/a"
        return _eval(row.predict[cfg.mode], cfg)

    def plan(self, cfg: Config) -> list[Run]:
        """The TLC runs for one config (see matrix.yaml)."""
        runs: list[Run] = []

        def run(purpose: str, props: list[str], expected: str, suffix: str, wits=()) -> None:
            runs.append(
                Run(
                    cfg.name,
                    f"{cfg.name}__{suffix}.cfg",
                    cfg.spec,
                    purpose,
                    tuple(props),
                    expected,
                    tuple(wits),
                )  # fmt: skip
            )

        if cfg.broken:
            for inv in self.invariants.values():
                if cfg.broken in inv.broken_by:
                    run("violate", [inv.name], "V", inv.name)
            return runs
        if cfg.kind == "liveness":
            holds = [p for p in cfg.properties if self.predict(p, cfg) == "hold"]
            if holds:
                run("liveness", holds, "hold", "live", self._witnesses_for(holds, cfg))
            for p in cfg.properties:
                if self.predict(p, cfg) == "V":
                    run("liveness", [p], "V", p)
            return runs
        rows = [
            i
            for i in self.invariants.values()
            if "M" in i.layers and i.spec == cfg.spec and i.kind == "safety"
        ]
        holds = [i.name for i in rows if self.predict(i.name, cfg) == "hold"]
        if holds:
            run("hold", holds, "hold", "hold", self._witnesses_for(holds, cfg))
        for i in rows:
            if self.predict(i.name, cfg) == "V":
                run("violate", [i.name], "V", i.name)
        return runs

    def _witnesses_for(self, names: list[str], cfg: Config) -> list[str]:
        out: list[str] = []
        for n in names:
            for w in self.invariants[n].witnesses:
                if w not in out and self.predict(w, cfg) == "reach":
                    out.append(w)
        return out

    def vacuous(self, cfg: Config) -> list[str]:
        """Hold-predicted invariants of cfg with no witness predicted reachable in cfg."""
        out = []
        for i in self.invariants.values():
            if "M" not in i.layers or self.predict(i.name, cfg) != "hold" or cfg.broken:
                continue
            if not any(self.predict(w, cfg) == "reach" for w in i.witnesses):
                out.append(i.name)
        return out


def prediction(pred: Any, tier: str, events: tuple[str, ...] = (),
               toggles: tuple[str, ...] = ()) -> str:  # fmt: skip
    """A prediction (a value or a list of rules) in a setting given by its parts rather than
    by a TLC config: the fault matrix asks what the catalog predicts for a cell."""
    from types import SimpleNamespace

    return _eval(pred, cast(Config, SimpleNamespace(tier=tier, events=events, toggles=toggles)))


def _eval(pred: Any, cfg: Config) -> str:
    if isinstance(pred, str):
        return pred
    for rule in pred:
        if "tiers" in rule and cfg.tier not in rule["tiers"]:
            continue
        if "events_any" in rule and not set(rule["events_any"]) & set(cfg.events):
            continue
        if "toggles_any" in rule and not set(rule["toggles_any"]) & set(cfg.toggles):
            continue
        return rule["value"]
    raise AssertionError("validated lists end with an unconditional rule")


# ---------------------------------------------------------------------- loading and validation
def _read(path: Path) -> dict[str, Any]:
    try:
        data = yaml.load(path.read_text(), Loader=_Loader)
    except FileNotFoundError:
        raise CatalogError(path, "file", "not found") from None
    except yaml.YAMLError as e:
        raise CatalogError(path, "file", f"not valid YAML: {e}") from None
    if not isinstance(data, dict):
        raise CatalogError(path, "file", "top level must be a mapping")
    return data


def _keys(path: Path, entry: str, d: Any, required: tuple, allowed: tuple) -> None:
    if not isinstance(d, dict):
        raise CatalogError(path, entry, "must be a mapping")
    for k in required:
        if k not in d or d[k] in (None, "", []):
            raise CatalogError(path, entry, f"missing '{k}'")
    for k in d:
        if k not in allowed:
            raise CatalogError(path, entry, f"unknown key '{k}' (allowed: {', '.join(allowed)})")


def _names(path: Path, entry: str, what: str, items: Any, known: tuple | dict) -> tuple[str, ...]:
    if items is None:
        return ()
    if not isinstance(items, list):
        raise CatalogError(path, entry, f"{what} must be a list")
    for it in items:
        if it not in known:
            raise CatalogError(
                path, entry, f"unknown {what} '{it}' (known: {', '.join(sorted(known))})"
            )
    return tuple(items)


def _operators(tla: Path) -> set[str]:
    text = re.sub(r"\(\*.*?\*\)", "", tla.read_text(), flags=re.S)
    return set(re.findall(r"^\s*([A-Za-z_][A-Za-z0-9_]*)\s*(?:\([^)]*\))?\s*==", text, flags=re.M))


def _check_predict(path: Path, entry: str, pred: Any, values: tuple, cat: dict) -> dict:
    if not isinstance(pred, dict):
        if isinstance(pred, str):
            pred = {m: pred for m in cat["modes"]}
        else:
            raise CatalogError(path, entry, "predict must be a value or a mapping mode -> value")
    for mode in pred:
        if mode not in cat["modes"]:
            raise CatalogError(
                path, entry, f"predict: unknown mode '{mode}' (known: {', '.join(cat['modes'])})"
            )
    for mode in cat["modes"]:
        if mode not in pred:
            raise CatalogError(path, entry, f"predict: no prediction for mode '{mode}'")
        p = pred[mode]
        if isinstance(p, str):
            if p not in values:
                raise CatalogError(path, entry, f"predict[{mode}]: '{p}' is not one of {values}")
            continue
        if not isinstance(p, list) or not p:
            raise CatalogError(path, entry, f"predict[{mode}]: must be a value or a list of rules")
        for j, rule in enumerate(p):
            where = f"predict[{mode}][{j}]"
            _keys(path, f"{entry}: {where}", rule, ("value",), RULE_KEYS)
            if rule["value"] not in values:
                raise CatalogError(path, entry, f"{where}: '{rule['value']}' not one of {values}")
            _names(path, f"{entry}: {where}", "tier", rule.get("tiers"), cat["tiers"])
            _names(path, f"{entry}: {where}", "event", rule.get("events_any"), cat["events"])
            _names(path, f"{entry}: {where}", "toggle", rule.get("toggles_any"), cat["toggles"])
        if len(p[-1]) != 1:
            raise CatalogError(path, entry, f"predict[{mode}]: the last rule needs no condition")
    return pred


def load(catalog: Path | str | None = None, matrix: Path | str | None = None,
         checks: Path | None = CHECKS) -> Catalog:  # fmt: skip
    """Load and validate the catalog and the matrix; raise CatalogError on the first malformed
    entry, or MissingPieces listing every piece the rows name that is not written yet (a TLA+
    operator, a code check in `checks`, a Reach_* witness).

    Operators are checked against <catalog dir>/<spec>.tla; if matrix is None and no matrix.yaml
    sits beside the catalog, the matrix is empty.  checks=None skips the code checks.
    """
    cpath = Path(catalog) if catalog else CATALOG
    if matrix is None:
        mpath = cpath.parent / "matrix.yaml"
    else:
        mpath = Path(matrix)
    data = _read(cpath)
    top = ("modes", "tiers", "events", "toggles", "specs", "broken", "invariants", "witnesses")
    _keys(cpath, "top level", data, ("modes", "invariants"), top)
    cat: dict[str, Any] = {k: tuple(data.get(k) or ()) for k in ("modes", "tiers", "events")}
    cat["toggles"] = tuple(data.get("toggles") or ())
    cat["specs"] = tuple(data.get("specs") or ())

    ops: dict[str, set[str]] = {}
    for spec in cat["specs"]:
        tla = cpath.parent / f"{spec}.tla"
        ops[spec] = _operators(tla) if tla.exists() else set()

    missing: dict[str, list[str]] = {}

    def lacks(entry: str, piece: str) -> None:
        missing.setdefault(entry, []).append(piece)

    def need_operator(entry: str, spec: str, op: str) -> None:
        tla = cpath.parent / f"{spec}.tla"
        if not tla.exists():
            raise CatalogError(cpath, entry, f"spec module {_show(tla)} does not exist")
        if op not in ops[spec]:
            lacks(entry, f"TLA+ operator: '{op}' is not defined in {_show(tla)} "
                         f"(write `{op} == ...` there)")  # fmt: skip

    known_checks = code_checks(checks) if checks is not None else None

    broken: dict[str, Broken] = {}
    for name, b in (data.get("broken") or {}).items():
        entry = f"broken '{name}'"
        if not IDENT.match(str(name)):
            raise CatalogError(cpath, entry, "name must be an identifier")
        _keys(
            cpath, entry, b, ("spec", "value", "meaning"), ("spec", "value", "meaning", "constants")
        )
        if b["spec"] not in cat["specs"]:
            raise CatalogError(cpath, entry, f"unknown spec '{b['spec']}'")
        broken[name] = Broken(
            name, b["spec"], b["value"], b["meaning"], dict(b.get("constants") or {})
        )

    witnesses: dict[str, Witness] = {}
    for w in data.get("witnesses") or []:
        entry = f"witness '{w.get('name') if isinstance(w, dict) else w}'"
        _keys(cpath, entry, w, ("name", "meaning", "spec", "operator", "predict"),
              ("name", "meaning", "spec", "operator", "predict"))  # fmt: skip
        if not str(w["name"]).startswith("Reach_") or not IDENT.match(w["name"]):
            raise CatalogError(cpath, entry, "a witness name is an identifier starting with Reach_")
        if w["name"] in witnesses:
            raise CatalogError(cpath, entry, "duplicate name")
        if w["spec"] not in cat["specs"]:
            raise CatalogError(cpath, entry, f"unknown spec '{w['spec']}'")
        need_operator(entry, w["spec"], w["operator"])
        pred = _check_predict(cpath, entry, w["predict"], WIT_VALUES, cat)
        witnesses[w["name"]] = Witness(w["name"], w["meaning"], w["spec"], w["operator"], pred)

    invariants: dict[str, Invariant] = {}
    allowed = ("name", "meaning", "layers", "kind", "spec", "operator", "check", "predict",
               "broken_by", "witnesses", "inductive")  # fmt: skip
    for i in data["invariants"]:
        entry = f"invariant '{i.get('name') if isinstance(i, dict) else i}'"
        _keys(cpath, entry, i, ("name", "meaning", "layers"), allowed)
        name = i["name"]
        if not IDENT.match(str(name)) or name.startswith("Reach_"):
            raise CatalogError(cpath, entry, "name must be an identifier not starting with Reach_")
        if name in invariants or name in witnesses:
            raise CatalogError(cpath, entry, "duplicate name")
        layers = _names(cpath, entry, "layer", i["layers"], LAYERS)
        kind = i.get("kind", "safety")
        if kind not in KINDS:
            raise CatalogError(cpath, entry, f"unknown kind '{kind}' (known: {', '.join(KINDS)})")
        pred: dict = {}
        if "M" in layers:
            for k in ("spec", "operator", "predict"):
                if not i.get(k):
                    raise CatalogError(cpath, entry, f"layer M needs '{k}'")
            if i["spec"] not in cat["specs"]:
                raise CatalogError(cpath, entry, f"unknown spec '{i['spec']}'")
            if i["operator"] != name:
                raise CatalogError(
                    cpath, entry, f"operator '{i['operator']}' must be spelled as the name '{name}'"
                )
            need_operator(entry, i["spec"], i["operator"])
            pred = _check_predict(cpath, entry, i["predict"], INV_VALUES, cat)
        elif any(i.get(k) for k in ("operator", "predict", "broken_by", "witnesses")):
            raise CatalogError(cpath, entry, "operator/predict/broken_by/witnesses need layer M")
        if "C" in layers and not i.get("check"):
            lacks(entry, f"code check: layer C needs a 'check' name in the row (the key of its "
                         f"function in INVARIANTS of {_show(checks or CHECKS)})")  # fmt: skip
        if i.get("check") and not IDENT.match(str(i["check"])):
            raise CatalogError(cpath, entry, f"check '{i['check']}' must be an identifier")
        if i.get("check") and known_checks is not None and i["check"] not in known_checks:
            lacks(entry, f"code check: '{i['check']}' is not a key of INVARIANTS in "
                         f"{_show(checks or CHECKS)} (write the check over ground truth and "
                         "add it there)")  # fmt: skip
        bb = _names(cpath, entry, "broken config", i.get("broken_by"), broken)
        for b in bb:
            if broken[b].spec != i.get("spec"):
                raise CatalogError(cpath, entry, f"broken config '{b}' belongs to {broken[b].spec}")
        listed = i.get("witnesses") or []
        if not isinstance(listed, list):
            raise CatalogError(cpath, entry, "witnesses must be a list")
        for w in listed:
            if w not in witnesses:
                lacks(entry, f"witness: '{w}' has no row under `witnesses:` in the catalog "
                             "(name, meaning, spec, operator, predict)")  # fmt: skip
        ws = tuple(w for w in listed if w in witnesses)
        for w in ws:
            if witnesses[w].spec != i.get("spec"):
                raise CatalogError(cpath, entry, f"witness '{w}' belongs to {witnesses[w].spec}")
        spec_tla = _show(cpath.parent / f"{i.get('spec')}.tla")
        if "M" in layers and kind == "safety" and not listed:
            lacks(entry, "witness: a model-checked invariant needs a Reach_* witness, a state "
                         "that shows its runs are not vacuous (list it in `witnesses:`, give it "
                         f"a row under `witnesses:` and its operator in {spec_tla})")  # fmt: skip
        inductive = i.get("inductive", False)
        if inductive not in (True, False):
            raise CatalogError(cpath, entry, "inductive must be true or false")
        if inductive and (i.get("spec") != "Runtime" or kind != "safety"):
            raise CatalogError(cpath, entry, "inductive: only a safety invariant of Runtime.tla "
                                             "(models/RuntimeInductive.tla covers that spec)")  # fmt: skip
        invariants[name] = Invariant(name, i["meaning"], layers, kind, i.get("spec"),
                                     i.get("operator"), i.get("check"), pred, bb, ws,
                                     inductive)  # fmt: skip

    if missing:
        raise MissingPieces(cpath, missing)
    for b in broken:
        if not any(b in inv.broken_by for inv in invariants.values()):
            raise CatalogError(cpath, f"broken '{b}'", "no invariant names it in broken_by")

    result = Catalog(cpath, mpath, cat["modes"], cat["tiers"], cat["events"], cat["toggles"],
                     cat["specs"], broken, invariants, witnesses, {}, {}, [])  # fmt: skip
    if mpath.exists():
        _load_matrix(result, mpath)
    elif matrix is not None:
        raise CatalogError(mpath, "file", "not found")
    return result


def _load_matrix(cat: Catalog, path: Path) -> None:
    data = _read(path)
    _keys(path, "top level", data, ("configs",), ("event_groups", "defaults", "configs"))
    groups = {}
    for g, evs in (data.get("event_groups") or {}).items():
        groups[g] = _names(path, f"event group '{g}'", "event", evs or [], cat.events)
    defaults = data.get("defaults") or {}
    for spec in defaults:
        if spec not in cat.specs:
            raise CatalogError(path, f"defaults '{spec}'", "unknown spec")
    cat.event_groups, cat.defaults = groups, defaults
    allowed = ("name", "spec", "mode", "tier", "events", "toggles", "broken", "kind", "quick",
               "constants", "properties", "expect", "why")  # fmt: skip
    seen = set()
    for c in data["configs"]:
        entry = f"config '{c.get('name') if isinstance(c, dict) else c}'"
        _keys(path, entry, c, ("name", "spec"), allowed)
        name = c["name"]
        if not IDENT.match(str(name)) or "__" in name:
            raise CatalogError(path, entry, "name must be an identifier without '__'")
        if name in seen:
            raise CatalogError(path, entry, "duplicate name")
        seen.add(name)
        spec = c["spec"]
        if spec not in cat.specs:
            raise CatalogError(path, entry, f"unknown spec '{spec}'")
        mode = c.get("mode", "interlock")
        if mode not in cat.modes:
            raise CatalogError(
                path, entry, f"unknown mode '{mode}' (known: {', '.join(cat.modes)})"
            )
        tier = c.get("tier")
        if spec == "Runtime" and tier is None:
            raise CatalogError(path, entry, "a Runtime config needs a tier")
        if tier is not None and tier not in cat.tiers:
            raise CatalogError(
                path, entry, f"unknown tier '{tier}' (known: {', '.join(cat.tiers)})"
            )
        ev = c.get("events", [])
        if isinstance(ev, str):
            if ev not in groups:
                raise CatalogError(path, entry, f"unknown event group '{ev}'")
            events = groups[ev]
        else:
            events = _names(path, entry, "event", ev, cat.events)
        toggles = _names(path, entry, "toggle", c.get("toggles"), cat.toggles)
        broken = c.get("broken")
        if broken is not None:
            if broken not in cat.broken:
                raise CatalogError(path, entry, f"unknown broken config '{broken}'")
            if cat.broken[broken].spec != spec:
                raise CatalogError(path, entry, f"broken '{broken}' belongs to another spec")
        kind = c.get("kind", "safety")
        if kind not in KINDS:
            raise CatalogError(path, entry, f"unknown kind '{kind}'")
        consts = dict(defaults.get(spec) or {})
        for k, v in (c.get("constants") or {}).items():
            if k not in consts:
                raise CatalogError(path, entry, f"unknown constant '{k}' for {spec}")
            consts[k] = v
        if broken:
            for k, v in cat.broken[broken].constants.items():
                if k not in consts:
                    raise CatalogError(cat.path, f"broken '{broken}'", f"unknown constant '{k}'")
                consts[k] = v
        for t in toggles:
            consts[t] = "TRUE"
        props = _names(path, entry, "property", c.get("properties"), cat.invariants)
        for p in props:
            if cat.invariants[p].kind != "liveness":
                raise CatalogError(path, entry, f"property '{p}' is not a liveness row")
        if kind == "liveness" and not props:
            raise CatalogError(path, entry, "a liveness config needs properties")
        expect = c.get("expect") or {}
        for k, v in expect.items():  # an invariant's value, or whether a witness is reached
            values = INV_VALUES if k in cat.invariants else WIT_VALUES
            if k not in cat.invariants and k not in cat.witnesses:
                raise CatalogError(path, entry, f"expect: unknown invariant or witness '{k}'")
            if v not in values:
                raise CatalogError(path, entry, f"expect[{k}]: '{v}' not one of {values}")
        cat.configs.append(
            Config(
                name,
                spec,
                mode,
                tier,
                events,
                toggles,
                broken,
                kind,
                bool(c.get("quick")),
                consts,
                props,
                dict(expect),
                str(c.get("why", "")),
            )  # fmt: skip
        )


if __name__ == "__main__":  # pragma: no cover - a quick look from the shell
    import sys

    try:
        c = load(*(sys.argv[1:3]))
    except CatalogError as e:
        print(e, file=sys.stderr)
        sys.exit(1)
    print(f"{len(c.invariants)} invariants, {len(c.witnesses)} witnesses, {len(c.configs)} configs")
    for cfg in c.configs:
        print(f"{cfg.name:32} {len(c.plan(cfg))} runs; vacuous: {c.vacuous(cfg) or '-'}")
