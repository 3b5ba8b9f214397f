"""Separate hosts on one machine: Linux network namespaces for worker groups (issue 20).

Each namespace is a host of its own: its own loopback, its own routing, and one veth link to the
root namespace, with private addresses 10.231.<n>.1/24 on the root side (the namespace's
`gateway`) and 10.231.<n>.2/24 inside (`address`), and a default route through the gateway,
so every address of the root namespace is reachable from inside. Processes run inside with
`ip netns exec NAME ...` (run(), popen()).

Faults, both undone by heal():

- partition(ports): a partition from some TCP ports of the root namespace (Postgres, say)
  while every other port stays reachable (the payment target, say). It is made of policy
  routing rules *inside* the namespace, `ip rule add ipproto tcp dport P blackhole` for what
  leaves and `... sport P blackhole` for what arrives, ahead of the local table (moved from
  preference 0 to LOCAL_PREF when the namespace is made, so that arriving packets meet the
  rule too). Established connections stay open and their segments are dropped in both
  directions; TCP retransmits, so they resume when the rules go. A new connection fails at
  once (the route lookup refuses it) rather than after a timeout. This needs neither
  netfilter nor a tc action module: only the kernel's FIB rules with port selectors (4.17+).
- partition(): the whole link down (both ends), everything unreachable.

Everything is named with the creating process's pid: namespaces `ilrns-<pid>-<label>`, the
root side of each veth `ilr<pid>h<n>`. NetWorld (a context manager) destroys what it made,
and before making anything sweeps what a dead process left behind (a test killed by SIGKILL
leaves nothing for long). Deleting a namespace destroys its veth pair with it. Subnet numbers
are chosen under a file lock among those no root-side interface uses, so concurrent test
processes (the mutant runner's copies, say) never share one.

Relay: a plain TCP forwarder in the root namespace, for services that bind loopback only
(world/target.py refuses any other address): it listens on a gateway and forwards to
127.0.0.1:port, so the namespaces reach the service at relay.url.

Needs root and iproute2 (`ip`); available() says whether both are there.
"""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import os
import re
import shutil
import socket
import subprocess
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

PREFIX = "ilrns-"
LINK_RE = re.compile(r"^ilr(\d+)h(\d+)$")  # the root side of a veth: ilr<pid>h<n>
NS_RE = re.compile(r"^ilrns-(\d+)-")
SUBNET = "10.231"  # 10.231.<n>.0/24, n in 1..254
LOCAL_PREF = 1000  # the local table's rule, moved from 0 so that partition rules come first
PARTITION_PREF = 100
LOCK = Path("/run/lock" if os.path.isdir("/run/lock") else "/tmp") / "interlock-netns.lock"


CLONE_NEWNET = 0x40000000


def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


class NetnsError(RuntimeError):
    """A namespace could not be made or changed; the message carries ip's own words."""


