"""Prove scenarios: the YAML format, its JSON Schema, and the loader (docs/design.md#scenarios, docs/design.md#prove).

One file per scenario in scenarios/. A scenario names the tiers, systems and variants it runs,
its timing constants, a timeline of actions (driving the case, faults and world events, in
order), the oracle (evaluated from the target's ledger and access log only), the predicted
outcome per system and tier (docs/design.md#scenarios's table: hypotheses, not results), the catalog
invariants it exercises, and the seeds per cell. See scenarios/README.md for an example.

    scn = load("scenarios/S01.yaml")      # ScenarioError names the file, line and field
    scns = load_all(ids=["S01", "S02"])   # every scenarios/*.yaml, filtered by id

Validation: first the JSON Schema (SCHEMA: each action's arguments with their ranges, from
ACTIONS), then what a schema cannot say (invariant names from models/catalog.yaml, kill points
from interlock_runtime.killpoints, claim ids from prove/claims.py, `$param` references, every
argument as each variant and system family resolves it, offsets within run_timeout, the steps
an action needs before it, predictions only for listed systems, tiers and variants). Every
error carries the line of the offending node (yaml's node marks) and the path of the field.
"""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

import jsonschema
import yaml

from interlock_runtime.killpoints import POINTS

REPO = Path(__file__).resolve().parents[1]
SCENARIOS = REPO / "scenarios"

# runtime_async: the runtime with the refund workflow written as an `async def` on asyncio
# workers (docs/async.md): a mode of the runtime, so its family (kill points, worker counts,
# per-family timeline values) and its predictions are the runtime's.
SYSTEMS = ("runtime", "runtime_async", "temporal_idem", "temporal_check")
FAMILY = {"runtime": "runtime", "runtime_async": "runtime", "temporal_idem": "temporal",
          "temporal_check": "temporal"}  # fmt: skip
# A system without prediction rows of its own is predicted as this one: the same guarantees.
PREDICTED_AS = {"runtime_async": "runtime"}

# Timing constants (docs/design.md#refund-case) and harness sizes; a scenario or variant overrides any of them.
DEFAULT_TIMING: dict[str, float] = {
    "lease_ttl": 5.0,  # runtime workers
    "poll": 0.5,
    "send_timeout": 3.0,  # runtime send deadline; Temporal's refund start_to_close is 3 s too
    "settle_margin": 5.0,
    "sleep_seconds": 0.5,  # the workflow's sleep, shortened from the spec's long sleep
    "timer_seconds": 0.0,  # S10: a durable timer between the approval and the effect (0: none)
    "runtime_workers": 3,
    "temporal_workers": 1,
    "temporal_sticky_timeout": 2.0,  # shortened from the SDK default 10 s (latency only)
    "run_timeout": 120.0,  # give up waiting for a result after this long (the run is recorded)
    # seeded external SIGKILL: uniform in [0, this) s after the approval (prove.runner.crash_plan)
    "external_kill_window": 2.0,
    # a run during which the harness's own timers fired later than this is a harness error,
    # not a verdict (prove/lateness.py); the race loops tighten it to their offsets' scale
    "max_harness_lateness": 0.25,
}


class Action(NamedTuple):
    """A timeline action: its kind (drive: the case itself; fault: crashes, restarts,
    proxies; world: events in the world the agent acts on; wait), its arguments (name -> the
    JSON Schema of one value, after `$param` and per-family resolution), the ones it cannot do
    without, and what it does (scenarios/README.md's actions table is generated from this,
    prove/scenario_docs.py). Played by `prove.runner.Run.a_<name>`."""

    kind: str
    args: dict[str, dict]
    does: str
    required: tuple[str, ...] = ()


# Argument values, checked for every variant and system family before anything runs: a value
# the runner would refuse (a negative sleep, a zero count) is a scenario error, not a run-time
# harness error (docs/design.md#scenarios).
_SECONDS = {"type": "number", "minimum": 0}
_COUNT = {"type": "integer", "minimum": 1}
_CENTS = {"type": "integer", "minimum": 1}
_POINT = {"enum": [*POINTS, None]}
_FLAG = {"type": "boolean"}
# Arguments that are offsets from a moment of the run: at most the run's `run_timeout`.
OFFSETS = {("partition", "after"), ("partition", "until"), ("wait_stopped", "resume_after"),
           ("resume", "after")}  # fmt: skip

