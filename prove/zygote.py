"""A fork server for worker subprocesses: pay interpreter start and SDK imports once per sweep.

Each Prove run starts real worker processes (three runtime workers, or one Temporal worker, and
as many again after a crash). Started with `python -m ...`, each one spends about two seconds of
CPU importing the interpreter, psycopg, temporalio and the anthropic SDK before it does any
work; on two cores that, not the scenarios, was most of the sweep's cost.

The zygote is one process (`python -m prove.zygote SOCKET`) that imports those modules once and
then forks a child per request. A child is a real, separate process: it has its own pid, the
harness SIGKILLs, SIGSTOPs and SIGCONTs it as before, its kill points (ILR_KILL_AT) are read
from the environment it was given, and it runs the worker's own `main(argv)`. Only the imports
are shared (copy-on-write). The zygote stays single-threaded so that forking it is safe.

Protocol, on a Unix socket, one connection per child: the harness sends one JSON line
`{"module", "argv", "env", "cwd"}` with three file descriptors attached (stdin, stdout,
stderr, SCM_RIGHTS); the zygote answers `{"pid": N}` and, when the child has exited,
`{"exit": code}` (negative: killed by that signal, as subprocess.Popen reports it).

`ForkedProcess` is the harness's handle, with the part of subprocess.Popen's interface the
harness uses (pid, poll, wait, kill, terminate, send_signal, returncode, stdout).
`Zygote.popen` falls back to a plain subprocess for a command it cannot fork.
"""

from __future__ import annotations

import contextlib
import ctypes
import importlib
import json
import os
import select
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import IO, Any

# The modules a worker may be asked to run (`python -m <module>`), and what they import.
RUNNABLE = ("interlock_runtime.cli.worker", "baselines.worker")
PRELOAD = (
    "interlock_runtime.cli.worker",
    "baselines.worker",
    "prove.flows",
    "prove.stripe_flows",
    "world.model_stub",
    "anthropic",
    "temporalio.worker",
)
PR_SET_PDEATHSIG = 1
READY_TIMEOUT = 60.0


def _die_with_parent() -> None:
    """Ask the kernel to SIGKILL this process when its parent dies (Linux prctl), so that a
    killed harness leaves neither the zygote nor its children behind."""
    with contextlib.suppress(Exception):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


# -- the zygote process ---------------------------------------------------------------------


def _child(req: dict, fds: list[int], close: list[socket.socket]) -> None:
    """In the forked child: become the requested worker, then exit with its status."""
    code = 1
    try:
        signal.set_wakeup_fd(-1)
        for sig in (signal.SIGCHLD, signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, signal.SIG_DFL)
        for s in close:
            s.close()
        for target, fd in enumerate(fds[:3]):
            os.dup2(fd, target)
        for fd in fds:
            if fd > 2:
                os.close(fd)
        _die_with_parent()
        os.environ.clear()
        os.environ.update(req["env"])
        if req.get("cwd"):
            os.chdir(req["cwd"])
        from interlock_runtime import killpoints

        killpoints.configure_from_env()  # this child's own kill and stop points
        sys.argv = [req["module"], *req["argv"]]
        sys.stdout = open(1, "w", buffering=1, closefd=False)  # noqa: SIM115 - process-long
        sys.stderr = open(2, "w", buffering=1, closefd=False)  # noqa: SIM115
        code = int(importlib.import_module(req["module"]).main(req["argv"]) or 0)
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    except BaseException:  # noqa: BLE001 - report like an interpreter would, then exit
        import traceback

        traceback.print_exc()
        code = 1
    finally:
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(code)


def serve(path: str) -> int:
    """The zygote's main loop: accept spawn requests on `path`, fork, report exits."""
    _die_with_parent()
    for name in PRELOAD:
        importlib.import_module(name)
    if threading.active_count() != 1:  # forking a threaded process is not safe
        print(f"zygote: an import started threads ({threading.enumerate()})", file=sys.stderr)
        return 2
    wake_r, wake_w = socket.socketpair()
    wake_r.setblocking(False)
    wake_w.setblocking(False)
    signal.signal(signal.SIGCHLD, lambda *_: None)  # the wake-up fd does the work
    signal.set_wakeup_fd(wake_w.fileno())
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(64)
    print(json.dumps({"event": "ready", "pid": os.getpid()}), flush=True)
    children: dict[int, socket.socket] = {}
    while True:
        try:
            ready, _, _ = select.select([listener, wake_r, sys.stdin], [], [], 1.0)
        except InterruptedError:
            continue
        if sys.stdin in ready and not os.read(sys.stdin.fileno(), 4096):
            break  # the harness closed our stdin: the sweep is over
        if wake_r in ready:
            with contextlib.suppress(BlockingIOError):
                wake_r.recv(4096)
        _reap(children)
        if listener in ready:
            conn, _ = listener.accept()
            try:
                msg, fds, _, _ = socket.recv_fds(conn, 1 << 20, 8)
                while not msg.endswith(b"\n"):  # a long request may come in pieces
                    more = conn.recv(1 << 20)
                    if not more:
                        raise ValueError("the request was cut short")
                    msg += more
                req = json.loads(msg.decode())
            except (OSError, ValueError) as e:
                with contextlib.suppress(OSError):
                    conn.sendall(json.dumps({"error": repr(e)}).encode() + b"\n")
                conn.close()
                continue
            pid = os.fork()
            if pid == 0:
                _child(req, fds, [listener, wake_r, wake_w, conn, *children.values()])
            for fd in fds:
                os.close(fd)
            conn.sendall(json.dumps({"pid": pid}).encode() + b"\n")
            children[pid] = conn
            _reap(children)  # a child may already have died
    for pid in list(children):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    return 0


