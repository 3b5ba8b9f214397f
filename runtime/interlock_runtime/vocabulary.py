"""The runtime's words: every status, state and kind it stores or returns, spelled once.

Each is a string enum, so a member compares equal to the text in the database and in JSON
(``WorkflowStatus.COMPLETED == "completed"``) and prints as that text. The schema's CHECK
constraints list the same words; a test (runtime/tests/test_vocabulary.py) holds the two
together. Code elsewhere imports these instead of writing the strings again.
"""

from __future__ import annotations

from enum import Enum


class Word(str, Enum):
    """A string enum whose str() and format() are the stored text (Python 3.10 has no StrEnum)."""

    def __str__(self) -> str:
        return str(self.value)

    def __format__(self, spec: str) -> str:
        return format(str(self.value), spec)

    @classmethod
    def values(cls) -> tuple[str, ...]:
        return tuple(m.value for m in cls)


class WorkflowStatus(Word):
    """ilr.workflows.status."""

    AWAITING_WORKER = "awaiting_worker"  # started before any deployment served it (no version)
    PENDING = "pending"  # waiting for a worker to claim it
    RUNNING = "running"  # claimed, its lease live
    SLEEPING = "sleeping"  # waiting for a timer or a signal
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"
    STUCK = "stuck"  # too many claims died without progress: an operator must look
    CONTINUED = "continued"  # ended by continue-as-new; its successor carries on
    TIMED_OUT = "timed_out"  # its execution deadline passed (docs/timeouts.md)


LIVE_STATUSES = (WorkflowStatus.AWAITING_WORKER, WorkflowStatus.PENDING, WorkflowStatus.RUNNING,
                 WorkflowStatus.SLEEPING)  # fmt: skip
TERMINAL_STATUSES = tuple(s for s in WorkflowStatus if s not in LIVE_STATUSES)


class TimeoutKind(Word):
    """Which limit fired, in a timed-out step's or workflow's error record (docs/timeouts.md)."""

    START_TO_CLOSE = "start_to_close"  # one attempt of a step
    SCHEDULE_TO_CLOSE = "schedule_to_close"  # a step, all attempts from the first start
    EXECUTION = "execution"  # the workflow, its children and successors


class StepKind(Word):
    """ilr.steps.kind: what a recorded position of a workflow's history is."""

    STEP = "step"
    DECIDE = "decide"
    EFFECT = "effect"
    SLEEP = "sleep"
    SIGNAL = "signal"
    PATCH = "patch"
    CHILD = "child"


class EffectState(Word):
    """ilr.effects.state."""

    PROPOSED = "proposed"  # recorded, not yet sent
    DISPATCHED = "dispatched"  # a send may be in flight
    COMMITTED = "committed"  # the result is recorded
    AMBIGUOUS = "ambiguous"  # it may or may not have happened; never resent blindly


class EntryKind(Word):
    """ilr.journal.kind: the entries of an effect's hash chain (its receipt)."""

    PROPOSED = "PROPOSED"
    AUTHORIZED = "AUTHORIZED"
    DISPATCHED = "DISPATCHED"
    COMMITTED = "COMMITTED"
    REFUSED = "REFUSED"
    AMBIGUOUS = "AMBIGUOUS"
    LATE_RESULT = "LATE_RESULT"  # a result that came back after the effect was resolved
    AUDITED = "AUDITED"  # a lookup after a settled resend


# Entries that end an open DISPATCHED (a REFUSED only when it carries resolves: true).
RESOLVING_ENTRIES = (EntryKind.COMMITTED, EntryKind.AMBIGUOUS)


class ResendVia(Word):
    """COMMITTED.via values that mean the effect was sent again."""

    RETRY_IDEMPOTENT = "retry-idempotent"  # resent with the same idempotency key
    RECOVERY_REAPPLY = "recovery-reapply"  # a lookup said it never landed, so sent again


class ResultStatus(Word):
    """EffectResult.status: what ctx.effect tells the workflow."""

    COMMITTED = "COMMITTED"
    DUPLICATE_IGNORED = "DUPLICATE_IGNORED"
    COMMITTED_BY_RETRY = "COMMITTED_BY_RETRY"
    COMMITTED_ON_QUERY = "COMMITTED_ON_QUERY"
    REAPPLIED_AFTER_QUERY = "REAPPLIED_AFTER_QUERY"
    AMBIGUOUS = "AMBIGUOUS"
    REFUSED_AUTHORITY = "REFUSED:authority"  # the grant: missing, revoked, expired, not covering
    REFUSED_STALE_PREMISE = "REFUSED:stale_premise"
    REFUSED_CONFLICTING_PAYLOAD = "REFUSED:conflicting_payload"
    REFUSED_CANCELLED = "REFUSED:cancelled"
    REFUSED_TARGET_ERROR = "REFUSED:target_error"
    REFUSED_AUTHORITY_AT_RECOVERY = "REFUSED:authority_at_recovery"
    REFUSED_STALE_PREMISE_AT_RECOVERY = "REFUSED:stale_premise_at_recovery"
    REFUSED_CIRCUIT_OPEN = "REFUSED:circuit_open"
    POSTCONDITION_FAILED = "POSTCONDITION_FAILED"


# The words of runtimes before 0.2 for the same statuses: "lease" meant the grant, which read as
# a worker's lease. A result recorded with one reads as its new word (EffectResult), so a
# workflow replayed across the upgrade sees the word its code now tests for.
LEGACY_RESULT_STATUSES = {
    "REFUSED:lease": ResultStatus.REFUSED_AUTHORITY,
    "REFUSED:lease_at_recovery": ResultStatus.REFUSED_AUTHORITY_AT_RECOVERY,
}

# The statuses that mean the effect is known to have happened (by this call or an earlier one).
LANDED_RESULTS = (
    ResultStatus.COMMITTED,
    ResultStatus.DUPLICATE_IGNORED,
    ResultStatus.COMMITTED_BY_RETRY,
    ResultStatus.COMMITTED_ON_QUERY,
    ResultStatus.REAPPLIED_AFTER_QUERY,
)


class ScheduleOverlap(Word):
    """ilr.schedules.overlap: what a tick does while the schedule's previous run is live."""

    SKIP = "skip"  # start nothing; the tick is recorded as skipped
    BUFFER_ONE = "buffer_one"  # remember one tick, start it when the previous run ends
    ALLOW_ALL = "allow_all"  # start it anyway: runs may overlap


class FireOutcome(Word):
    """ilr.schedule_fires.outcome: what was decided for one tick."""

    STARTED = "started"  # its workflow was inserted
    SKIPPED = "skipped"  # the previous run was live (or the buffer was already full)
    BUFFERED = "buffered"  # waits for the previous run; becomes started (or failed)
    FAILED = "failed"  # nothing could start: no deployment, or its workflow id was taken


class FireSource(Word):
    """ilr.schedule_fires.source: a tick of the spec, or a trigger by hand."""

    SCHEDULE = "schedule"
    TRIGGER = "trigger"