ACTIONS: dict[str, Action] = {
    "workers": Action(
        "drive",
        {"kill_at": _POINT, "stop_at": _POINT, "count": _COUNT, "via_proxy": _FLAG},
        "start worker subprocesses (`count`, default the system's "
        "`runtime_workers` or `temporal_workers`) and wait until they are ready; "
        "`kill_at` arms a kill point (the worker SIGKILLs itself there), "
        "`stop_at` a stop point (it SIGSTOPs itself there), `via_proxy: true` "
        "sends its Postgres or Temporal connections through the run's fault "
        "proxy",
    ),
    "start": Action(
        "drive",
        {},
        "start the refund workflow (runtime: `prove.flows.prove_refund`, "
        "runtime_async: `prove_refund_async`; Temporal: `RefundWorkflow`)",
    ),
    "approve": Action(
        "drive",
        {"amount": _CENTS},
        "once the decision is recorded, a person approves `amount` cents (default "
        "2000; runtime: `rt.approve`; Temporal: a grant row plus the `approve` "
        "signal)",
    ),
    "wait_crash": Action(
        "wait",
        {},
        "until the armed worker died at its kill point (a real "
        "SIGKILL; under an external crash plan, until the planned SIGKILL)",
    ),
    "down": Action("fault", {}, "external SIGKILL of every live worker subprocess of the system"),
    "restart": Action(
        "fault",
        {"count": _COUNT},
        "fresh, unarmed worker subprocesses (`count`, default as for `workers`)",
    ),
    "sleep": Action("wait", {"seconds": _SECONDS}, "the harness waits `seconds`", ("seconds",)),
    "hand_refund": Action(
        "world",
        {"amount": _CENTS},
        "a person refunds `amount` cents through the target's admin endpoint",
        ("amount",),
    ),
    "revoke": Action(
        "world",
        {},
        "the approval is revoked (runtime: `rt.revoke`; Temporal: the "
        "same `revoked_at` update on `ilr.grants`)",
    ),
    "prune_keys": Action("world", {}, "EMULATED key expiry at the target"),
    "target_delay": Action(
        "fault",
        {"ms": _SECONDS, "count": _COUNT},
        "service delay of `ms` milliseconds inside `POST /refunds` (only "
        "the next `count` POSTs when given)",
        ("ms",),
    ),
    "redecide": Action(
        "world",
        {"on": _FLAG},
        "EMULATED model variance: later model calls answer 3000 (`on: false` turns it off)",
    ),
    "wait_result": Action(
        "wait",
        {},
        "until the workflow ends (or `run_timeout`); may come "
        "twice (S05: the original, then the fork)",
    ),
    "fork": Action(
        "world",
        {"approve": _CENTS},
        "S05: runtime `rt.fork(wf, at_seq=<the decision's seq>)`, then the person "
        "approves the fork for `approve` cents again; Temporal `temporal workflow "
        "reset --type FirstWorkflowTask` (Temporal reapplies the approve signal "
        "itself)",
    ),
    "wait_send": Action(
        "wait",
        {},
        "until the first refund POST arrived at the target (the time origin of `partition`)",
    ),
    "partition": Action(
        "fault",
        {"after": _SECONDS, "until": _SECONDS},
        "blackhole the run's fault proxy from `after` to `until` seconds after "
        "the first refund POST arrived (`until` > `after`); needs an earlier "
        "`workers` with `via_proxy: true` (runtime: its Postgres sessions; "
        "Temporal: its link to the server)",
        ("after", "until"),
    ),
    "wait_decided": Action(
        "wait", {}, "until the decision is recorded and the workflow waits for the approval"
    ),
    "server_restart": Action(
        "fault",
        {},
        "S10: the system's server crashes and comes back "
        "(needs `servers: private`): the runtime's Postgres `pg_ctl stop "
        "-m immediate` and start; Temporal's dev server SIGKILL and start "
        "on the same SQLite file",
    ),
    "wait_stopped": Action(
        "wait",
        {"resume_after": _SECONDS},
        "S13: until the worker armed with `stop_at` (an earlier `workers`) "
        "SIGSTOPped itself; `resume_after`: SIGCONT it that many seconds "
        "after the stop",
    ),
    "resume": Action(
        "fault",
        {"after": _SECONDS},
        "SIGCONT every stopped worker, `after` "
        "seconds after it stopped (default: now; after `wait_stopped` with "
        "`resume_after`: wait for that SIGCONT)",
    ),
    "cancel": Action(
        "world",
        {},
        "the workflow is cancelled (runtime `rt.cancel`; Temporal "
        "cancel); refused when it already ended (recorded, not an error)",
    ),
    "reapprove": Action(
        "world", {}, "the person approves a second time with the same amount (a duplicate signal)"
    ),
    "duplicate_start": Action("drive", {}, "the same workflow id is started again"),
}

