"""The declared matrix (models/faults.yaml), checked against the code that drives and judges it,
and the cells to run: all of them, or a seeded sample that touches every feature, every driven
fault and both modes."""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from conformance.matrix.cells import Cell

DECLARED = Path(__file__).resolve().parents[2] / "models" / "faults.yaml"


@dataclass(frozen=True)
class Matrix:
    modes: list[str]
    faults: dict[str, dict[str, Any]]
    features: dict[str, dict[str, Any]]
    common: list[str]

    @property
    def driven(self) -> list[str]:
        return [f for f, spec in self.faults.items() if spec["driven"]]

    def invariants(self, feature: str) -> list[str]:
        return [*self.common, *self.features[feature]["invariants"]]

    def expect(self, feature: str) -> str | None:
        expected: str | None = self.features[feature].get("expect")
        return expected

    def lifts(self, fault: str) -> list[str]:
        """The catalog toggles (assumptions lifted) a fault brings."""
        return list(self.faults[fault].get("lifts", []))

    def tier(self, feature: str) -> str:
        """The catalog tier a feature's effects are at (t2 where it sends none)."""
        return str(self.features[feature].get("tier", "t2"))

    def exclusive(self, cell: Cell) -> bool:
        return bool(self.faults[cell.fault]["exclusive"])

    def applies(self, feature: str, fault: str) -> bool:
        """Whether the fault can touch the feature: the feature's own `faults` where it names
        them, else the fault's `applies` (absent: every feature)."""
        if "faults" in self.features[feature]:
            return fault in self.features[feature]["faults"]
        return feature in self.faults[fault].get("applies", self.features)

    def cells(self, seed: int) -> list[Cell]:
        """Every driven cell that applies, each with a seed of its own derived from `seed`
        (by its place among all declared cells, so adding one leaves the others' seeds)."""
        every = [(f, x, m) for f in self.features for x in self.faults for m in self.modes]
        return [Cell(f, x, m, seed * 1000 + i) for i, (f, x, m) in enumerate(every)
                if self.faults[x]["driven"] and self.applies(f, x)]  # fmt: skip

    def sample(self, seed: int) -> list[Cell]:
        """A seeded sample: each feature once per mode, under faults dealt so that every driven
        fault (the baseline `none` aside) comes up in each mode at least once."""
        rng = random.Random(seed)
        faults = [f for f in self.driven if f != "none"]
        out = []
        for mode in self.modes:
            deck: list[str] = []
            for feature in self.features:
                if not deck:
                    deck = faults[:]
                    rng.shuffle(deck)
                fault = next((f for f in reversed(deck) if self.applies(feature, f)), None)
                if fault is None:  # what is left of the deck touches nothing of this feature
                    fault = rng.choice([f for f in faults if self.applies(feature, f)])
                else:
                    deck.remove(fault)
                out.append((feature, fault, mode))
            for fault in deck:  # faults the deal left out: each on a feature it applies to
                feature = rng.choice([f for f in self.features if self.applies(f, fault)])
                out.append((feature, fault, mode))
        every = {c.name: c for c in self.cells(seed)}
        return list({name: every[name] for name in (f"{f}/{x}/{m}" for f, x, m in out)}.values())


def load(path: Path = DECLARED) -> Matrix:
    """The declared matrix, refused with a message naming what is wrong."""
    from conformance.invariants import INVARIANTS
    from conformance.matrix.checks import CHECKS
    from conformance.matrix.features import FEATURES

    raw = yaml.safe_load(path.read_text())
    m = Matrix(raw["modes"], raw["faults"], raw["features"], raw["common"])
    problems = [f"feature {f!r} has no driver in conformance/matrix/features.py"
                for f in m.features if f not in FEATURES]  # fmt: skip
    problems += [f"invariant {name!r} of {f} has no check in conformance/matrix/checks.py or the catalog"
                 for f in m.features for name in m.invariants(f)
                 if name not in CHECKS and name not in INVARIANTS]  # fmt: skip
    problems += [f"feature {f!r} names fault {x!r}, which is not declared" for f, spec
                 in m.features.items() for x in spec.get("faults", []) if x not in m.faults]  # fmt: skip
    problems += [f"fault {f!r} lacks driven/exclusive/meaning" for f, spec in m.faults.items()
                 if not {"driven", "exclusive", "meaning"} <= set(spec)]  # fmt: skip
    if set(m.modes) != {"sync", "async"}:
        problems.append(f"modes must be sync and async, not {m.modes}")
    if problems:
        raise ValueError(f"{path.name}: " + "; ".join(problems))
    return m
