"""/proc readers for `make bench` (Linux): machine state per repetition and engine CPU.

- `machine_state()` / `machine_delta()`: the 1-minute load average at a repetition's start and
  end and the CPU steal over it (the `steal` jiffies' share of all jiffies, /proc/stat).
- `EngineCpu`: user+system CPU seconds of one engine's own processes over a measured window:
  root processes (workers, a server) with their descendants, plus the Postgres backends that
  serve one database (found in pg_stat_activity). A sampler thread re-reads every known process
  while the window is open, so a backend that exits inside the window keeps the CPU it had at
  its last sample (at most one interval is lost; the count of such exits is reported).
- `rerun_candidates()`: the repetitions more than 25% from the median of the others.
"""

from __future__ import annotations

import os
import statistics
import threading
import time
from pathlib import Path

import psycopg

RERUN_LIMIT = 0.25  # a repetition further than this (relative) from the others' median is re-run
POLLER_APP = "ilr-bench-poller"  # the harness's own result poller: reported apart from the engine


def clock_tick() -> int:
    return os.sysconf("SC_CLK_TCK")


def _stat_fields(pid: int) -> list[str]:
    # The command name may contain spaces and parentheses: split after the last ')'.
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()


def proc_ticks(pid: int) -> int | None:
    """utime+stime of pid in clock ticks; None once the process is gone."""
    try:
        f = _stat_fields(pid)
    except (OSError, IndexError):
        return None
    return int(f[11]) + int(f[12])  # after the ')': state(0) ppid(1) ... utime(11) stime(12)


def proc_start_ticks(pid: int) -> int | None:
    """The process's start time in ticks since boot (tells a reused pid from the original)."""
    try:
        return int(_stat_fields(pid)[19])
    except (OSError, IndexError, ValueError):
        return None


def descendants(root: int) -> list[int]:
    """Every live process below root (one /proc scan)."""
    parent: dict[int, int] = {}
    for p in Path("/proc").iterdir():
        if p.name.isdigit():
            try:
                parent[int(p.name)] = int(_stat_fields(int(p.name))[1])
            except (OSError, IndexError, ValueError):
                continue
    out, frontier = [], {root}
    while frontier:
        kids = {pid for pid, pp in parent.items() if pp in frontier and pid not in out}
        out.extend(sorted(kids))
        frontier = kids
    return out


def loadavg1(text: str | None = None) -> float:
    """The 1-minute load average (text: /proc/loadavg's content, read when not given)."""
    return float((text or Path("/proc/loadavg").read_text()).split()[0])


def cpu_jiffies(text: str | None = None) -> dict[str, int]:
    """The aggregate `cpu` line of /proc/stat (text: its content, read when not given): total
    jiffies, the steal column, and idle (idle + iowait: no process of this machine ran)."""
    line = (text or Path("/proc/stat").read_text()).splitlines()[0].split()
    assert line[0] == "cpu", line
    vals = [int(x) for x in line[1:]]
    # user nice system idle iowait irq softirq steal [guest guest_nice]: guest time is already
    # inside user/nice, so the total is the first eight columns.
    return {"total": sum(vals[:8]), "steal": vals[7] if len(vals) > 7 else 0,
            "idle": vals[3] + (vals[4] if len(vals) > 4 else 0)}  # fmt: skip


def machine_state() -> dict:
    return {"t": time.time(), "load1": loadavg1(), "jiffies": cpu_jiffies()}


def machine_delta(start: dict, end: dict) -> dict:
    """What one repetition ran under: load average at its start and end, steal over it."""
    total = end["jiffies"]["total"] - start["jiffies"]["total"]
    steal = end["jiffies"]["steal"] - start["jiffies"]["steal"]
    idle = end["jiffies"]["idle"] - start["jiffies"]["idle"]
    cores = os.cpu_count() or 1
    # busy: the share of all jiffies in which some process of this machine ran (neither idle
    # nor stolen by the host), in cores
    busy = (total - idle - steal) / total * cores if total > 0 else 0.0
    return {"load1_start": start["load1"], "load1_end": end["load1"],
            "steal_share": steal / total if total > 0 else 0.0, "busy_cores": busy,
            "seconds": end["t"] - start["t"], "cores": cores}  # fmt: skip


def rerun_candidates(values: list[float | None], limit: float = RERUN_LIMIT) -> list[dict]:
    """Repetitions (by index) whose value is more than `limit` (relative) from the median of
    the OTHER repetitions' values; each is judged against the planned repetitions only."""
    out = []
    for i, v in enumerate(values):
        others = [x for j, x in enumerate(values) if j != i and x is not None]
        if v is None or not others:
            continue
        m = statistics.median(others)
        dev = abs(v - m) / m if m else 0.0
        if dev > limit:
            out.append({"index": i, "value": v, "median_of_others": m, "deviation": dev})
    return out


