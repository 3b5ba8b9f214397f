"""The workflows the gate parity test runs in real worker subprocesses, and its cells.

Worker command: `python -m interlock_runtime.cli.worker --module conformance.parity_flows --only
parity.<cell>.<role>@1` from the repository root; the async twin of each workflow
(`parity_async.<cell>.<role>`, the same body through `run_refund_async`) is served by
`... --async --only parity_async.<cell>.<role>@1`. Every cell has its own workflow names (role
"a" is the workflow under test, role "b" the second workflow of the duplicate, conflicting and
re-decide cells), so each cell's dying worker and successor claim only that cell's workflow
and the cells of one batch can run side by side.

The flow is the refund case of docs/design.md#refund-case, shortened: decide (EMULATED model, premises captured
from the target), wait for the `approve` signal (or use a standing policy grant), then the
refund through the gate: the shared refund body of world/refund_agent.py.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from interlock_runtime import workflow
from world import refund_agent
from world.target_client import LocalRefunds

PAYMENT = "pay_881"
PAID = 10000
AMOUNT = 2000  # what the model decides and the approver approves
REDECIDED = 3000  # the amount of a re-decision (docs/design.md#refund-case: 2000 first, then 3000)

# Short timeouts so recovery comes quickly (docs/design.md#send-deadline defaults are 35 s and 10 s).
SEND_TIMEOUT = 2.5
SETTLE_MARGIN = 1.0
# "Key expired at tier 1": C2 needs dedup_margin > send_timeout + settle_margin (3.5 s); with a
# 5.5 s window the tier-1 downgrade point dedup_window - dedup_margin is 1.5 s of age.
SHORT_DEDUP_WINDOW = 5.5
SHORT_DEDUP_MARGIN = 4.0

FAULTS = {
    "happy": "happy path",
    "crash_before_send": "crash before send",
    "crash_before_ack": "crash before ack",
    "duplicate_submit": "duplicate submit",
    "model_redecides": "model re-decides",
    "conflicting_payload": "conflicting payload",
    "grant_revoked": "grant revoked",
    "stale_eligibility": "stale eligibility",
    "refund_during_outage": "refund during outage",
    "revoked_during_outage": "revoked during outage",
    "key_expired": "key expired at tier 1",
}
# Cells whose workflow "a" is killed at an effect kill point and resumed by a successor.
CRASH_FAULTS = (
    "crash_before_send",
    "crash_before_ack",
    "model_redecides",
    "refund_during_outage",
    "revoked_during_outage",
    "key_expired",
)
ROLES = ("a", "b")


@dataclass(frozen=True)
class Cell:
    fault: str
    tier: int
    queryable: bool | None = None  # None: the target's default (tiers 1 and 2 answer lookups)

    @property
    def id(self) -> str:
        return f"{self.fault}-t{self.tier}" + ("nq" if self.queryable is False else "")

    @property
    def crash(self) -> bool:
        return self.fault in CRASH_FAULTS

    @property
    def short_dedup(self) -> bool:
        return self.fault == "key_expired"

    @property
    def skip(self) -> str | None:
        if self.fault == "key_expired" and self.tier != 1:
            return (
                f"key expiry does not apply at tier {self.tier}: only a tier-1 target stores "
                "idempotency keys, and only tier 1 is downgraded by age (docs/design.md#gated-effects recovery a)"
            )
        return None


CELLS: tuple[Cell, ...] = tuple(
    [Cell(fault, tier) for fault in FAULTS for tier in (1, 2, 3)]
    + [Cell("key_expired", 1, queryable=False)]
    # A tier-2 target that declares no lookup was a cell here; it found a blind resend at
    # recovery. The runtime now refuses such a target (check_target: a target that neither
    # dedupes nor answers lookups is tier 3), tested in runtime/tests/test_effects.py.
)
CELLS_BY_ID = {c.id: c for c in CELLS}


MODES = (
    "sync",
    "async",
)  # a plain workflow on the plain worker, an `async def` one on the asyncio worker


def flow_name(cell_id: str, role: str, mode: str = "sync") -> str:
    """The workflow of one role of one cell in one mode: the same body, registered twice."""
    return f"parity{'' if mode == 'sync' else '_async'}.{cell_id}.{role}"


def case_input(cell: Cell, role: str, target_url: str, grant: str | None = None,
               amount: int = AMOUNT) -> dict:  # fmt: skip
    """The workflow input of one role of one cell (JSON)."""
    case: dict[str, Any] = {
        "id": cell.id,
        "role": role,
        "payment": PAYMENT,
        "target_url": target_url,
        "tier": cell.tier,
        "queryable": cell.queryable,
        "amount": amount,
        "grant": grant,
    }
    if cell.short_dedup:
        case["dedup_window"] = SHORT_DEDUP_WINDOW
        case["dedup_margin"] = SHORT_DEDUP_MARGIN
    return case


def parity_target(case: dict) -> LocalRefunds:
    """The cell's target; the key-expiry cells' dedup window and margin come from the case."""
    return refund_agent.refund_target(case, send_timeout=SEND_TIMEOUT, settle_margin=SETTLE_MARGIN)


def stub_model(request: dict) -> dict:
    """EMULATED model: a scripted decision in the shape the runtime records."""
    return {"model": "stub-emulated", "amount": request["amount"], "usage": {"input_tokens": 10}}


def _refund_options(case: dict) -> dict:
    request = {"case": case["id"], "role": case["role"], "amount": case["amount"]}
    return {"target": parity_target(case), "decide": stub_model, "request": request,
            "authority": "grant" if case.get("grant") else "approval"}  # fmt: skip


def _outcome(r) -> dict:
    return {"status": r.status, "effect_id": r.effect_id, "result": r.result}


def refund_flow(ctx, case: dict) -> dict:
    """Decide, get authority (an approval, or the standing grant in the input), refund: the
    shared refund body (world/refund_agent.py); the role is part of the decide request."""
    _, r = refund_agent.run_refund(ctx, case, **_refund_options(case))
    return _outcome(r)


async def refund_flow_async(ctx, case: dict) -> dict:
    """The same body on the asyncio worker (docs/async.md): the same steps at the same places."""
    _, r = await refund_agent.run_refund_async(ctx, case, **_refund_options(case))
    return _outcome(r)


def _define(name: str, mode: str):
    if mode == "sync":

        def flow(ctx, case):
            return refund_flow(ctx, case)

    else:

        async def flow(ctx, case):  # type: ignore[misc]
            return await refund_flow_async(ctx, case)

    flow.__name__ = flow.__qualname__ = name.replace(".", "_").replace("-", "_")
    return workflow(name=name, version="1")(flow)


# One registered workflow per (cell, role, mode); module globals, so workers collect them. A
# worker serves one mode (`--only` its names): a plain worker refuses an async workflow.
FLOWS = {}
for _cell in CELLS:
    for _role in ROLES:
        for _mode in MODES:
            _name = flow_name(_cell.id, _role, _mode)
            _flow = _define(_name, _mode)
            FLOWS[_name] = globals()[_name.replace(".", "_").replace("-", "_")] = _flow
del _cell, _role, _mode, _name, _flow