def _reap(children: dict[int, socket.socket]) -> None:
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        conn = children.pop(pid, None)
        if conn is not None:
            with contextlib.suppress(OSError):
                code = os.waitstatus_to_exitcode(status)
                conn.sendall(json.dumps({"exit": code}).encode() + b"\n")
            conn.close()


# -- the harness's side ---------------------------------------------------------------------


class ForkedProcess:
    """A worker forked by the zygote, with the part of Popen's interface the harness uses."""

    def __init__(self, sock: socket.socket, args: list[str], stdout: IO[str] | None) -> None:
        self._sock = sock
        self._buf = b""
        self.args = args
        self.stdout = stdout
        self.returncode: int | None = None
        first = self._read_line(READY_TIMEOUT)
        if first is None or "pid" not in first:
            raise RuntimeError(f"the zygote did not start {args[:3]}: {first}")
        self.pid: int = int(first["pid"])

    def _read_line(self, timeout: float | None) -> dict | None:
        deadline = None if timeout is None else time.monotonic() + timeout
        while b"\n" not in self._buf:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            ready, _, _ = select.select([self._sock], [], [], left)
            if not ready:
                return None
            chunk = self._sock.recv(4096)
            if not chunk:
                return {"exit": -signal.SIGKILL, "lost": True}  # the zygote itself died
            self._buf += chunk
        line, _, self._buf = self._buf.partition(b"\n")
        return json.loads(line)

    def poll(self) -> int | None:
        if self.returncode is None:
            msg = self._read_line(0.0)
            if msg is not None and "exit" in msg:
                self.returncode = int(msg["exit"])
                self._sock.close()
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None:
            msg = self._read_line(timeout)
            if msg is None:
                raise subprocess.TimeoutExpired(self.args, timeout or 0)
            self.returncode = int(msg["exit"])
            self._sock.close()
        return self.returncode

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:  # never signal a pid the kernel may have handed on
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, sig)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)


class Zygote:
    """The harness's handle on one zygote process; `popen` is a drop-in for subprocess.Popen
    for `[sys.executable, "-m", <RUNNABLE module>, ...]` commands."""

    def __init__(self, cwd: str | Path | None = None, env: dict[str, str] | None = None) -> None:
        self._dir = tempfile.mkdtemp(prefix="ilr-zygote-")
        self.path = os.path.join(self._dir, "sock")
        self._cwd = str(cwd) if cwd else None
        self._env = env
        self.proc: subprocess.Popen | None = None
        self.forked = 0
        self.fallbacks = 0

    def start(self) -> Zygote:
        self.proc = subprocess.Popen([sys.executable, "-m", "prove.zygote", self.path],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     cwd=self._cwd, env=self._env, text=True)  # fmt: skip
        assert self.proc.stdout is not None
        ready, _, _ = select.select([self.proc.stdout], [], [], READY_TIMEOUT)
        line = self.proc.stdout.readline() if ready else ""
        if '"ready"' not in line:
            self.close()
            raise RuntimeError(f"the zygote did not start (exit {self.proc.poll()})")
        return self

    def close(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            with contextlib.suppress(OSError):
                assert self.proc.stdin is not None
                self.proc.stdin.close()  # the zygote kills its children and exits
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        with contextlib.suppress(OSError):
            os.unlink(self.path)
        with contextlib.suppress(OSError):
            os.rmdir(self._dir)

    def __enter__(self) -> Zygote:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def can_fork(self, cmd: list[str]) -> bool:
        return (len(cmd) >= 3 and cmd[0] == sys.executable and cmd[1] == "-m"
                and cmd[2] in RUNNABLE and self.proc is not None
                and self.proc.poll() is None)  # fmt: skip

    def popen(self, cmd: list[str], *, stdout: Any = None, stderr: Any = None,
              env: dict[str, str] | None = None, cwd: str | Path | None = None,
              text: bool = False) -> Any:  # fmt: skip
        """Fork `cmd` in the zygote (stdout: None, DEVNULL, PIPE or a file; stderr: a file
        or None); anything else runs as a plain subprocess."""
        if not self.can_fork(cmd) or stdout not in (None, subprocess.DEVNULL, subprocess.PIPE) \
                and not hasattr(stdout, "fileno"):  # fmt: skip
            self.fallbacks += 1
            return subprocess.Popen(cmd, stdout=stdout, stderr=stderr, env=env, cwd=cwd,
                                    text=text)  # fmt: skip
        opened: list[int] = []

        def fd_of(stream: Any, mode: int) -> int:
            if stream is None or stream == subprocess.DEVNULL:
                fd = os.open(os.devnull, mode)
                opened.append(fd)
                return fd
            return stream.fileno()

        reader = None
        if stdout == subprocess.PIPE:
            r, w = os.pipe()
            opened.append(w)
            out_fd = w
            reader = os.fdopen(r, "r" if text else "rb")
        else:
            out_fd = fd_of(stdout, os.O_WRONLY)
        fds = [fd_of(None, os.O_RDONLY), out_fd, fd_of(stderr, os.O_WRONLY)]
        req = {"module": cmd[2], "argv": cmd[3:], "env": dict(os.environ if env is None else env),
               "cwd": str(cwd) if cwd else None}  # fmt: skip
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.connect(self.path)
            socket.send_fds(sock, [json.dumps(req).encode() + b"\n"], fds)
            proc = ForkedProcess(sock, cmd, reader)
        except BaseException:
            sock.close()
            if reader is not None:
                reader.close()
            raise
        finally:
            for fd in opened:
                os.close(fd)
        self.forked += 1
        return proc


if __name__ == "__main__":
    sys.exit(serve(sys.argv[1]))
