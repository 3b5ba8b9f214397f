"""The generated tables of scenarios/README.md: actions, kill points and claims.

    python -m prove.scenario_docs            # rewrite the tables between their markers
    python -m prove.scenario_docs --check    # exit 1 (with a diff) when the README is out of date

The actions come from `prove.scenario.ACTIONS` (kind, arguments with their ranges, what each
does), the kill points from the runtime's list (`interlock_runtime.killpoints.POINTS`, with the
sentences below), the claims from `prove.claims` and the scenarios that name them. Each table
sits between `<!-- BEGIN name -->` and `<!-- END name -->`; the prose around them is the
guide's own. prove/tests/test_scenario_docs.py fails when a table is out of date.
"""

from __future__ import annotations

import difflib
import re
import sys
from pathlib import Path

from interlock_runtime.killpoints import POINTS
from prove import claims
from prove.scenario import ACTIONS, SCENARIOS, describe, load_all

README = SCENARIOS / "README.md"

# Where each point is in the code, in a sentence; a point missing here stops the generator.
KILL_POINTS: dict[str, str] = {
    "claimed": "a worker has just claimed a workflow (it holds the lease), before running it",
    "step_before_record": "a step's body has returned, before its result is recorded",
    "step_after_record": "a step's result is committed",
    "decide_after_response": "the model's answer arrived, before it is recorded (runtime: the "
    "llm step; Temporal: the decide activity)",
    "effect_before_dispatch": "the premises were read, before the send is recorded as started "
    "(Temporal: right before the HTTP send)",
    "effect_after_dispatch": "the dispatch is committed, before the request leaves",
    "effect_after_send": "the target answered (or the send failed), before the outcome is "
    "committed",
    "effect_after_commit": "the effect's outcome is committed",
    "resolve_before_begin": "recovery read the effect and chose its tier, before T_resolve begins",
    "resolve_after_commit": "recovery resolved an open send and committed the outcome",
    "resolve_after_send": "recovery's resend was answered, before the outcome is committed",
    "wait_after_suspend": "the workflow committed its wait (a signal or a timer) and suspended",
    "schedule_before_commit": "a schedule firing pass recorded and inserted its starts, before "
    "its commit",
}


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def actions_table() -> str:
    rows = ["| action | kind | arguments | what it does |", "|---|---|---|---|"]
    for name, a in ACTIONS.items():
        args = "; ".join(f"`{k}` ({'required, ' if k in a.required else ''}{describe(v)})"
                         for k, v in a.args.items())  # fmt: skip
        rows.append(f"| `{name}` | {a.kind} | {args} | {_cell(a.does)} |")
    return "\n".join(rows)


def kill_points_table() -> str:
    missing = [p for p in POINTS if p not in KILL_POINTS]
    if missing:
        raise SystemExit(f"prove.scenario_docs: kill point(s) {missing} have no sentence: add "
                         "them to KILL_POINTS in prove/scenario_docs.py")  # fmt: skip
    rows = ["| kill point | where the worker stops |", "|---|---|"]
    rows += [f"| `{p}` | {_cell(KILL_POINTS[p])} |" for p in POINTS]
    return "\n".join(rows)


def _tiers(tiers: tuple[int, ...] | None) -> str:
    if tiers is None:
        return ""
    return f" (tier{'s' if len(tiers) > 1 else ''} {', '.join(map(str, tiers))})"


def claims_table() -> str:
    rows = ["| claim | against (a), (b) | must be 0 | scenarios naming it | the claim |",
            "|---|---|---|---|---|"]  # fmt: skip
    for c in claims.bind(load_all()):
        vs = ", ".join(e.replace("_", " ") for e in c.vs.values())
        named = ", ".join(s + _tiers(t) for s, t in c.cells)
        zero = ", ".join(f"`{z}`" for z in c.zero) or "-"
        rows.append(f"| {c.id} | {vs} | {zero} | {named or '-'} | {_cell(c.says)} |")
    return "\n".join(rows)


TABLES = {"actions": actions_table, "kill-points": kill_points_table, "claims": claims_table}


def render(text: str) -> str:
    """The README text with every generated table replaced by what it is today."""
    for name, make in TABLES.items():
        pattern = re.compile(rf"(<!-- BEGIN {name} .*?-->\n).*?(<!-- END {name} -->)", re.S)
        if not pattern.search(text):
            raise SystemExit(f"prove.scenario_docs: {README.name} has no "
                             f"`<!-- BEGIN {name} ... -->` ... `<!-- END {name} -->` markers")  # fmt: skip
        table = make()
        text = pattern.sub(lambda m, t=table: f"{m.group(1)}{t}\n{m.group(2)}", text)
    return text


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    current = README.read_text()
    want = render(current)
    if "--check" in args:
        diff = "".join(difflib.unified_diff(current.splitlines(True), want.splitlines(True),
                                            "scenarios/README.md", "generated"))  # fmt: skip
        if diff:
            print(diff + "scenarios/README.md is out of date: run `python -m prove.scenario_docs`",
                  file=sys.stderr)  # fmt: skip
            return 1
        return 0
    if want != current:
        Path(README).write_text(want)
        print("prove.scenario_docs: rewrote scenarios/README.md's generated tables")
    return 0


if __name__ == "__main__":
    sys.exit(main())
