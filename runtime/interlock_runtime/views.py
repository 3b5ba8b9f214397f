"""What an operator's interfaces (the CLI and the console) show of a workflow: the decision it
made and the payload it proposes for approval (read from `Runtime.describe`), and the status
it published (read from `Runtime.status_record`). Written once for both."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from . import codec


def decided(wf: dict[str, Any], name: str | None = None) -> dict[str, Any] | None:
    """The latest recorded decision of a described workflow (optionally by step name); None
    when it made none (an error if `name` names one it has not made)."""
    steps = [s for s in wf.get("steps") or [] if s.get("kind") == "decide"
             and (name is None or s.get("name") == name) and s.get("output") is not None]  # fmt: skip
    if not steps:
        if name is not None:
            raise ValueError(f"workflow {wf.get('id')!r} has no recorded decision named {name!r} "
                             "(interlock describe shows its steps)")  # fmt: skip
        return None
    output: dict[str, Any] = steps[-1]["output"]
    return output


def proposed_payload(wf: dict[str, Any], decision: dict[str, Any] | None) -> Any:
    """What the workflow proposes for approval, or ValueError saying how to give it."""
    waiting = wf.get("waiting") or {}
    if isinstance(waiting, dict) and "proposal" in waiting:
        return waiting["proposal"]
    response = (decision or {}).get("response")
    if isinstance(response, dict) and "payload" in response:
        return response["payload"]
    raise ValueError(f"workflow {wf.get('id')!r} proposes no payload (it does not wait in "
                     "ctx.wait_approval(proposal), and no decision answered with a payload): "
                     "pass the exact payload with --payload JSON")  # fmt: skip


def status_json(record: dict[str, Any]) -> dict[str, Any]:
    """The record as `--json` prints it: `type` is the recorded class (null for plain JSON),
    `value` the recorded data (its own nested typed parts keep their envelopes)."""
    value = record["value"]
    set_at = record["set_at"]
    return {
        "id": record["id"],
        "workflow_status": record["workflow_status"],
        "published": record["seq"] is not None,
        "seq": record["seq"],
        "epoch": record["epoch"],
        "set_at": set_at.isoformat() if isinstance(set_at, datetime) else set_at,
        "type": codec.type_of(value),
        "value": codec.shown_value(value),
    }
