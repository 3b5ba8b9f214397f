"""How a run ends (run_end.ending): one pure decision both workers carry out. No database:
each case is the pair (what the code raised, what the context remembered)."""

from __future__ import annotations

from datetime import UTC, datetime

import psycopg
import psycopg.errors
import pytest

from interlock_runtime import run_end
from interlock_runtime.errors import (
    Cancelled,
    ContinuedAsNew,
    DatabaseLost,
    Fenced,
    NonDeterminism,
    Release,
    StepFailed,
    Suspend,
    WorkflowTimedOut,
    database_lost,
    is_database_fault,
)

DEADLINE = datetime(2026, 12, 5, 12, 0, tzinfo=UTC)


def end(ended=None, unwinding=None, result=None):
    return run_end.ending(ended, unwinding, result, DEADLINE)


@pytest.mark.parametrize(
    "fault",
    [
        psycopg.OperationalError("server closed the connection unexpectedly"),
        psycopg.errors.AdminShutdown("terminating connection due to administrator command"),
        psycopg.errors.SerializationFailure("could not serialize access"),
        psycopg.errors.ReadOnlySqlTransaction("cannot execute UPDATE in a read-only transaction"),
        psycopg.InterfaceError("the connection is closed"),
    ],
    ids=lambda e: type(e).__name__,
)
def test_a_database_fault_abandons_the_run_and_writes_nothing(fault) -> None:
    assert is_database_fault(fault)
    for outcome in (end(fault), end(database_lost(fault)), end(None, database_lost(fault), 1)):
        assert outcome.event == "abandoned" and outcome.write is None
        assert outcome.fields["reason"] == "database unavailable"
        assert "\n" not in outcome.fields["error"]


def test_code_that_catches_a_database_fault_cannot_make_it_a_failure() -> None:
    """The code caught the DatabaseLost the context remembered, then raised its own error (or
    returned): the run is still abandoned, never failed or completed."""
    lost = database_lost(psycopg.errors.AdminShutdown("terminating connection"))
    assert end(ValueError("gave up"), lost).event == "abandoned"
    assert end(None, lost, result="done").event == "abandoned"


def test_a_statement_error_is_not_a_database_fault() -> None:
    bad = psycopg.errors.UndefinedColumn("column x does not exist")
    assert not is_database_fault(bad)
    assert end(bad).write == "failed"


def test_a_caught_timeout_replaced_by_another_error_still_ends_timed_out() -> None:
    """Both workers: a workflow that catches WorkflowTimedOut and raises its own error ends
    timed_out (before, the sync worker wrote failed and the asyncio worker timed_out)."""
    timed_out = WorkflowTimedOut("deadline passed")
    for outcome in (end(RuntimeError("cleanup failed"), timed_out), end(None, timed_out, 1),
                    end(timed_out, timed_out)):  # fmt: skip
        assert outcome.write == "timed_out" and outcome.event == "timed_out"
        assert outcome.error["type"] == "WorkflowTimedOut"
        assert outcome.error["deadline"] == DEADLINE.isoformat()
        assert outcome.fields == {"by": "run"}


@pytest.mark.parametrize(
    ("exc", "event", "write"),
    [
        (Suspend("waiting"), "suspended", None),
        (Fenced("epoch moved"), "fenced", None),
        (ContinuedAsNew("wf#1"), "continued", None),
        (Release("stopping"), "released", "release"),
        (NonDeterminism(3, {"kind": "step"}, {"kind": "sleep"}), "stuck", "stuck"),
        (Cancelled("cancelled"), "cancelled", "cancelled"),
    ],
    ids=lambda v: type(v).__name__ if isinstance(v, BaseException) else str(v),
)
def test_each_unwinding_exception_ends_the_run_as_it_says(exc, event, write) -> None:
    outcome = end(exc, exc if not isinstance(exc, Cancelled) else None)
    assert (outcome.event, outcome.write) == (event, write)
    # caught and replaced by the code's own error: still the runtime's end (rule 3)
    if not isinstance(exc, Cancelled):
        assert (end(KeyError("x"), exc).event, end(KeyError("x"), exc).write) == (event, write)


def test_a_caught_cancel_then_an_error_is_the_codes_failure() -> None:
    """Cancelled is delivered once and may be compensated for: what the code does next is its
    own (the context does not remember it)."""
    outcome = end(StepFailed("undo", {"type": "X", "message": "no"}), None)
    assert outcome.write == "failed" and outcome.error["type"] == "StepFailed"


def test_swallowed_unwinding_exceptions_and_returns() -> None:
    suspend = end(None, Suspend("waiting"), 1)
    assert suspend.write == "stuck_unfenced" and suspend.error["type"] == "SuspendSwallowed"
    release = end(None, Release("stopping"), 1)
    assert release.write == "stuck" and release.error["type"] == "UnwindSwallowed"
    fenced = end(None, Fenced("gone"), 1)
    assert fenced.event == "fenced" and fenced.write is None


def test_a_return_completes_with_the_encoded_result_or_fails_when_unrecordable() -> None:
    done = end(None, None, {"n": 1})
    assert (done.event, done.write, done.result) == ("completed", "completed", {"n": 1})
    bad = end(None, None, {1, 2})
    assert bad.write == "failed" and bad.error["type"] == "TypeError"


def test_a_run_claimed_past_its_deadline() -> None:
    outcome = run_end.timed_out_at_claim(DEADLINE)
    assert outcome.write == "timed_out" and outcome.fields == {"by": "claim"}
    assert outcome.error["was"] == "waiting to run"


def test_database_lost_is_not_catchable_as_an_exception() -> None:
    assert not issubclass(DatabaseLost, Exception)
