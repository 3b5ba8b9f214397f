"""TLC counterexamples: saved as JSON, printed as the variables that changed.

Every violation TLC finds is saved to the scratch directory .data/tlc/traces/ (or, with
`make tlc` / `--merge`, also to results/tlc_traces/) as <config>__<invariant>.json, in the
format conformance/trace_replay.py reads (load_trace): config, invariant, kind, constants (TLA+
text), loop_to, states [{index, action, vars}].

Printed, state 1 shows every variable and each later state only what changed, one line per
changed leaf (`ws.w1.pc: "idle" -> "load"`); `all_vars=True` prints every variable of every
state instead.

    python -m models.tlc --show .data/tlc/traces/Quick_t2_G1__NoOverlappingSends.json [--all-vars]
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
SCRATCH = ROOT / ".data" / "tlc" / "traces"


def document(config: str, invariant: str, kind: str, tlc_version: str | None,
             constants: dict, loop_to: Any, states: list[dict]) -> dict:  # fmt: skip
    """A counterexample as trace_replay.load_trace reads it."""
    return {"config": config, "invariant": invariant, "kind": kind, "tlc_version": tlc_version,
            "constants": constants, "loop_to": loop_to, "states": states}  # fmt: skip


def file_name(config: str, invariant: str) -> str:
    return f"{config}__{invariant}.json"


def save(doc: dict, directory: Path | None = None, name: str | None = None) -> Path:
    """Write a trace into directory (default: the scratch directory, SCRATCH)."""
    directory = directory or SCRATCH
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / (name or file_name(doc["config"], doc["invariant"]))
    path.write_text(json.dumps(doc, indent=1) + "\n")
    return path


def forget(config: str, directory: Path | None = None) -> None:
    """Drop the scratch traces of a config about to be checked again: a trace left from an
    earlier run must not read as this run's."""
    directory = directory or SCRATCH
    if directory.exists():
        for f in directory.glob(f"{config}__*.json"):
            f.unlink()


def show_path(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(ROOT))
    except ValueError:
        return str(path)


# ---------------------------------------------------------------------- rendering
def _text(v: Any) -> str:
    """A value as one line: sets as {..}, everything else as compact JSON."""
    if isinstance(v, dict) and set(v) == {"set"}:
        return "{" + ", ".join(_text(x) for x in v["set"]) + "}"
    if isinstance(v, dict) and set(v) == {"tla"}:
        return " ".join(str(v["tla"]).split())
    if isinstance(v, dict):
        return "[" + ", ".join(f"{k}: {_text(x)}" for k, x in v.items()) + "]"
    if isinstance(v, list):
        return "<<" + ", ".join(_text(x) for x in v) + ">>"
    return json.dumps(v)


def _is_leaf(v: Any) -> bool:
    return not isinstance(v, dict | list) or (isinstance(v, dict) and set(v) in ({"set"}, {"tla"}))


def changes(before: Any, after: Any, path: str) -> list[str]:
    """One line per leaf that differs between two values of a variable."""
    if before == after:
        return []
    if (
        isinstance(before, dict)
        and isinstance(after, dict)
        and not (_is_leaf(before) or _is_leaf(after))
    ):
        out = []
        for k in after:
            if k not in before:
                out.append(f"{path}.{k}: (new) {_text(after[k])}")
            else:
                out += changes(before[k], after[k], f"{path}.{k}")
        out += [f"{path}.{k}: (gone)" for k in before if k not in after]
        return out
    if isinstance(before, list) and isinstance(after, list):
        out = []
        for i, (a, b) in enumerate(zip(before, after, strict=False)):
            out += changes(a, b, f"{path}[{i + 1}]")
        out += [f"{path}[{i + 1}]: (appended) {_text(x)}"
                for i, x in enumerate(after) if i >= len(before)]  # fmt: skip
        out += [f"{path}[{i + 1}]: (removed)" for i in range(len(after), len(before))]
        return out
    return [f"{path}: {_text(before)} -> {_text(after)}"]


def render(doc: dict, all_vars: bool = False) -> list[str]:
    """The counterexample as printable lines (TLC numbers states from 1, as here)."""
    states = doc.get("states") or []
    lines = []
    prev: dict | None = None
    for n, s in enumerate(states, 1):
        index = s.get("index") or n
        vars_ = s.get("vars") or {}
        if prev is None or all_vars:
            lines.append(f"State {index}: {s.get('action')}")
            lines += [f"  {k} = {_text(v)}" for k, v in vars_.items()]
        else:
            diff = [line for k, v in vars_.items() for line in changes(prev.get(k), v, k)]
            lines.append(f"State {index}: {s.get('action')}" + ("" if diff else " (no change)"))
            lines += [f"  {line}" for line in diff]
        prev = vars_
    loop = doc.get("loop_to")
    if loop == "stuttering":
        lines.append("Then stutters forever (the liveness counterexample's lasso).")
    elif loop is not None:
        lines.append(f"Then back to state {loop} (the liveness counterexample's lasso).")
    return lines


def header(doc: dict, path: Path | None, predicted: str | None = None) -> list[str]:
    what = f"Counterexample: {doc['config']} / {doc['invariant']}"
    if predicted:
        what += f" (predicted {predicted})"
    out = [f"{what}, {len(doc.get('states') or [])} states"]
    if path is not None:
        shown = show_path(path)
        out += [f"  saved to {shown}",
                f"  every variable of every state: python -m models.tlc --show {shown} --all-vars"]  # fmt: skip
        if doc.get("kind") == "safety":
            out.append(f"  replay on the runtime: python -m conformance.trace_replay {shown}")
    return out


def load(path: Path) -> dict:
    """A saved trace; a file that is not one raises ValueError saying what is wrong."""
    try:
        doc = json.loads(Path(path).read_text())
    except OSError as e:
        raise ValueError(f"cannot read {path}: {e.strerror}") from None
    except json.JSONDecodeError as e:
        raise ValueError(f"{path} is not JSON: {e}") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("states"), list):
        raise ValueError(f"{path} is not a TLC trace (no 'states' list)")
    doc.setdefault("config", Path(path).stem.split("__")[0])
    doc.setdefault("invariant", "?")
    return doc