class EngineCpu:
    """CPU seconds of an engine's own processes between start() and stop().

    roots: pids of the engine's processes; their live descendants are found at start and stop
    and re-read by the sampler like backends (not through a root's cutime/cstime, which would
    count a child reaped inside the window whole, its CPU before the window included; a child
    born and gone between two scans is missed: the engines here keep theirs). dbname: the database whose
    backends serve the engine (pg_stat_activity, read over the admin connection, which lives in
    another database and so is not counted); a backend whose application_name is POLLER_APP is
    the harness's result poller and is reported apart."""

    def __init__(self, roots: list[int], admin: str | None = None, dbname: str | None = None,
                 interval: float = 0.5):  # fmt: skip
        self.roots, self.admin, self.dbname, self.interval = list(roots), admin, dbname, interval
        self.tick = clock_tick()
        # key (pid, start ticks) -> [group, ticks at start or 0, latest ticks, born inside]
        self.seen: dict[tuple[int, int], list] = {}
        self.lock = threading.Lock()
        self.stop_ev = threading.Event()
        self.thread: threading.Thread | None = None
        self.conn: psycopg.Connection | None = None
        self.t0 = self.t1 = 0.0
        self.sessions0 = 0

    def _backends(self) -> list[tuple[int, str]]:
        if not self.conn:
            return []
        rows = self.conn.execute(
            "select pid, coalesce(application_name, '') from pg_stat_activity"
            " where datname = %s and backend_type = 'client backend'",
            (self.dbname,),
        ).fetchall()
        return [(pid, "poller" if app == POLLER_APP else "backends") for pid, app in rows]

    def _sessions(self) -> int:
        """Sessions ever opened to the database (pg_stat_database). Its advance over the
        window, less the backends seen born in it, bounds the connections the sampler never
        saw (opened and closed between two samples) from above: an idle backend flushes its
        connect up to ~10 s late, so one opened just before the window can count too."""
        if not self.conn:
            return 0
        self.conn.execute("select pg_stat_clear_snapshot()")
        row = self.conn.execute(
            "select sessions from pg_stat_database where datname = %s", (self.dbname,)
        ).fetchone()
        return int(row[0]) if row else 0

    def _procs(self, scan: bool) -> list[tuple[int, str]]:
        out = [(r, "processes") for r in self.roots]
        if scan:  # a /proc scan costs ~10 ms: only at the window's edges
            out += [(d, "processes") for r in self.roots for d in descendants(r)]
        else:
            with self.lock:
                out += [(k[0], "processes") for k, v in self.seen.items()
                        if v[0] == "processes" and k[0] not in self.roots]  # fmt: skip
        return out + self._backends()

    def _sample(self, scan: bool, first: bool) -> None:
        for pid, group in self._procs(scan):
            start = proc_start_ticks(pid)
            ticks = proc_ticks(pid)
            if start is None or ticks is None:
                continue
            with self.lock:
                entry = self.seen.get((pid, start))
                if entry is None:
                    # Seen at the window's start: its CPU so far is before the window. Born
                    # inside the window: all of its CPU is inside.
                    self.seen[(pid, start)] = [group, ticks if first else 0, ticks, not first]
                else:
                    entry[2] = ticks

    def _loop(self) -> None:
        while not self.stop_ev.wait(self.interval):
            try:
                self._sample(scan=False, first=False)
            except Exception:  # noqa: BLE001 - a failed sample loses at most one interval
                pass

    def start(self) -> EngineCpu:
        if self.dbname and self.admin:
            self.conn = psycopg.connect(self.admin, autocommit=True)
        self.sessions0 = self._sessions()
        self._sample(scan=True, first=True)
        self.t0 = time.perf_counter()
        self.thread = threading.Thread(target=self._loop, daemon=True)
        self.thread.start()
        return self

    def stop(self) -> dict:
        self.t1 = time.perf_counter()
        self.stop_ev.set()
        if self.thread:
            self.thread.join(timeout=5)
        alive_before = {k for k in self.seen}
        self._sample(scan=True, first=False)
        groups: dict[str, float] = {"processes": 0.0, "backends": 0.0, "poller": 0.0}
        exited, born = 0, 0
        for (pid, start), (group, base, last, new) in self.seen.items():
            born += group != "processes" and new
            groups[group] += (last - base) / self.tick
            if (pid, start) in alive_before and proc_start_ticks(pid) != start:
                exited += 1
        time.sleep(0.05 if self.conn else 0)  # the last exits flush their session counts
        opened = self._sessions() - self.sessions0
        if self.conn:
            self.conn.close()
        return {"seconds": self.t1 - self.t0,
                "engine_cpu_s": groups["processes"] + groups["backends"],
                "processes_cpu_s": groups["processes"], "backends_cpu_s": groups["backends"],
                "poller_cpu_s": groups["poller"],
                "processes": sum(1 for v in self.seen.values() if v[0] == "processes"),
                "backends": sum(1 for v in self.seen.values() if v[0] == "backends"),
                "exited_in_window": exited, "sessions_opened": opened,
                "unseen_backends": max(0, opened - born)}  # fmt: skip


def per_1000(cpu: dict | None, workflows: int) -> dict | None:
    """CPU seconds per 1,000 workflows: the engine alone and with the harness's poller."""
    if not cpu or not workflows:
        return None
    k = 1000.0 / workflows
    return {"engine": cpu["engine_cpu_s"] * k,
            "with_poller": (cpu["engine_cpu_s"] + cpu["poller_cpu_s"]) * k,
            "processes": cpu["processes_cpu_s"] * k, "backends": cpu["backends_cpu_s"] * k,
            "poller": cpu["poller_cpu_s"] * k}  # fmt: skip
