"""The circuit breaker of a target (docs/design.md#gated-effects): consecutive definite failures and timeouts open
it for breaker_cooldown seconds; T_dispatch refuses while it is open (REFUSED:circuit_open)."""

from __future__ import annotations

from .. import db
from .spec import TargetSpec


class Breaker:
    """One call's view of its target's breaker (none when breaker_threshold is None)."""

    def __init__(self, conn: db.Conn, spec: TargetSpec):
        self.conn, self.spec = conn, spec
        # Unknown until state() reads the row: a success then writes, to be sure it is closed.
        self.dirty = True

    def state(self) -> db.Row | None:
        """The breaker's row (open, consecutive_failures, threshold, opened_at), or None."""
        if self.spec.breaker_threshold is None:
            return None
        row = self.conn.execute(db.query("breaker_state"), {"target": self.spec.name}).fetchone()
        self.dirty = bool(row and (row["consecutive_failures"] or row["opened_at"]))
        return row

    def count(self, failed: bool) -> None:
        """Count a definite failure or timeout; a success closes the breaker. Autocommit: the
        count must survive whatever happens to the effect's own transactions."""
        if self.spec.breaker_threshold is None:
            return
        if failed:
            self.conn.execute(db.query("breaker_failure"), {"target": self.spec.name,
                              "threshold": self.spec.breaker_threshold,
                              "cooldown": self.spec.breaker_cooldown})  # fmt: skip
        elif self.dirty:
            self.conn.execute(db.query("breaker_success"), {"target": self.spec.name})
