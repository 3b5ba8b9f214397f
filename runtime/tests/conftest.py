"""Shared fixtures: a fresh database per test in the project's own cluster, worker subprocesses.

Tests never touch a database they did not create: each test gets `ilr_t_<random>`, cloned from
a template that has the schema, and dropped afterwards.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from interlock_runtime import db, local_postgres

TESTS = Path(__file__).resolve().parent
REPO = TESTS.parents[1]


def _admin_dsn() -> str:
    ext = local_postgres.external_dsn()
    if ext:
        return ext
    local_postgres.start()
    return local_postgres.dsn("postgres")


def with_dbname(dsn: str, name: str) -> str:
    params = conninfo_to_dict(dsn)
    params["dbname"] = name
    return make_conninfo(**params)


@pytest.fixture(scope="session")
def admin_dsn() -> str:
    return _admin_dsn()


@pytest.fixture(scope="session")
def template_db(admin_dsn: str) -> Iterator[str]:
    name = f"ilr_tpl_{os.getpid()}"
    with psycopg.connect(admin_dsn, autocommit=True) as conn:
        conn.execute(f'drop database if exists "{name}"')
        conn.execute(f'create database "{name}"')
    with db.connect(with_dbname(admin_dsn, name)) as conn:
        db.apply_schema(conn)
    yield name
    with psycopg.connect(admin_dsn, autocommit=True) as conn:
        conn.execute(f'drop database if exists "{name}" with (force)')


@pytest.fixture
def dsn(admin_dsn: str, template_db: str) -> Iterator[str]:
    name = f"ilr_t_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(admin_dsn, autocommit=True) as conn:
        conn.execute(f'create database "{name}" template "{template_db}"')
    yield with_dbname(admin_dsn, name)
    with psycopg.connect(admin_dsn, autocommit=True) as conn:
        conn.execute(f'drop database if exists "{name}" with (force)')


@pytest.fixture
def conn(dsn: str) -> Iterator[psycopg.Connection]:
    with db.connect(dsn) as c:
        yield c


class WorkerProcess:
    """A real worker subprocess (`python -m interlock_runtime.worker`) with its event log."""

    def __init__(self, dsn: str, worker_id: str, log_dir: Path, module: str = "flows",
                 lease_ttl: float = 3.0, poll: float = 0.2, concurrency: int = 2,
                 extra_args: tuple[str, ...] = (),
                 env: dict[str, str] | None = None):  # fmt: skip
        self.worker_id = worker_id
        self.events_path = log_dir / f"{worker_id}.events.jsonl"
        cmd = [sys.executable, "-m", "interlock_runtime.worker", "--dsn", dsn, "--module", module,
               "--id", worker_id, "--lease-ttl", str(lease_ttl), "--poll", str(poll),
               "--concurrency", str(concurrency), *extra_args]  # fmt: skip
        full_env = dict(os.environ, PYTHONPATH=str(TESTS), **(env or {}))
        self._stderr = open(self.events_path, "w")
        self.proc = subprocess.Popen(cmd, stderr=self._stderr, stdout=subprocess.DEVNULL,
                                     env=full_env, cwd=str(TESTS))  # fmt: skip

    @property
    def pid(self) -> int:
        return self.proc.pid

    def events(self) -> list[dict]:
        out = []
        for line in self.events_path.read_text().splitlines():
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError:
                out.append({"event": "raw", "line": line})
        return out

    def wait_event(self, event: str, timeout: float = 30, **match: object) -> dict:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for e in self.events():
                if e.get("event") == event and all(e.get(k) == v for k, v in match.items()):
                    return e
            if self.proc.poll() is not None and event != "stopped":
                break
            time.sleep(0.05)
        raise AssertionError(
            f"worker {self.worker_id} never logged {event} {match}; exit={self.proc.poll()}; "
            f"log:\n{self.events_path.read_text()[-4000:]}"
        )

    def signal(self, sig: int) -> None:
        os.kill(self.proc.pid, sig)

    def state(self) -> str:
        """The kernel's process state letter (R, S, T for stopped, Z)."""
        return Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()[0]

    def wait_stopped(self, timeout: float = 20) -> None:
        wait_for(lambda: self.state() == "T", timeout, f"{self.worker_id} to stop")

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)
            self.proc.kill()
        self.proc.wait(timeout=10)
        self._stderr.close()


def wait_for(pred: Callable[[], object], timeout: float, what: str, every: float = 0.05):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = pred()
        if value:
            return value
        time.sleep(every)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


@pytest.fixture
def workers(dsn: str, tmp_path: Path) -> Iterator[Callable[..., WorkerProcess]]:
    started: list[WorkerProcess] = []

    def start(worker_id: str, **kwargs: object) -> WorkerProcess:
        kwargs.setdefault("dsn", dsn)
        w = WorkerProcess(worker_id=worker_id, log_dir=tmp_path, **kwargs)  # type: ignore[arg-type]
        started.append(w)
        return w

    yield start
    for w in started:
        w.close()


def read_jsonl(path: Path) -> list[dict]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
