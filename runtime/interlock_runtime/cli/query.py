"""`interlock query ID [--json]`: the status a workflow published with ctx.set_status.

The status is read from the committed history in Postgres (Runtime.status_record): no worker
has to run and the workflow is not woken, so a workflow parked on a signal for a week answers
at once. Nothing is decoded: a typed status is shown as its recorded type and JSON data, so
the command needs none of the application's classes.

Exit status: 0 shown (also when the workflow has published nothing yet), 1 no such workflow,
2 an invalid id or the database unreachable (docs/errors.md).
"""

from __future__ import annotations

import json
from typing import Any

from ..views import status_json


def show(record: dict[str, Any], json_output: bool) -> int:
    """Print one status record; the exit status (0)."""
    out = status_json(record)
    if json_output:
        print(json.dumps(out, indent=2))
        return 0
    print(f"{out['id']} ({out['workflow_status']})")
    if not out["published"]:
        print("no status published yet (the workflow calls ctx.set_status to publish one)")
        return 0
    print(f"status set at seq {out['seq']}, {out['set_at']} (epoch {out['epoch']})")
    print(f"type: {out['type'] or 'JSON'}")
    print(json.dumps(out["value"], indent=2, sort_keys=True))
    return 0
