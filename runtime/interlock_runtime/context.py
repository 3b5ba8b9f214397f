"""The workflow context of a plain workflow, f(ctx, input): the run engine's sync shell
(docs/design.md#run-engine).

Every durable call is the engine's (run_engine.py); this shell serves its requests in the
run's thread: statements and fenced transactions on the run's connection, bodies inline (in a
helper thread when a deadline bounds them: timeouts.run_until), the effect gate driven inline
(effects.send.drive). RunView, the part workflow code reads of its run, is shared with the
asyncio shell.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, NoReturn, TypeVar

from . import db, timeouts
from .effects import EffectResult, gate, prepare
from .effects.send import drive as drive_gate
from .run_end import Ending
from .run_engine import EnginePort, RunEngine
from .run_port import RunPort
from .run_requests import Body, Gate, Io, Transaction, drive, query, transaction
from .run_state import Decision, RetryPolicy, Run

T = TypeVar("T")


class RunView:
    """What workflow code reads of its run, in either shell."""

    _engine: RunEngine

    @property
    def workflow_id(self) -> str:
        """The id of the workflow this run belongs to."""
        return self._engine.workflow_id

    @property
    def epoch(self) -> int:
        """This claim's epoch: one more at every claim of the workflow. Every write of the
        run is fenced on it (docs/design.md#fence)."""
        return self._engine.epoch

    @property
    def input(self) -> Any:
        """The workflow's input, typed values rebuilt (codec.py)."""
        return self._engine.workflow_input()

    @property
    def cancel_requested(self) -> bool:
        """True once a cancel of this workflow has reached this run (by its last write or
        heartbeat); `Cancelled` is raised at the next durable call."""
        return self._engine.run.cancel_requested_at is not None

    @property
    def unwinding(self) -> BaseException | None:
        """The Suspend/Fenced/Release/NonDeterminism that must end this run, if any."""
        return self._engine.unwinding

    @property
    def is_replaying(self) -> bool:
        """True while the next call has a recorded row (useful to silence duplicate logs)."""
        engine = self._engine
        return (engine.seq + 1) in engine.recorded

    def set_status(self, value: Any) -> None:
        """Publish `value` as this workflow's status: rt.query(id), `interlock query ID` and the
        console read it from the database, without a worker and without waking the workflow.

        A durable call like a step: it takes the next place in the history (adding one to
        code that runs already is a change for ctx.patched or a new version) and a replay
        passes over it. It is committed with the run's next write (the next step's record,
        the suspend of a wait, the completion), so a reader never sees a status that the
        committed history does not lead to. A typed value keeps its type (codec.py); a value
        that cannot be recorded is refused here, before anything is written (NotRecordable).
        No await in an async workflow."""
        self._engine.set_status(value)

    def patched(self, patch_id: str) -> bool:
        """True on new code paths; False when replaying history recorded before the patch.
        No await in an async workflow."""
        return self._engine.patched(patch_id)


class WorkflowContext(RunView):
    """What plain workflow code calls. One context per run; not shared between threads."""

    def __init__(self, run: Run, conn: db.Conn, steps: list[db.Row], worker_id: str,
                 stopping: threading.Event | None = None):  # fmt: skip
        self._engine = RunEngine(run, steps, worker_id, stopping)
        self._conn = conn
        self._port = EnginePort(self._engine, conn)
        self.worker_id = worker_id

    def _drive(self, io: Io[T]) -> T:
        return drive(io, self._serve, self._engine.thrown)

    def _serve(self, request: Any) -> Any:
        if isinstance(request, Body):
            return _body(request)
        if isinstance(request, Gate):
            return drive_gate(gate(self._port, request.prepared, request.seq, request.row,
                                   **request.options))  # fmt: skip
        if isinstance(request, Transaction):
            return transaction(self._conn, request)
        return query(self._conn, request)

    def step(self, name: str, fn: Callable[..., Any], *args: Any, retry: RetryPolicy | None = None,
             postcondition: Callable[[Any], bool] | None = None, **kwargs: Any) -> Any:  # fmt: skip
        """Run fn(*args, **kwargs) at least once and record its JSON result; replay returns it.

        A step body may run again after a crash before its record (like a Temporal activity), so
        anything with an external side effect belongs in ctx.effect, never in a step.
        """
        return self._drive(self._engine.step(name, fn, args, kwargs, retry, postcondition))

    def decide(self, name: str, call: Callable[[Any], Any], request: Any,
               premises: Callable[[], Any] | None = None,
               retry: RetryPolicy | None = None) -> Decision:  # fmt: skip
        """Ask a model once and record the answer first-writer-wins, with the premises it saw.

        Each model call is logged in ilr.llm_calls before it is made, so calls whose answers
        were discarded by a crash can be counted (llm_calls minus decide rows)."""
        return self._drive(self._engine.decide(name, call, request, premises, retry))

    def effect(self, target: Any, key: str, payload: Any, premises: Any, grant: str,
               name: str | None = None, local_premises: Any = (), compensation: bool = False,
               raise_on_refusal: bool = False, action: str | None = None,
               decision: Any = None, postcondition: Any = None) -> EffectResult:  # fmt: skip
        """Send an external effect through the gate (docs/design.md#gated-effects); returns an EffectResult.

        At most once per `key` at tiers 1 and 2 under assumptions A1, A2, A4 and A5
        (docs/design.md#assumptions), only under the live `grant`, only while `premises` (what
        the decision assumed) still hold, journaled in a verifiable receipt."""
        prepared = prepare(target, key, payload, premises, grant, name=name,
                           local_premises=local_premises, action=action,
                           postcondition=postcondition)  # fmt: skip
        options = {"compensation": compensation, "raise_on_refusal": raise_on_refusal,
                   "decision": decision}  # fmt: skip
        result: EffectResult = self._drive(self._engine.effect(prepared, options))
        return result

    def sleep(self, seconds: float, name: str = "sleep") -> None:
        """A durable timer: the step is recorded only at database time >= the recorded until."""
        self._drive(self._engine.sleep(seconds, name))

    def wait_signal(self, name: str, timeout: float | None = None) -> Any:
        """The next unconsumed signal `name` (its payload), or None after `timeout` seconds."""
        return self._drive(self._engine.wait_signal(name, timeout))

    def wait_approval(self, proposal: Any, timeout: float | None = None) -> dict[str, Any] | None:
        """Wait for a person to approve `proposal` (the payload this workflow will offer its
        effect), shown as such by `interlock describe`, `interlock approve` and the console.
        Returns the approval {grant_id, payload, facts_seen} (rt.approve / `interlock approve`
        make it: a grant bound to exactly that payload), or None after `timeout` seconds. The
        payload approved may differ from the proposal; the effect then offers what was
        approved or is refused."""
        return self._drive(self._engine.wait_approval(proposal, timeout))

    def child(self, workflow: Any, input: Any = None, child_id: str | None = None,
              version: str | None = None, *, queue: str | None = None,
              priority: int | None = None) -> str:  # fmt: skip
        """Start a child workflow (recorded once); returns its id, `<parent>/<seq>` by default.
        It runs on this workflow's queue at its priority unless `queue` / `priority` say
        otherwise, and its spans continue this run's trace (docs/queues.md#children)."""
        return self._drive(self._engine.child(workflow, input, child_id, version, queue, priority))

    def wait_child(self, child_id: str, timeout: float | None = None) -> Any:
        """The child's result; raises WorkflowFailed if it failed, None on timeout."""
        return self._drive(self._engine.wait_child(child_id, timeout))

    def continue_as_new(self, input: Any) -> NoReturn:
        """End this run as `continued` and start its successor `<id>#<n>` in one transaction."""
        self._drive(self._engine.continue_as_new(input))


def _body(request: Body) -> Any:
    """Workflow code in the run's thread; under a deadline, in a helper thread waited for until
    then (timeouts.run_until)."""

    def call() -> Any:
        out = request.fn(*request.args, **request.kwargs)
        return request.check(out) if request.check is not None else out

    return call() if request.deadline is None else timeouts.run_until(call, request.deadline)


def port_of(ctx: WorkflowContext) -> RunPort:
    """The run's internal interface (run_port.RunPort), for the worker and orphan recovery;
    ctx.effect hands it to the gate. Not for workflow code."""
    return ctx._port


def end_run(ctx: WorkflowContext, ending: Ending) -> None:
    """The worker's part: carry out what run_end decided, on the run's connection."""
    ctx._drive(ctx._engine.end(ending))