QUANTITIES = ("total_cents", "agent_cents", "hand_cents", "agent_applications", "agent_sends")
COMPARATORS = ("eq", "le", "ge")
_PARAM = re.compile(r"^\$([A-Za-z_][A-Za-z0-9_]*)$")

_tier = {"type": "integer", "enum": [1, 2, 3]}
_value = {"oneOf": [{"type": ["string", "number", "boolean"]},
                    {"type": "object", "propertyNames": {"enum": ["runtime", "temporal"]},
                     "additionalProperties": {"type": ["string", "number", "boolean"]}}]}  # fmt: skip
_cond = {
    "type": "object",
    "propertyNames": {"enum": list(QUANTITIES)},
    "additionalProperties": {
        "type": "object",
        "propertyNames": {"enum": list(COMPARATORS)},
        "additionalProperties": {"type": "integer", "minimum": 0},
        "minProperties": 1,
    },
}
_oracle = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "require": _cond,
        "by_tier": {
            "type": "object",
            "propertyNames": {"enum": ["1", "2", "3"]},
            "additionalProperties": _cond,
        },  # fmt: skip
        "refund_expected": {"type": "boolean"},
        "note": {"type": "string"},
    },
}
_timing = {
    "type": "object",
    "propertyNames": {"enum": list(DEFAULT_TIMING)},
    "additionalProperties": {"type": "number", "minimum": 0},
}
# per sweep size: seeds per cell, or a loop scenario's iterations per run
_sizes = {
    "type": "object",
    "additionalProperties": False,
    "required": ["quick", "full"],
    "properties": {
        "quick": {"type": "integer", "minimum": 1},
        "full": {"type": "integer", "minimum": 1},
    },
}
_param_ref = {"type": "string", "pattern": _PARAM.pattern}


def _arg_value(schema: dict) -> dict:
    """One argument as written: the value itself, a `$param`, or {runtime: X, temporal: Y}.
    A `$param` is checked against `schema` once resolved (load())."""
    one = {"anyOf": [schema, _param_ref]}
    per_family = {"type": "object", "propertyNames": {"enum": ["runtime", "temporal"]},
                  "minProperties": 1, "additionalProperties": one}  # fmt: skip
    return {"anyOf": [schema, _param_ref, per_family]}


def _action_args(action: Action) -> dict:
    return {
        "type": "object" if action.required else ["object", "null"],
        "additionalProperties": False,
        "properties": {name: _arg_value(schema) for name, schema in action.args.items()},
        "required": list(action.required),
    }


_action = {
    "type": "object",
    "minProperties": 1,
    "maxProperties": 1,
    "propertyNames": {"enum": list(ACTIONS)},
    "properties": {name: _action_args(a) for name, a in ACTIONS.items()},
}

SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "title": "Prove scenario",
    "type": "object",
    "additionalProperties": False,
    "required": [
        "id",
        "title",
        "description",
        "tiers",
        "systems",
        "oracle",
        "predicted",
        "invariants",
        "seeds",
        "claims",
    ],  # fmt: skip
    "properties": {
        "id": {"type": "string", "pattern": "^(S[0-9]{2}[a-zL]?|MIX)$"},
        "title": {"type": "string", "minLength": 1},
        "description": {"type": "string", "minLength": 1},
        "tiers": {"type": "array", "items": _tier, "minItems": 1, "uniqueItems": True},
        "systems": {
            "type": "array",
            "items": {"enum": list(SYSTEMS)},
            "minItems": 1,
            "uniqueItems": True,
        },  # fmt: skip
        # the claims of prove/claims.py its cells bear on: `C3` (every tier) or {C2: [1, 2]}
        "claims": {
            "type": "array",
            "uniqueItems": True,
            "items": {
                "anyOf": [
                    {"type": "string", "pattern": "^C[0-9]+$"},
                    {
                        "type": "object",
                        "minProperties": 1,
                        "maxProperties": 1,
                        "propertyNames": {"pattern": "^C[0-9]+$"},
                        "additionalProperties": {
                            "type": "array",
                            "items": _tier,
                            "minItems": 1,
                            "uniqueItems": True,
                        },
                    },
                ]
            },
        },  # fmt: skip
        "params": {"type": "object"},
        "variants": {
            "type": "array",
            "minItems": 1,
            "items": {
                "type": "object",
                "additionalProperties": False,
                "required": ["name"],
                "properties": {
                    "name": {"type": "string", "pattern": "^[a-z0-9_]+$"},
                    "description": {"type": "string"},
                    "tiers": {"type": "array", "items": _tier, "minItems": 1},
                    "params": {"type": "object"},
                    "timing": _timing,
                    "oracle": _oracle,
                    # this variant's runs per cell, when it needs more than the scenario's
                    "seeds": _sizes,
                },
            },
        },
        "timing": _timing,
        "timeline": {"type": "array", "items": _action, "minItems": 1},
        # a loop scenario (prove/driver.py): module:function instead of a timeline
        "driver": {"type": "string", "pattern": "^[A-Za-z_][A-Za-z0-9_.]*:[A-Za-z_][A-Za-z0-9_]*$"},
        "iterations": _sizes,
        # private: each run gets its own Postgres cluster (runtime) or Temporal dev server, so
        # a server crash (S10) hits nobody else's run
        "servers": {"enum": ["shared", "private"]},
        # how much of the machine one run occupies, in sweep slots (--jobs is the number of
        # slots): most runs wait on their faults (1); a run that keeps the CPU busy throughout
        # (MIX builds a world per iteration) takes more, so fewer of it run at once
        "weight": {"type": "integer", "minimum": 1, "maximum": 8},
        "oracle": _oracle,
        "predicted": {
            "type": "array",
            "items": {
                "type": "object",
                "additionalProperties": False,
                "required": ["system", "tier", "total_cents"],
                "properties": {
                    "system": {"enum": list(SYSTEMS)},
                    "tier": _tier,
                    "variant": {"type": "string"},
                    "total_cents": {"type": "integer", "minimum": 0},
                    "status": {"type": "string"},
                    "note": {"type": "string"},
                },
            },
        },
        "invariants": {"type": "array", "items": {"type": "string"}, "uniqueItems": True},
        "seeds": _sizes,
        "emulated": {"type": "array", "items": {"type": "string"}},
    },
}


# A scenario file kept in a committed pack (prove/prove_raw.py) is read to render what was
# run, not to run it: one written before `claims:` existed loads without it (prove/claims.py
# maps those packs), and its arguments are not held to checks added since it ran.
SCHEMA_AS_RUN: dict[str, Any] = copy.deepcopy(SCHEMA)
SCHEMA_AS_RUN["required"].remove("claims")
SCHEMA_AS_RUN["properties"]["timeline"]["items"] = {
    **_action, "properties": {}, "additionalProperties": {"type": ["object", "null"]}}  # fmt: skip


class ScenarioError(ValueError):
    """A bad scenario file: names the file, the line, the field's path and what was expected."""

    def __init__(self, path: Path | str, line: int | None, where: str, msg: str) -> None:
        self.path, self.line, self.where, self.msg = str(path), line, where, msg
        loc = f"{_show(path)}:{line}" if line else _show(path)
        super().__init__(f"{loc}: {where or '(top level)'}: {msg}")


