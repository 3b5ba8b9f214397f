"""The code mutants of the invariant catalog (docs/verification.md#mutants).

A mutant is one bug written into the runtime as a text patch: the same mistake a BROKEN model
variant makes (`broken:`), or one the model cannot express (`model:` says why). Each names the
catalog invariants it breaks and the tests of `make test` that must kill it. The files under
models/mutants/ hold them, one file per area of the runtime; `python -m conformance.mutants`
applies each to a copy of the tree and runs its tests (results/mutants.md).

Validation is strict, because a mutant that no longer applies (the code it patches moved) would
otherwise pass as "killed" or be skipped silently: every `find` must occur exactly once in its
file, every test named must exist, every invariant and broken variant must be in the catalog.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from models import catalog as catalog_mod

REPO = Path(__file__).resolve().parents[1]
MUTANTS_DIR = Path(__file__).resolve().parent / "mutants"
TEST_ROOTS = ("runtime/tests", "conformance", "prove/tests", "world/tests", "models/tests")
NAME = re.compile(r"^[A-Z][A-Za-z0-9]+$")


class MutantError(ValueError):
    """A mutant entry that cannot be applied or checked as written."""


@dataclass(frozen=True)
class Patch:
    file: str  # relative to the repository root
    find: str  # must occur exactly once in the file
    replace: str


@dataclass(frozen=True)
class Mutant:
    name: str
    area: str  # the file under models/mutants/ it came from
    meaning: str
    invariants: tuple[str, ...]
    broken: str | None  # the BROKEN model variant with the same bug
    model: str | None  # why the model cannot express it (when broken is None)
    patches: tuple[Patch, ...]
    killed_by: tuple[str, ...]  # pytest node ids of make test's suites

    def apply(self, root: Path) -> None:
        """Write the bug into the tree at `root` (a copy, never the working tree)."""
        for p in self.patches:
            path = root / p.file
            text = path.read_text()
            if text.count(p.find) != 1:
                raise MutantError(f"{self.name}: the text to replace occurs "
                                  f"{text.count(p.find)} times in {p.file}, not once")  # fmt: skip
            path.write_text(text.replace(p.find, p.replace))


def _entry(area: str, raw: Any) -> Mutant:
    if not isinstance(raw, dict):
        raise MutantError(f"{area}: each mutant is a mapping, got {raw!r}")
    name = str(raw.get("name", "?"))
    allowed = {"name", "meaning", "invariants", "broken", "model", "patch", "killed_by"}
    extra = set(raw) - allowed
    if extra:
        raise MutantError(f"{area}/{name}: unknown keys {sorted(extra)}")
    for key in ("name", "meaning", "invariants", "patch", "killed_by"):
        if not raw.get(key):
            raise MutantError(f"{area}/{name}: `{key}` is required")
    if bool(raw.get("broken")) == bool(raw.get("model")):
        raise MutantError(f"{area}/{name}: give exactly one of `broken` (the model variant "
                          "with the same bug) or `model` (why the model cannot express it)")  # fmt: skip
    patches = tuple(Patch(str(p["file"]), str(p["find"]), str(p["replace"])) for p in raw["patch"])
    return Mutant(
        name=name, area=area, meaning=" ".join(str(raw["meaning"]).split()),
        invariants=tuple(raw["invariants"]), broken=raw.get("broken"),
        model=" ".join(str(raw["model"]).split()) if raw.get("model") else None,
        patches=patches, killed_by=tuple(raw["killed_by"]),
    )  # fmt: skip


def load(directory: Path = MUTANTS_DIR) -> list[Mutant]:
    """Every mutant, in file then entry order; raises MutantError on a malformed entry."""
    out: list[Mutant] = []
    for path in sorted(directory.glob("*.yaml")):
        raw = yaml.safe_load(path.read_text()) or []
        if not isinstance(raw, list):
            raise MutantError(f"{path.name}: a list of mutants is expected")
        out.extend(_entry(path.stem, r) for r in raw)
    return out


def _test_exists(node: str, root: Path) -> str | None:
    """None when the pytest node id names a test function in one of make test's suites."""
    file, _, rest = node.partition("::")
    if not file.startswith(TEST_ROOTS):
        return f"{node}: not in make test's suites ({', '.join(TEST_ROOTS)})"
    path = root / file
    if not path.is_file():
        return f"{node}: no such file"
    func = rest.split("::")[-1].split("[")[0]
    if not func or not re.search(rf"^\s*def {re.escape(func)}\(", path.read_text(), re.M):
        return f"{node}: no test function {func!r} in {file}"
    return None


def problems(mutants: list[Mutant], root: Path = REPO, coverage: bool = True) -> list[str]:
    """Everything wrong with the mutant catalog against the tree at `root` and the invariant
    catalog: an empty list when every mutant applies and can be judged, and (with `coverage`)
    every BROKEN model variant has a code mutant with the same bug."""
    cat = catalog_mod.load()
    invariants = set(cat.invariants)
    broken = set(cat.broken)
    out: list[str] = []
    seen: set[str] = set()
    for m in mutants:
        if not NAME.match(m.name):
            out.append(f"{m.name}: a mutant's name is CamelCase")
        if m.name in seen:
            out.append(f"{m.name}: named twice")
        seen.add(m.name)
        out += [f"{m.name}: unknown invariant {i}" for i in m.invariants if i not in invariants]
        if m.broken and m.broken not in broken:
            out.append(f"{m.name}: unknown broken variant {m.broken}")
        for p in m.patches:
            path = root / p.file
            if not path.is_file():
                out.append(f"{m.name}: no file {p.file}")
            elif (n := path.read_text().count(p.find)) != 1:
                out.append(f"{m.name}: its text occurs {n} times in {p.file}, not once")
            if p.find == p.replace:
                out.append(f"{m.name}: a patch that changes nothing")
        out += [e for t in m.killed_by if (e := _test_exists(t, root))]
    if not coverage:
        return out
    missing = sorted(broken - {m.broken for m in mutants if m.broken})
    out += [f"broken variant {b}: no code mutant has the same bug" for b in missing]
    return out
