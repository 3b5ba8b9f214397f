"""Test support: a fresh database per test, real worker subprocesses, waiting helpers.

Used by the project's own tests and by the conformance suite; usable for testing your own
workflows the same way (real Postgres, real processes, real signals).
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
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

import psycopg
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from . import db, local_postgres, migrations

T = TypeVar("T")


def admin_dsn() -> str:
    """A DSN with the right to create databases: ILR_DSN, or the project's own cluster."""
    ext = local_postgres.external_dsn()
    if ext:
        return ext
    local_postgres.start()
    return local_postgres.dsn("postgres")


def with_dbname(dsn: str, name: str) -> str:
    params = conninfo_to_dict(dsn)
    params["dbname"] = name
    return make_conninfo("", **params)


@contextmanager
def template_database(admin: str) -> Iterator[str]:
    """A database holding the schema, cloned by fresh_database; dropped at exit."""
    name = f"ilr_tpl_{os.getpid()}_{uuid.uuid4().hex[:6]}"  # unique even within one process
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'drop database if exists "{name}" with (force)')
        conn.execute(f'create database "{name}"')
    with db.connect(with_dbname(admin, name)) as conn:
        migrations.ensure(conn)
    try:
        yield name
    finally:
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f'drop database if exists "{name}" with (force)')


@contextmanager
def fresh_database(admin: str, template: str) -> Iterator[str]:
    """A new database `ilr_t_<random>` cloned from the template; dropped at exit."""
    name = f"ilr_t_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'create database "{name}" template "{template}"')
    try:
        yield with_dbname(admin, name)
    finally:
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f'drop database if exists "{name}" with (force)')


def wait_for(pred: Callable[[], T], timeout: float, what: str, every: float = 0.05) -> T:
    """Poll pred until it returns something truthy (returned), or fail naming `what`."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = pred()
        if value:
            return value
        time.sleep(every)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


class WorkerProcess:
    """A real worker subprocess (`python -m interlock_runtime.cli.worker`) with its event log."""

    def __init__(self, dsn: str, worker_id: str, log_dir: Path, module: str,
                 pythonpath: str = "", lease_ttl: float = 3.0, poll: float = 0.2,
                 concurrency: int = 2, extra_args: tuple[str, ...] = (),
                 env: dict[str, str] | None = None, cwd: str | None = None,
                 popen: Callable[..., Any] = subprocess.Popen):  # fmt: skip
        """`popen` starts the process (subprocess.Popen's keywords stdout, stderr, env, cwd):
        a harness may pass a fork server's, which skips the interpreter start."""
        self.worker_id = worker_id
        self.events_path = log_dir / f"{worker_id}.events.jsonl"
        cmd = [sys.executable, "-m", "interlock_runtime.cli.worker", "--dsn", dsn, "--module", module,
               "--id", worker_id, "--lease-ttl", str(lease_ttl), "--poll", str(poll),
               "--concurrency", str(concurrency), *extra_args]  # fmt: skip
        path = os.pathsep.join(p for p in (pythonpath, os.environ.get("PYTHONPATH", "")) if p)
        full_env = dict(os.environ, PYTHONPATH=path, **(env or {}))
        self._stderr = open(self.events_path, "w")
        self.proc = popen(cmd, stderr=self._stderr, stdout=subprocess.DEVNULL, env=full_env,
                          cwd=cwd)  # fmt: skip

    @property
    def pid(self) -> int:
        pid: int = self.proc.pid
        return pid

    def events(self) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        for line in self.events_path.read_text().splitlines():
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError:
                out.append({"event": "raw", "line": line})
        return out

    def wait_event(self, event: str, timeout: float = 30, **match: object) -> dict[str, Any]:
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