def available() -> str | None:
    """None when namespaces can be made here, else why not (for a pytest skip)."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    if shutil.which("ip") is None:
        return "iproute2 (`ip`) is not installed"
    return None


def ip(*args: str, ns: str | None = None, check: bool = True) -> str:
    cmd = ["ip", *(["-n", ns] if ns else []), *args]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
    if check and proc.returncode != 0:
        raise NetnsError(f"{' '.join(cmd)} failed (exit {proc.returncode}): {proc.stderr.strip()}")
    return proc.stdout


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def namespaces() -> list[str]:
    return [line.split()[0] for line in ip("netns", "list").splitlines() if line.strip()]


def root_links() -> list[str]:
    out = ip("-o", "link", "show")
    # "7: ilr123h1@if6: <...>": the name ends at '@' (a veth names its peer) or ':'
    return [re.split(r"[@:]", line.split(": ", 2)[1])[0] for line in out.splitlines()]


def sweep_stale() -> list[str]:
    """Remove the namespaces and root-side links of processes that no longer exist."""
    removed = []
    for name in namespaces():
        m = NS_RE.match(name)
        if m and not _alive(int(m.group(1))):
            ip("netns", "del", name, check=False)
            removed.append(name)
    for link in root_links():
        m = LINK_RE.match(link)
        if m and not _alive(int(m.group(1))):
            ip("link", "del", link, check=False)
            removed.append(link)
    return removed


def _subnets_in_use() -> set[int]:
    used = set()
    for m in re.finditer(rf"inet {re.escape(SUBNET)}\.(\d+)\.", ip("-o", "-4", "addr", "show")):
        used.add(int(m.group(1)))
    return used


@dataclass
class Namespace:
    """One host: a namespace, its veth link to the root namespace and its addresses."""

    name: str
    index: int  # the third octet of its subnet
    link: str  # the root side of the veth (the inside is eth0)
    _blocked: list[int] = field(default_factory=list)
    _link_down: bool = False

    @property
    def gateway(self) -> str:
        """The root namespace's address on this link: where the namespace reaches the host."""
        return f"{SUBNET}.{self.index}.1"

    @property
    def address(self) -> str:
        return f"{SUBNET}.{self.index}.2"

    @property
    def subnet(self) -> str:
        return f"{SUBNET}.{self.index}.0/24"

    def _create(self) -> None:
        ip("netns", "add", self.name)
        ip("link", "add", self.link, "type", "veth", "peer", "name", "eth0", "netns", self.name)
        ip("addr", "add", f"{self.gateway}/24", "dev", self.link)
        ip("link", "set", self.link, "up")
        ip("link", "set", "lo", "up", ns=self.name)
        ip("addr", "add", f"{self.address}/24", "dev", "eth0", ns=self.name)
        ip("link", "set", "eth0", "up", ns=self.name)
        ip("route", "add", "default", "via", self.gateway, ns=self.name)
        ip("rule", "add", "pref", str(LOCAL_PREF), "lookup", "local", ns=self.name)
        ip("rule", "del", "pref", "0", "lookup", "local", ns=self.name)

    def destroy(self) -> None:
        ip("netns", "del", self.name, check=False)  # takes both ends of the veth with it
        # ... unless the namespace lives on unnamed (sockets a killed process left there keep
        # it until they time out) or was half made: the root side goes explicitly
        ip("link", "del", self.link, check=False)

    # -- processes ----------------------------------------------------------------------------

    def command(self, cmd: Sequence[str]) -> list[str]:
        return ["ip", "netns", "exec", self.name, *cmd]

    def run(self, cmd: Sequence[str], **kwargs: Any) -> subprocess.CompletedProcess[Any]:
        """subprocess.run inside the namespace."""
        return subprocess.run(self.command(cmd), **kwargs)

    def popen(self, cmd: Sequence[str], **kwargs: Any) -> subprocess.Popen[Any]:
        """subprocess.Popen inside the namespace. `ip netns exec` execs the command in place,
        so the Popen's pid is the command's own (signals reach it, not a wrapper). Usable as
        testing.WorkerProcess's `popen`."""
        return subprocess.Popen(self.command(cmd), **kwargs)

    def connect(self, host: str, port: int, timeout: float = 5.0) -> socket.socket:
        """A TCP connection made from inside the namespace (a helper thread enters it with
        setns(2); the socket stays in the namespace and is usable from any thread)."""
        out: list[socket.socket | BaseException] = []

        def inside() -> None:
            try:
                with open(f"/run/netns/{self.name}") as f:
                    if _libc().setns(f.fileno(), CLONE_NEWNET) != 0:
                        raise OSError(ctypes.get_errno(), f"setns into {self.name}")
                out.append(socket.create_connection((host, port), timeout=timeout))
            except BaseException as exc:  # handed to the caller
                out.append(exc)

        t = threading.Thread(target=inside, daemon=True)
        t.start()
        t.join()
        if isinstance(out[0], BaseException):
            raise out[0]
        return out[0]

    # -- faults -------------------------------------------------------------------------------

    def _rules(self, verb: str, port: int) -> None:
        for selector in ("dport", "sport"):
            ip("rule", verb, "pref", str(PARTITION_PREF), "ipproto", "tcp", selector, str(port),
               "blackhole", ns=self.name)  # fmt: skip

    def partition(self, ports: Sequence[int] | None = None) -> None:
        """Cut the namespace off from these TCP ports of the root namespace (both directions),
        or with no ports, take the whole link down."""
        if ports is None:
            ip("link", "set", self.link, "down")
            ip("link", "set", "eth0", "down", ns=self.name)
            self._link_down = True
            return
        for port in ports:
            if port not in self._blocked:
                self._rules("add", port)
                self._blocked.append(port)

    def heal(self) -> None:
        """Undo every partition(): links up (and the default route back), rules gone."""
        if self._link_down:
            ip("link", "set", self.link, "up")
            ip("link", "set", "eth0", "up", ns=self.name)
            ip("route", "replace", "default", "via", self.gateway, ns=self.name)
            self._link_down = False
        while self._blocked:
            self._rules("del", self._blocked.pop())

    @property
    def partitioned(self) -> bool:
        return self._link_down or bool(self._blocked)


