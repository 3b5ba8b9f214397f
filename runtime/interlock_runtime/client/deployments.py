"""Deployments, the client's part (docs/api.md#client): which (name, version, code hash) of
each workflow is deployed, which version a start or a migration resolves to, and what a
version still has to drain. register_deployment is the worker's registration too."""

from __future__ import annotations

from typing import Any

from .. import codec, db, input_schema, validate
from ..errors import CodeChanged, UnknownWorkflow
from ..workflow import WorkflowDef, definition
from .connection import ClientConnection


class Deployments(ClientConnection):
    """Register workflows and read the deployments."""

    def register(self, *workflows: Any, allow_code_change: bool = False) -> list[WorkflowDef]:
        """Record the (name, version, code hash) of each workflow. A changed hash for a deployed
        pair raises CodeChanged unless allow_code_change."""
        defs = [definition(w) for w in workflows]
        with self._transaction() as conn:
            for wf in defs:
                register_deployment(conn, wf, allow_code_change)
        return defs

    def deployments(self) -> list[db.Row]:
        """Every deployed (name, version, code_sha256)."""
        return self._execute(db.query("list_deployments")).fetchall()

    def drain_report(self) -> list[db.Row]:
        """Workflows counted by name, version and status: what a version still has to drain."""
        return self._execute(db.query("drain_report")).fetchall()

    def _resolve_version(self, name: str, version: str | None) -> str:
        """The deployed version a run of `name` gets: `version` if deployed, else the newest;
        UnknownWorkflow, naming the deployed ones, when none serves it."""
        if version is not None:
            found = self._execute(db.query("get_deployment"), {"name": name, "version": version})
            if found.fetchone():
                return version
        else:
            row = self._execute(db.query("newest_version"), {"name": name}).fetchone()
            if row:
                newest: str = row["version"]
                return newest
        deployed = self.deployments()
        registered = sorted(f"{d['name']}@{d['version']}" for d in deployed)
        wanted = f"{name}@{version}" if version else name
        hint = validate.did_you_mean(name, [d["name"] for d in deployed])
        raise UnknownWorkflow(
            f"no deployment serves workflow {wanted!r}{hint}; registered: "
            f"{', '.join(registered) or 'none'}. Start a worker that serves it, or call "
            "rt.register(fn) with the decorated function."
        )


def register_deployment(conn: db.Conn, wf: WorkflowDef, allow_code_change: bool) -> None:
    """Upsert (name, version, code_sha256) inside the caller's transaction (docs/design.md#durable-replay),
    and the description of the workflow's declared input type, which a start by name checks
    its input against (docs/typed.md#checked-at-the-door)."""
    description = input_schema.describe(codec.input_hint(wf.fn))
    params = {
        "name": wf.name,
        "version": wf.version,
        "sha": wf.code_sha256,
        "input_schema": None if description is None else db.jsonb(description),
    }
    conn.execute(db.query("register_deployment"), params)
    row = db.one(conn.execute(db.query("get_deployment"), params))
    if row["code_sha256"] != wf.code_sha256:
        # recorded by a runtime before 0.2 (the whole module's hash) for this same code: the
        # deployment moves to the workflow's own hash (docs/operations.md#code-hash)
        same_code = row["code_sha256"] == wf.legacy_sha256
        if not (same_code or allow_code_change):
            raise CodeChanged(wf.name, wf.version, row["code_sha256"], wf.code_sha256)
        conn.execute(db.query("replace_deployment_hash"), params)
    if row["input_schema"] != description:  # the type changed, or an older worker registered it
        conn.execute(db.query("set_deployment_input_schema"), params)
    # runs started before any deployment served this name get their version now (queues.py)
    conn.execute(db.query("resolve_awaiting"), {"name": wf.name})