def _show(path: Path | str) -> str:
    p = Path(path)
    try:
        return str(p.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(p)


@dataclass(frozen=True)
class Variant:
    name: str
    description: str
    tiers: tuple[int, ...]
    params: dict[str, Any]
    timing: dict[str, float]
    oracle: dict[str, Any]
    seeds: dict[str, int] | None = None  # None: the scenario's


@dataclass(frozen=True)
class Scenario:
    id: str
    title: str
    description: str
    tiers: tuple[int, ...]
    systems: tuple[str, ...]
    variants: tuple[Variant, ...]
    timeline: tuple[dict, ...]
    predicted: tuple[dict, ...]
    invariants: tuple[str, ...]
    seeds: dict[str, int]
    emulated: tuple[str, ...] = ()
    driver: str | None = None  # module:function for a loop scenario (prove/driver.py)
    iterations: dict[str, int] = field(default_factory=dict)
    servers: str = "shared"
    weight: int = 1  # sweep slots one run occupies
    # (claim id, tiers or None: every tier) per claim it names; None: a file from a pack
    # written before scenarios named their claims
    claims: tuple[tuple[str, tuple[int, ...] | None], ...] | None = None
    path: str = ""
    raw: dict = field(default_factory=dict, repr=False)

    def variant(self, name: str) -> Variant:
        return next(v for v in self.variants if v.name == name)

    def runs_per_cell(self, variant: Variant, size: str) -> int:
        """The fixed n of a cell (seeds; a loop scenario's iterations come on top)."""
        return (variant.seeds or self.seeds)[size]

    def steps(self, system: str, variant: Variant) -> list[tuple[str, dict]]:
        """The timeline for one system and variant: (action, args) with `$param` and per-family
        values ({runtime: X, temporal: Y}) resolved."""
        out = []
        for item in self.timeline:
            ((name, args),) = item.items()
            resolved = {}
            for k, v in (args or {}).items():
                v = resolve_param(v, variant.params)
                if isinstance(v, dict):
                    v = resolve_param(v.get(FAMILY[system]), variant.params)
                resolved[k] = v
            out.append((name, resolved))
        return out

    def oracle_for(self, variant: Variant, tier: int) -> dict:
        """{require: {quantity: {cmp: n}}, refund_expected: bool} for one variant and tier."""
        req = dict(variant.oracle.get("require") or {})
        req.update((variant.oracle.get("by_tier") or {}).get(str(tier)) or {})
        return {"require": req, "refund_expected": variant.oracle.get("refund_expected", True),
                "note": variant.oracle.get("note", "")}  # fmt: skip

    def prediction(self, system: str, tier: int, variant: str) -> dict | None:
        """The predicted outcome of a cell; runtime_async, without rows of its own, takes the
        runtime's (PREDICTED_AS): an async workflow promises what a plain one does."""
        rows = [p for p in self.predicted if p["system"] == system and p["tier"] == tier
                and p.get("variant", variant) == variant]  # fmt: skip
        if not rows and system in PREDICTED_AS and not any(
                p["system"] == system for p in self.predicted):  # fmt: skip
            return self.prediction(PREDICTED_AS[system], tier, variant)
        return rows[0] if rows else None

    def cells(self) -> list[tuple[str, str, int]]:
        """(variant, system, tier) for every cell of the scenario."""
        return [(v.name, s, t) for v in self.variants for s in self.systems for t in v.tiers]


def resolve_param(value: Any, params: dict[str, Any]) -> Any:
    if isinstance(value, str):
        m = _PARAM.match(value)
        if m:
            return params[m.group(1)]
    return value


# -- loading --------------------------------------------------------------------------------


def _to_python(node: yaml.Node) -> Any:
    return yaml.SafeLoader(" ").construct_document(node) if node is not None else None


def _refuse_collection_aliases(path: Path, root: yaml.Node | None) -> None:
    """An alias to a list or a mapping is refused: a few nested ones expand exponentially
    (a 'billion laughs' took minutes of validation), and no scenario needs one."""
    seen: set[int] = set()
    stack = [root] if root is not None else []
    while stack:
        node = stack.pop()
        if isinstance(node, yaml.ScalarNode):
            continue
        if id(node) in seen:  # composed once, reached twice: an alias
            line = node.start_mark.line + 1
            raise ScenarioError(path, line, "", "an alias (*name) to a list or a mapping is not "
                                "allowed in a scenario; write the value out")  # fmt: skip
        seen.add(id(node))
        if isinstance(node, yaml.SequenceNode):
            stack.extend(node.value)
        elif isinstance(node, yaml.MappingNode):
            for k, v in node.value:
                stack.extend((k, v))


def _node_at(node: yaml.Node | None, path: list[Any]) -> yaml.Node | None:
    """The deepest node along `path` (mapping keys and sequence indexes)."""
    for part in path:
        if isinstance(node, yaml.MappingNode):
            nxt = None
            for k, v in node.value:
                if k.value == str(part):
                    nxt = v
                    break
            if nxt is None:
                return node
            node = nxt
        elif isinstance(node, yaml.SequenceNode) and isinstance(part, int):
            if part >= len(node.value):
                return node
            node = node.value[part]
        else:
            return node
    return node


def _line(root: yaml.Node | None, path: list[Any]) -> int | None:
    node = _node_at(root, path)
    return node.start_mark.line + 1 if node is not None else None


def _where(path: list[Any]) -> str:
    out = ""
    for p in path:
        out += f"[{p}]" if isinstance(p, int) else (f".{p}" if out else str(p))
    return out


def _action_message(err: jsonschema.ValidationError) -> str | None:
    """A timeline argument's error in the action's terms, not the schema's."""
    p = list(err.absolute_path)
    if len(p) < 3 or p[0] != "timeline" or p[2] not in ACTIONS:
        return None
    spec = ACTIONS[p[2]]
    if len(p) == 3 and err.validator == "type" and err.instance is None and spec.required:
        return f"{p[2]} needs {', '.join(spec.required)}"
    if len(p) == 3 and err.validator == "additionalProperties":
        return f"{p[2]} takes {list(spec.args) or 'nothing'}"
    if len(p) >= 4 and "enum" in spec.args.get(p[3], {}) and isinstance(err.instance, str):
        return f"unknown kill point {err.instance!r}; known: {', '.join(POINTS)}"
    if len(p) >= 4 and p[3] in spec.args and err.validator in ("pattern", "enum", "minimum",
                                                                "type"):  # fmt: skip
        known = f"; known: {', '.join(POINTS)}" if "enum" in spec.args[p[3]] else ""
        return (f"{p[3]} must be {describe(spec.args[p[3]])} or a $param, not "
                f"{err.instance!r}{known}")  # fmt: skip
    return None


def _schema_message(err: jsonschema.ValidationError) -> str:
    action_msg = _action_message(err)
    if action_msg:
        return action_msg
    v = err.validator
    if v == "required":
        return err.message.replace("is a required property", "is required")
    if v == "additionalProperties" and err.validator_value is False:
        return f"unexpected field(s): {err.message.split('(')[-1].rstrip(')')}"
    if v == "propertyNames":
        allowed = err.validator_value.get("enum") if isinstance(err.validator_value, dict) else None
        return f"unknown name {err.instance!r}; expected one of: {', '.join(map(str, allowed))}" \
            if allowed else err.message  # fmt: skip
    if v == "enum":
        return f"{err.instance!r} is not allowed; expected one of: " + ", ".join(
            map(str, err.validator_value)
        )
    if v == "type":
        return f"expected {err.validator_value}, got {type(err.instance).__name__} " \
               f"{err.instance!r}"  # fmt: skip
    return err.message


def _catalog_invariants() -> set[str]:
    from models import catalog

    return set(catalog.load().invariants)


def describe(schema: dict) -> str:
    """An argument's schema in words (error messages, scenarios/README.md's actions table)."""
    if "enum" in schema:
        return "a kill point"
    kind = {"number": "a number", "integer": "an integer", "boolean": "true or false"}
    text = kind[schema["type"]]
    return f"{text} >= {schema['minimum']}" if "minimum" in schema else text


def _resolved(value: Any, params: dict[str, Any], family: str) -> Any:
    """One argument as the runner gets it (Scenario.steps): `$param`, then per family."""
    value = resolve_param(value, params)
    if isinstance(value, dict):
        value = resolve_param(value.get(family), params)
    return value


def _check_steps(data: dict, params: dict[str, Any], family: str, run_timeout: float,
                 fail: Any, where: str) -> None:  # fmt: skip
    """Every argument of the timeline as one variant and system family will run it: in range
    (ACTIONS' schemas), and consistent with the steps before it and with the run's length, so
    a scenario that loads cannot fail at run time on an argument."""
    proxied = stopped = False
    for i, item in enumerate(data.get("timeline") or []):
        ((action, raw_args),) = item.items()
        spec = ACTIONS[action]
        args = {k: _resolved(val, params, family) for k, val in (raw_args or {}).items()}
        for k, val in args.items():
            at = ["timeline", i, action, k]
            if val is None:
                if k in spec.required:
                    fail(at, f"{action} needs {k}; it has no value{where}")
                continue
            if k in ("kill_at", "stop_at") and val not in POINTS:
                fail(at, f"unknown kill point {val!r}{where}; known: {', '.join(POINTS)}")
            if not jsonschema.Draft202012Validator(spec.args[k]).is_valid(val):
                fail(at, f"{k} must be {describe(spec.args[k])}, not {val!r}{where}")
            if (action, k) in OFFSETS and val > run_timeout:
                fail(at, f"{k} {val} s is beyond the run: run_timeout is {run_timeout:g} s{where}")
        proxied = proxied or bool(action == "workers" and args.get("via_proxy"))
        stopped = stopped or bool(action == "workers" and args.get("stop_at"))
        if action == "partition":
            if not proxied:
                fail(["timeline", i, action], "partition needs an earlier `workers` with "
                     f"via_proxy: true{where}")  # fmt: skip
            if args["until"] <= args["after"]:
                fail(["timeline", i, action, "until"], f"until ({args['until']}) must be after "
                     f"after ({args['after']}){where}")  # fmt: skip
        if action == "wait_stopped" and not stopped:
            fail(["timeline", i, action], f"wait_stopped needs an earlier `workers` with "
                 f"stop_at{where}")  # fmt: skip
        if action == "server_restart" and data.get("servers") != "private":
            fail(["timeline", i, action], "server_restart needs `servers: private` (a crash of "
                 "a shared server would hit every other run)")  # fmt: skip


def _claims(data: dict, fail: Any) -> tuple[tuple[str, tuple[int, ...] | None], ...] | None:
    """The claims the scenario names, checked against prove/claims.py and its tiers."""
    from prove.claims import CLAIMS

    if "claims" not in data:
        return None
    ids = [c.id for c in CLAIMS]
    out: list[tuple[str, tuple[int, ...] | None]] = []
    for i, item in enumerate(data["claims"]):
        cid, tiers = (item, None) if isinstance(item, str) else next(iter(item.items()))
        if cid not in ids:
            fail(["claims", i], f"{cid!r} is not a claim of prove/claims.py; known: "
                 f"{', '.join(ids)}")  # fmt: skip
        if any(c == cid for c, _ in out):
            fail(["claims", i], f"{cid} is named twice; give it once, with every tier it covers")
        for t in tiers or ():
            if t not in data["tiers"]:
                fail(["claims", i, cid], f"tier {t} is not among the scenario's tiers")
        out.append((cid, tuple(tiers) if tiers else None))
    return tuple(out)


def load(path: Path | str, known_invariants: set[str] | None = None,
         as_run: bool = False) -> Scenario:  # fmt: skip
    """Load and validate one scenario file; raise ScenarioError on the first problem.
    as_run: a file as a committed pack keeps it (SCHEMA_AS_RUN)."""
    path = Path(path)
    try:
        raw = path.read_bytes()
    except OSError as e:
        raise ScenarioError(path, None, "", f"cannot read: {e.strerror}") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        line = raw[: e.start].count(b"\n") + 1
        raise ScenarioError(path, line, "", f"not UTF-8: byte 0x{raw[e.start]:02x} at offset "
                            f"{e.start}; save the file as UTF-8") from None  # fmt: skip
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
        _refuse_collection_aliases(path, root)
        data = _to_python(root)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        line = mark.line + 1 if mark else None
        raise ScenarioError(path, line, "", f"not valid YAML: {getattr(e, 'problem', e)}") from None
    except RecursionError:
        raise ScenarioError(path, None, "", "nested too deeply to read") from None
    except (ValueError, TypeError, IndexError) as e:  # PyYAML's constructors raise these too
        raise ScenarioError(path, None, "", f"a value cannot be read: {e}") from None
    if not isinstance(data, dict):
        raise ScenarioError(path, 1, "", "expected a mapping at the top level")

    validator = jsonschema.Draft202012Validator(SCHEMA_AS_RUN if as_run else SCHEMA)
    # keys of a YAML mapping may be ints as well as strings: sort paths by their text
    errors = sorted(validator.iter_errors(data),
                    key=lambda e: ([str(p) for p in e.absolute_path], e.message))  # fmt: skip
    if errors:
        err = jsonschema.exceptions.best_match(errors) or errors[0]
        # best_match picks the most relevant; report its deepest context when it is a oneOf.
        while err.context:
            err = sorted(err.context, key=lambda e: -len(e.absolute_path))[0]
        p = list(err.absolute_path)
        msg = _schema_message(err)
        if "propertyNames" in err.schema_path:  # a key that is not allowed: point at the key
            p = p + [err.instance]
            allowed = err.validator_value if err.validator == "enum" else []
            msg = f"unknown name {err.instance!r}; expected one of: {', '.join(map(str, allowed))}"
        elif err.validator == "additionalProperties" and p[:1] == ["timeline"]:
            extra = sorted(set(err.instance) - set(err.schema.get("properties", {})), key=str)
            p = p + extra[:1]  # an argument the action does not take: point at it
        raise ScenarioError(path, _line(root, p), _where(p), msg)

    def fail(p: list[Any], msg: str) -> None:
        raise ScenarioError(path, _line(root, p), _where(p), msg)

    if data["id"] != path.stem.split("_")[0] and path.stem != data["id"]:
        fail(["id"], f"{data['id']!r} does not match the file name {path.name!r}")
    known = _catalog_invariants() if known_invariants is None else known_invariants
    for i, name in enumerate(data["invariants"]):
        if name not in known:
            fail(["invariants", i], f"{name!r} is not an invariant of models/catalog.yaml")

    base_params = data.get("params") or {}
    raw_variants = data.get("variants") or [{"name": "base"}]
    names = [v["name"] for v in raw_variants]
    for i, v in enumerate(raw_variants):
        if names.count(v["name"]) > 1:
            fail(["variants", i, "name"], f"variant {v['name']!r} is defined twice")
        for t in v.get("tiers", []):
            if t not in data["tiers"]:
                fail(["variants", i, "tiers"], f"tier {t} is not among the scenario's tiers")
        unknown = set(v.get("params") or {}) - set(base_params)
        if unknown:
            fail(["variants", i, "params"], f"params {sorted(unknown)} have no default in params")

    if bool(data.get("driver")) == bool(data.get("timeline")):
        fail([], "give either a timeline (actions played per seed) or a driver "
             "(module:function, a loop scenario), not both and not neither")  # fmt: skip
    if data.get("driver") and not data.get("iterations"):
        fail(["driver"], "a driver scenario needs iterations: {quick: N, full: M}")
    for i, item in enumerate(data.get("timeline") or []):
        ((action, args),) = item.items()
        for k, val in (args or {}).items():
            values = list(val.values()) if isinstance(val, dict) else [val]
            for one in values:
                m = _PARAM.match(one) if isinstance(one, str) else None
                if m and m.group(1) not in base_params:
                    fail(["timeline", i, action, k], f"${m.group(1)} is not defined in params")
    for v in raw_variants if not as_run else ():
        timing = {**DEFAULT_TIMING, **(data.get("timing") or {}), **(v.get("timing") or {})}
        params = {**base_params, **(v.get("params") or {})}
        for fam in sorted({FAMILY[s] for s in data["systems"]}):
            _check_steps(data, params, fam, timing["run_timeout"], fail,
                         f" (variant {v['name']}, {fam})" if len(raw_variants) > 1
                         else f" ({fam})")  # fmt: skip

    named = _claims(data, fail)
    for i, p in enumerate(data["predicted"]):
        if p["system"] not in data["systems"]:
            fail(["predicted", i, "system"], f"{p['system']} is not among the scenario's systems")
        if p["tier"] not in data["tiers"]:
            fail(["predicted", i, "tier"], f"tier {p['tier']} is not among the scenario's tiers")
        if "variant" in p and p["variant"] not in names:
            fail(["predicted", i, "variant"], f"no variant {p['variant']!r}; have {names}")

    timing = {**DEFAULT_TIMING, **(data.get("timing") or {})}
    variants = []
    for v in raw_variants:
        oracle = copy.deepcopy(data["oracle"])
        vo = v.get("oracle") or {}
        oracle.setdefault("require", {}).update(vo.get("require") or {})
        for t, req in (vo.get("by_tier") or {}).items():
            oracle.setdefault("by_tier", {}).setdefault(t, {}).update(req)
        for k in ("refund_expected", "note"):
            if k in vo:
                oracle[k] = vo[k]
        variants.append(Variant(
            name=v["name"], description=v.get("description", ""),
            tiers=tuple(v.get("tiers") or data["tiers"]),
            params={**base_params, **(v.get("params") or {})},
            timing={**timing, **(v.get("timing") or {})}, oracle=oracle,
            seeds=dict(v["seeds"]) if v.get("seeds") else None,
        ))  # fmt: skip
    return Scenario(
        id=data["id"], title=data["title"], description=data["description"].strip(),
        tiers=tuple(data["tiers"]), systems=tuple(data["systems"]), variants=tuple(variants),
        timeline=tuple(data.get("timeline") or ()), predicted=tuple(data["predicted"]),
        invariants=tuple(data["invariants"]), seeds=dict(data["seeds"]),
        emulated=tuple(data.get("emulated") or ()), driver=data.get("driver"),
        iterations=dict(data.get("iterations") or {}), servers=data.get("servers", "shared"),
        weight=int(data.get("weight", 1)), claims=named, path=str(path), raw=data,
    )  # fmt: skip


def load_all(ids: list[str] | None = None, directory: Path | str = SCENARIOS,
             as_run: bool = False) -> list[Scenario]:  # fmt: skip
    """Every scenario in `directory`, in id order; `ids` filters (an unknown id is an error)."""
    files = sorted(Path(directory).glob("*.yaml"))
    known = _catalog_invariants()
    scns = [load(f, known, as_run) for f in files]
    if ids:
        have = {s.id for s in scns}
        missing = [i for i in ids if i not in have]
        if missing:
            raise ScenarioError(directory, None, "", f"unknown scenario id(s) {missing}; "
                                f"have {sorted(have)}")  # fmt: skip
        scns = [s for s in scns if s.id in ids]
    return scns
