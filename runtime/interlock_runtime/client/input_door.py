"""The check of a start's input at the door, the client's part (docs/typed.md#checked-at-the-door).

A start with the workflow function checks the input against its class before any round trip.
A start by name checks it against the description stored with the deployment it starts
against, read in the start's own transaction. The client remembers the last description it
read per (name, version asked for) with its md5: the next start checks against it first and
sends its md5 with the one-statement start (sql start_served), which inserts only if the
deployment it resolves to holds that very description; if not (a new version, a changed type),
or if the remembered description refuses the input, the start takes the general way and the
description is read again in its transaction.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .. import codec, db, input_schema
from ..errors import InvalidInput
from ..workflow import WorkflowDef

_REMEMBERED = 256  # descriptions a client keeps (one per workflow name it starts, usually)


class InputDoor:
    """One client's checks of start inputs, and the descriptions it last read."""

    def __init__(self) -> None:
        self._known: dict[tuple[str, str | None], tuple[str, Any]] = {}

    def check_local(self, wf: WorkflowDef, wf_id: str, encoded: Any) -> None:
        """Against the class of the function at hand: InvalidInput before any round trip."""
        what = f"rt.start({wf.name!r}, {wf_id!r})"
        input_schema.check_local(codec.input_hint(wf.fn), encoded, what)

    def remembered(self, name: str, version: str | None, encoded: Any) -> str | None:
        """The md5 of the description last read for (name, version) when the input fits it,
        for the one-statement start; None when there is none or it refuses the input."""
        known = self._known.get((name, version))
        if known is None:
            return None
        try:
            input_schema.check(known[1], input_schema.plain(encoded), "")
        except InvalidInput:
            return None  # maybe stale: the start's transaction reads it again and decides
        return known[0]

    def in_transaction(
        self, name: str, wanted: str | None, wf_id: str, encoded: Any
    ) -> Callable[[db.Conn, str], None]:
        """The check start_in runs once it knows the version: the stored description of that
        deployment, read in the start's transaction (none stored: nothing to check)."""

        def check(conn: db.Conn, version: str) -> None:
            row = conn.execute(
                db.query("deployment_input_schema"), {"name": name, "version": version}
            ).fetchone()
            if row is None or row["input_schema"] is None:
                self._known.pop((name, wanted), None)
                return
            if len(self._known) >= _REMEMBERED:
                self._known.clear()
            self._known[(name, wanted)] = (row["input_schema_md5"], row["input_schema"])
            what = f"start of {name}@{version} as {wf_id!r}"
            input_schema.check(row["input_schema"], input_schema.plain(encoded), what)

        return check
