"""Local payment targets for a test: start as many as it needs, each with one paid payment,
and stop them all at the end (the fixtures of runtime/tests, prove/tests and world/tests)."""

from __future__ import annotations

from pathlib import Path

from world.target import Target
from world.target_client import TargetAdmin


class TargetFactory:
    """`make(tier)` starts a target whose ledger lives in `folder` and pays `payment` `paid`
    cents; `close()` stops every target made."""

    def __init__(self, folder: Path, payment: str = "pay_881", paid: int = 10000) -> None:
        self.folder, self.payment, self.paid = Path(folder), payment, paid
        self.started: list[Target] = []

    def make(self, tier: int, delay_ms: float = 0) -> tuple[Target, TargetAdmin]:
        ledger = self.folder / f"ledger-{len(self.started)}.sqlite"
        target = Target(tier, db=str(ledger), delay_ms=delay_ms).start()
        self.started.append(target)
        admin = TargetAdmin(target.url)
        admin.create_payment(self.payment, self.paid)
        return target, admin

    def close(self) -> None:
        for target in self.started:
            target.close()