class NetWorld:
    """Named namespaces for one test, each with its own link to the root namespace.

    >>> with NetWorld("a", "b") as world:
    ...     world["a"].popen([...]); world["a"].partition([5432]); world["a"].heal()
    """

    def __init__(self, *labels: str) -> None:
        if not labels or len(set(labels)) != len(labels):
            raise ValueError("give distinct labels, one per namespace")
        self.labels = labels
        self.spaces: dict[str, Namespace] = {}

    def __enter__(self) -> NetWorld:
        reason = available()
        if reason:
            raise NetnsError(reason)
        pid = os.getpid()
        LOCK.touch(exist_ok=True)
        try:
            with LOCK.open() as lock:
                fcntl.flock(lock, fcntl.LOCK_EX)
                sweep_stale()
                used = _subnets_in_use()
                free = iter(n for n in range(1, 255) if n not in used)
                for label in self.labels:
                    n = next(free, None)
                    if n is None:
                        raise NetnsError(f"no free subnet {SUBNET}.<n>.0/24 left")
                    space = Namespace(f"{PREFIX}{pid}-{label}", n, f"ilr{pid}h{n}")
                    self.spaces[label] = space  # registered first: a half-made one is destroyed
                    space._create()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        for space in self.spaces.values():
            space.destroy()
        self.spaces.clear()

    def __getitem__(self, label: str) -> Namespace:
        return self.spaces[label]

    @property
    def gateways(self) -> list[str]:
        return [s.gateway for s in self.spaces.values()]

    @property
    def subnets(self) -> list[str]:
        return [s.subnet for s in self.spaces.values()]


class Relay:
    """A TCP forwarder in the root namespace: host:port (a gateway) to 127.0.0.1:upstream."""

    def __init__(self, host: str, upstream: int, port: int = 0) -> None:
        self._upstream = upstream
        self._server = socket.create_server((host, port))
        self.host, self.port = host, int(self._server.getsockname()[1])
        self.url = f"http://{host}:{self.port}"
        self._socks: set[socket.socket] = set()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._accept, name="relay", daemon=True)

    def start(self) -> Relay:
        self._thread.start()
        return self

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._server.accept()
            except OSError:
                return  # closed
            threading.Thread(target=self._connection, args=(client,), daemon=True).start()

    def _connection(self, client: socket.socket) -> None:
        try:
            upstream = socket.create_connection(("127.0.0.1", self._upstream), timeout=10)
        except OSError:
            client.close()
            return
        upstream.settimeout(None)
        with self._lock:
            self._socks.update((client, upstream))
        back = threading.Thread(target=self._pump, args=(upstream, client), daemon=True)
        back.start()
        self._pump(client, upstream)
        back.join()
        with self._lock:
            self._socks.difference_update((client, upstream))
        client.close()
        upstream.close()

    @staticmethod
    def _pump(src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
            dst.shutdown(socket.SHUT_WR)
        except OSError:  # a reset, or close(): end both directions
            for s in (src, dst):
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)

    def close(self) -> None:
        self._server.close()
        with self._lock:
            socks = list(self._socks)
        for s in socks:
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)

    def __enter__(self) -> Relay:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()
