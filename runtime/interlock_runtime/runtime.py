"""The client API (spec 6): start workflows, read them, wait for results.

Runtime(dsn) applies the schema. Every method validates its input before it writes anything.
"""

from __future__ import annotations

import json
import re
import threading
import time
from typing import Any

import psycopg

from . import db, local_postgres
from .errors import (
    CodeChanged,
    InvalidInput,
    UnknownWorkflow,
    WorkflowConflict,
    WorkflowFailed,
    WorkflowNotFound,
)
from .workflow import WorkflowDef, definition

_ID = re.compile(r"^[A-Za-z0-9_.:@/#=+-]{1,200}$")
MAX_INPUT_BYTES = 1 << 20
TERMINAL = ("completed", "failed", "cancelled", "stuck", "continued")


def check_id(value: Any, what: str = "workflow id") -> str:
    if not isinstance(value, str) or not _ID.match(value):
        raise InvalidInput(
            f"{what} {value!r} is not valid: use 1-200 characters of letters, digits and "
            "_ . : @ / # = + -"
        )
    return value


class Runtime:
    """A client of one Interlock database. Thread-safe; cheap to keep for a process's lifetime."""

    def __init__(self, dsn: str | None = None, *, apply_schema: bool = True):
        self.dsn = dsn or local_postgres.dsn()
        self._lock = threading.Lock()
        self._conn = db.connect(self.dsn)
        if apply_schema:
            db.apply_schema(self._conn)

    def close(self) -> None:
        self._conn.close()

    def __enter__(self) -> Runtime:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def _execute(self, sql: str, params: dict | None = None) -> psycopg.Cursor:
        with self._lock:
            if self._conn.closed or self._conn.broken:  # e.g. after a server restart
                self._conn = db.connect(self.dsn)
            return self._conn.execute(sql, params)

    # -- deployments ------------------------------------------------------------------------

    def register(self, *workflows: Any, allow_code_change: bool = False) -> list[WorkflowDef]:
        """Record the (name, version, code hash) of each workflow. A changed hash for a deployed
        pair raises CodeChanged unless allow_code_change."""
        defs = [definition(w) for w in workflows]
        with self._lock, self._conn.transaction():
            for wf in defs:
                register_deployment(self._conn, wf, allow_code_change)
        return defs

    def deployments(self) -> list[dict]:
        return self._execute(db.query("list_deployments")).fetchall()

    # -- workflows --------------------------------------------------------------------------

    def start(
        self, workflow: Any, wf_id: str, input: Any = None, version: str | None = None
    ) -> str:
        """Start a workflow, idempotent on wf_id. `workflow` is a name or a decorated function.

        The input must be JSON; it is refused before anything is written. A second start with
        the same id and the same name and input returns the id; a different one raises
        WorkflowConflict.
        """
        check_id(wf_id)
        text = _input_text(input)
        if isinstance(workflow, str):
            name = workflow
        else:
            wf = definition(workflow)
            self.register(wf)
            name, version = wf.name, version or wf.version
        version = self._resolve_version(name, version)
        with self._lock, self._conn.transaction():
            params = {
                "id": wf_id,
                "name": name,
                "version": version,
                "input": db.jsonb(json.loads(text)),
            }
            inserted = self._conn.execute(db.query("insert_workflow"), params).fetchone()
            if inserted:
                self._conn.execute(db.query("notify_ready"), {"id": wf_id})
                return wf_id
            existing = self._conn.execute(db.query("get_workflow"), {"id": wf_id}).fetchone()
        same = (existing["name"], existing["version"]) == (name, version)
        if same and db.to_json_text(existing["input"], "input") == text:
            return wf_id
        raise WorkflowConflict(
            f"workflow id {wf_id!r} already exists as {existing['name']}@{existing['version']} "
            "with a different name, version or input; choose a new id to start another workflow"
        )

    def _resolve_version(self, name: str, version: str | None) -> str:
        if version is not None:
            found = self._execute(db.query("get_deployment"), {"name": name, "version": version})
            if found.fetchone():
                return version
        else:
            row = self._execute(db.query("newest_version"), {"name": name}).fetchone()
            if row:
                return row["version"]
        registered = sorted(f"{d['name']}@{d['version']}" for d in self.deployments())
        wanted = f"{name}@{version}" if version else name
        raise UnknownWorkflow(
            f"no deployment serves workflow {wanted!r}; registered: "
            f"{', '.join(registered) or 'none'}. Start a worker that serves it, or call "
            "rt.register(fn) with the decorated function."
        )

    def describe(self, wf_id: str) -> dict:
        """The workflow row, its steps and its claim history. Read only; runs no code."""
        row = self._execute(db.query("get_workflow"), {"id": wf_id}).fetchone()
        if row is None:
            raise WorkflowNotFound(f"no workflow with id {wf_id!r}")
        row["steps"] = self._execute(db.query("load_steps"), {"wf": wf_id}).fetchall()
        row["claims"] = self.claim_history(wf_id)
        return row

    def claim_history(self, wf_id: str) -> list[dict]:
        return self._execute(db.query("claim_history"), {"wf": wf_id}).fetchall()

    def list(self, status: str | None = None, name: str | None = None,
             version: str | None = None, limit: int = 1000) -> list[dict]:  # fmt: skip
        params = {"status": status, "name": name, "version": version, "limit": limit}
        return self._execute(db.query("list_workflows"), params).fetchall()

    def result(self, wf_id: str, timeout: float | None = None, poll: float = 0.1) -> Any:
        """Wait until the workflow ends; return its result or raise WorkflowFailed."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            row = self._execute(db.query("get_workflow"), {"id": wf_id}).fetchone()
            if row is None:
                raise WorkflowNotFound(f"no workflow with id {wf_id!r}")
            if row["status"] == "completed":
                return row["result"]
            if row["status"] in TERMINAL:
                raise WorkflowFailed(wf_id, row["status"], row["error"])
            if deadline is not None and time.monotonic() >= deadline:
                raise TimeoutError(
                    f"workflow {wf_id!r} is still {row['status']} after {timeout}s; "
                    "is a worker running for it?"
                )
            time.sleep(poll)


def _input_text(value: Any) -> str:
    try:
        text = db.to_json_text(value, "workflow input")
    except TypeError as exc:
        raise InvalidInput(
            f"{exc}; pass JSON values only (dict, list, str, number, bool, None)"
        ) from None
    if len(text.encode()) > MAX_INPUT_BYTES:
        raise InvalidInput(f"workflow input is {len(text)} bytes; the limit is {MAX_INPUT_BYTES}")
    return text


def register_deployment(conn: psycopg.Connection, wf: WorkflowDef, allow_code_change: bool) -> None:
    """Upsert (name, version, code_sha256) inside the caller's transaction (spec B4)."""
    params = {"name": wf.name, "version": wf.version, "sha": wf.code_sha256}
    conn.execute(db.query("register_deployment"), params)
    row = conn.execute(db.query("get_deployment"), params).fetchone()
    if row["code_sha256"] != wf.code_sha256:
        if not allow_code_change:
            raise CodeChanged(wf.name, wf.version, row["code_sha256"], wf.code_sha256)
        conn.execute(db.query("replace_deployment_hash"), params)
