"""Shared fixtures: a fresh database per test in the project's own cluster, worker subprocesses.

Tests never touch a database they did not create: each test gets `ilr_t_<random>`, cloned from
a template that has the schema, and dropped afterwards (interlock_runtime.testing).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import psycopg
import pytest

from interlock_runtime import db, testing
from interlock_runtime.testing import WorkerProcess, read_jsonl, wait_for  # noqa: F401

TESTS = Path(__file__).resolve().parent
REPO = TESTS.parents[1]


@pytest.fixture(scope="session")
def admin_dsn() -> str:
    return testing.admin_dsn()


@pytest.fixture(scope="session")
def template_db(admin_dsn: str) -> Iterator[str]:
    with testing.template_database(admin_dsn) as name:
        yield name


@pytest.fixture
def dsn(admin_dsn: str, template_db: str) -> Iterator[str]:
    with testing.fresh_database(admin_dsn, template_db) as fresh:
        yield fresh


@pytest.fixture
def conn(dsn: str) -> Iterator[psycopg.Connection]:
    with db.connect(dsn) as c:
        yield c


@pytest.fixture
def workers(dsn: str, tmp_path: Path) -> Iterator[Callable[..., WorkerProcess]]:
    """Start worker subprocesses serving runtime/tests/flows.py; all are killed at the end."""
    started: list[WorkerProcess] = []

    def start(worker_id: str, **kwargs: object) -> WorkerProcess:
        kwargs.setdefault("dsn", dsn)
        kwargs.setdefault("module", "flows")
        kwargs.setdefault("pythonpath", str(TESTS))
        kwargs.setdefault("cwd", str(TESTS))
        w = WorkerProcess(worker_id=worker_id, log_dir=tmp_path, **kwargs)  # type: ignore[arg-type]
        started.append(w)
        return w

    yield start
    for w in started:
        w.close()


PAYMENT = "pay_881"


@pytest.fixture
def target_factory(tmp_path: Path) -> Iterator[Callable[..., tuple]]:
    """Start local payment targets (world/target.py) at a tier, PAYMENT paid 10000 on each;
    returns (target, its admin client); all are stopped at the end."""
    from world.targets_for_tests import TargetFactory

    factory = TargetFactory(tmp_path, PAYMENT)
    yield factory.make
    factory.close()
