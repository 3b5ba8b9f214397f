"""What ctx.effect returns: EffectResult, and EffectRefused for raise_on_refusal=True."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..vocabulary import LANDED_RESULTS, LEGACY_RESULT_STATUSES, ResultStatus

STATUSES = ResultStatus.values()


@dataclass(frozen=True)
class EffectResult:
    """What ctx.effect returns. `status` is a vocabulary.ResultStatus; `result` what the
    target answered (or found); `reason` says why, for a refusal or an ambiguity."""

    status: str
    effect_id: str
    result: Any = None
    reason: str | None = None

    def __post_init__(self) -> None:
        # a result recorded by an older runtime reads in today's words (vocabulary.py)
        if self.status in LEGACY_RESULT_STATUSES:
            object.__setattr__(self, "status", str(LEGACY_RESULT_STATUSES[self.status]))

    @property
    def refused(self) -> bool:
        """True for a REFUSED:* status: the gate refused to send (`reason` says why)."""
        return self.status.startswith("REFUSED")

    @property
    def landed(self) -> bool:
        """True when the effect is known to have happened (by this call or an earlier one)."""
        return self.status in LANDED_RESULTS


class EffectRefused(Exception):
    """Raised by ctx.effect(..., raise_on_refusal=True) for a REFUSED:* outcome."""

    def __init__(self, result: EffectResult):
        self.result = result
        why = f" ({result.reason})" if result.reason else ""
        super().__init__(f"effect {result.effect_id} refused: {result.status}{why}")
