"""Fixtures for the conformance suite, built on interlock_runtime.testing.

Tests never touch a database they did not create: each test (or batch of cells) gets a fresh
`ilr_t_<random>` database cloned from this suite's own template (a name of its own, so it never
collides with the template of runtime/tests in the same pytest process), dropped afterwards.
Workers are real subprocesses serving conformance/parity_flows.py from the repository root.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import psycopg
import pytest

from interlock_runtime import db, migrations, testing
from interlock_runtime.testing import WorkerProcess

REPO = Path(__file__).resolve().parents[1]
FLOWS_MODULE = "conformance.parity_flows"
# The worker kind a run uses: "sync" serves plain workflows, "async" `async def` ones on the
# asyncio worker (`--async`, docs/async.md). The suites take it as a parameter; the evidence
# they judge (the database, the target's ledger and access log) does not depend on it.
MODES = ("sync", "async")
# ILR_LONG=1 (`make conformance LONG=1`): the whole async matrix, not the default subset
LONG = os.environ.get("ILR_LONG") == "1"


def mode_args(mode: str) -> tuple[str, ...]:
    """The worker command's arguments for a mode."""
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, not {mode!r}")
    return ("--async",) if mode == "async" else ()


@contextmanager
def conformance_template(admin: str) -> Iterator[str]:
    """A database holding the schema, cloned by testing.fresh_database; dropped at exit."""
    name = f"ilr_tplc_{os.getpid()}"
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'drop database if exists "{name}" with (force)')
        conn.execute(f'create database "{name}"')
    with db.connect(testing.with_dbname(admin, name)) as conn:
        migrations.ensure(conn)
    try:
        yield name
    finally:
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f'drop database if exists "{name}" with (force)')


def start_worker(dsn: str, worker_id: str, log_dir: Path, only: list[str] | None = None,
                 kill_at: str | None = None, mode: str = "sync",
                 **kwargs: object) -> WorkerProcess:  # fmt: skip
    """A worker subprocess serving conformance.parity_flows (optionally only some flows),
    SIGKILLing itself at the kill point `kill_at` when given; `mode` "async": the asyncio
    worker, for the async twins."""
    extra = mode_args(mode) + (("--only", ",".join(f"{n}@1" for n in only)) if only else ())
    env = {"ILR_KILL_AT": kill_at} if kill_at else None
    return WorkerProcess(
        dsn, worker_id, log_dir, FLOWS_MODULE, pythonpath=str(REPO), extra_args=extra, env=env,
        cwd=str(REPO), **kwargs,  # type: ignore[arg-type]
    )  # fmt: skip


@pytest.fixture(scope="session")
def admin_dsn() -> str:
    return testing.admin_dsn()


@pytest.fixture(scope="session")
def template_db(admin_dsn: str) -> Iterator[str]:
    with conformance_template(admin_dsn) as name:
        yield name


@pytest.fixture
def dsn(admin_dsn: str, template_db: str) -> Iterator[str]:
    with testing.fresh_database(admin_dsn, template_db) as fresh:
        yield fresh


@pytest.fixture
def workers(dsn: str, tmp_path: Path) -> Iterator[Callable[..., WorkerProcess]]:
    """Start worker subprocesses on the test's database; all are killed at the end."""
    started: list[WorkerProcess] = []

    def start(worker_id: str, **kwargs: object) -> WorkerProcess:
        kwargs.setdefault("dsn", dsn)
        kwargs.setdefault("log_dir", tmp_path)
        w = start_worker(worker_id=worker_id, **kwargs)  # type: ignore[arg-type]
        started.append(w)
        return w

    yield start
    for w in started:
        w.close()
