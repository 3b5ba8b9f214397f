"""The researcher's loop, walked end to end on a scratch copy of the repository, with the
commands the docs give (docs/verification.md#tlc-traces, docs/invariants.md,
scenarios/README.md) and nothing else:

1. break a spec (the schedules' lock and key) and see TLC print the counterexample;
2. add an invariant by docs/invariants.md: the generator names every missing piece, then
   passes and names the quick TLC run that checks the new row; run that command;
3. add a scenario that names a claim and the new invariant, validate it and run it for real
   against the runtime: the claim counts its cell, and the Prove cross-reference shows the
   model's outcome for the new invariant (from the working TLC run), not "not yet checked";
4. results/ stays byte for byte the same, in the repository and in the copy.

Each phase's wall time is printed (the loop's time, following the docs).  Real TLC, real
Postgres, real worker processes; about a minute."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from world.verify_common import tree_hash

ROOT = Path(__file__).resolve().parents[2]

NEW_ROW = """\
  - name: AppliedOnlyWhatArrived
    meaning: the target applies an effect no more often than requests for it arrived
    layers: [M, C]
    spec: Runtime
    operator: AppliedOnlyWhatArrived
    check: AppliedOnlyWhatArrived
    predict: hold
"""
OPERATOR = "AppliedOnlyWhatArrived == \\A e \\in Effs : ledger[e] <= effSends[e]\n"
CHECK = """
def applied_only_what_arrived(ev: Evidence) -> list[str]:
    posts = ev.posts()
    return [f"{key}: applied {n} times, {len(posts[key])} request(s) arrived"
            for key, n in ev.applied().items() if n > len(posts[key])]

"""


def _copy_repo(dest: Path) -> None:
    """The tracked files as they are in the working tree, and the project's virtualenv
    (run_tlc.sh finds Java and TLC there, as in a checkout after `make setup`)."""
    files = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True,
                           check=True).stdout.decode().split("\0")  # fmt: skip
    for name in filter(None, files):
        src = ROOT / name
        if src.is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / name)  # run_tlc.sh keeps its execute bit
    (dest / ".venv").symlink_to(Path(sys.prefix))


def _edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text, f"{path.name} no longer holds {old!r}: update this walk-through"
    path.write_text(text.replace(old, new, 1))


class Loop:
    def __init__(self, copy: Path, dsn: str) -> None:
        self.copy = copy
        self.env = {**os.environ, "ILR_DSN": dsn,
                    "PYTHONPATH": os.pathsep.join([str(copy / "runtime"), str(copy)])}  # fmt: skip
        self.times: dict[str, float] = {}

    def run(self, command: str, timeout: float = 600) -> subprocess.CompletedProcess:
        """A command as the docs spell it (`python -m ...`), in the copy."""
        argv = command.split()
        assert argv[0] == "python", command
        return subprocess.run([sys.executable, *argv[1:]], cwd=self.copy, env=self.env,
                              capture_output=True, text=True, timeout=timeout)  # fmt: skip


@pytest.mark.pg
def test_the_researchers_loop_on_a_scratch_copy(tmp_path):
    from interlock_runtime.testing import admin_dsn

    published = tree_hash(ROOT / "results")
    copy = tmp_path / "repo"
    _copy_repo(copy)
    loop = Loop(copy, admin_dsn())
    copied = tree_hash(copy / "results")
    tla = copy / "models"

    # 1. Break a spec: schedule passes without the lock and without the key.
    t0 = time.monotonic()
    original = (tla / "Schedules.tla").read_text()
    _edit(tla / "Schedules.tla", 'Locking == BROKEN \\notin {"no_lock_no_key", "pass_without_lock"}',
          "Locking == FALSE")  # fmt: skip
    _edit(tla / "Schedules.tla", "fresh == ~Keyed \\/ k \\notin fires IN", "fresh == TRUE IN")
    p = loop.run("python -m models.tlc --only Schedules --jobs 1 --heap 512m")
    assert p.returncode == 1, p.stdout + p.stderr
    out = p.stdout
    assert "Schedules/TickStartsAtMostOnce: predicted hold, got V - UNEXPLAINED" in out, out
    block = out[out.index("Counterexample: Schedules / TickStartsAtMostOnce (predicted hold)") :]
    assert "saved to .data/tlc/traces/Schedules__TickStartsAtMostOnce.json" in block
    assert "State 1: Init" in block and re.search(r"runs\[1\]: 1 -> 2", block), block[:2000]
    assert (copy / ".data/tlc/traces/Schedules__TickStartsAtMostOnce.json").exists()
    (tla / "Schedules.tla").write_text(original)
    loop.times["break a spec, read its trace"] = time.monotonic() - t0

    # 2. Add an invariant by docs/invariants.md: the row first, and the generator's one message.
    t0 = time.monotonic()
    _edit(tla / "catalog.yaml", "\ninvariants:\n", "\ninvariants:\n" + NEW_ROW)
    p = loop.run("python -m models.gen_cfg")
    assert p.returncode == 1 and "Traceback" not in p.stderr, p.stdout + p.stderr
    assert "missing pieces: 3" in p.stderr and "invariant 'AppliedOnlyWhatArrived'" in p.stderr
    for piece in ("TLA+ operator:", "code check:", "witness:"):
        assert f"    - {piece}" in p.stderr, p.stderr
    _edit(tla / "catalog.yaml", NEW_ROW, NEW_ROW + "    witnesses: [Reach_Send]\n")
    text = (tla / "Runtime.tla").read_text()
    end = text.rindex("\n====")
    (tla / "Runtime.tla").write_text(text[:end] + "\n\n" + OPERATOR + text[end:])
    _edit(copy / "conformance" / "invariants.py", "\nINVARIANTS: dict[str, Check] = {\n",
          CHECK + "\nINVARIANTS: dict[str, Check] = {\n"
          '    "AppliedOnlyWhatArrived": applied_only_what_arrived,\n')  # fmt: skip
    p = loop.run("python -m models.gen_cfg")
    assert p.returncode == 0, p.stdout + p.stderr
    named = re.search(r"not yet checked by TLC .*: AppliedOnlyWhatArrived; run `([^`]+)`", p.stdout)
    assert named, p.stdout
    p = loop.run(named.group(1) + " --jobs 1 --heap 1g")
    assert "Quick_t2_G1" in named.group(1), named.group(1)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr
    assert "tlc: outcomes kept in .data/tlc/working.json" in p.stdout
    loop.times["add an invariant, check it in the model"] = time.monotonic() - t0

    # 3. A scenario that names claim C3 and the new invariant, checked and run for real.
    t0 = time.monotonic()
    text = (copy / "scenarios" / "S03.yaml").read_text()
    assert "claims: [C3]" in text
    text = text.replace("id: S03", "id: S15", 1).replace("invariants: [", "invariants: "
                                                         "[AppliedOnlyWhatArrived, ", 1)  # fmt: skip
    (copy / "scenarios" / "S15.yaml").write_text(text)
    p = subprocess.run([sys.executable, "-c", "from prove.scenario import load; "
                        "load('scenarios/S15.yaml')"], cwd=copy, env=loop.env,
                       capture_output=True, text=True, timeout=120)  # fmt: skip
    assert p.returncode == 0, p.stderr
    p = loop.run("python -m prove --scenarios S15 --seeds 1 --tiers 1 --systems runtime "
                 "--no-stripe")  # fmt: skip
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    assert "wrote .data/prove/scratch/results/runtime_prove.md" in p.stdout, p.stdout
    report = (copy / ".data/prove/scratch/results/runtime_prove.md").read_text()
    assert "Generated by a working run, not the published sweep," in report
    assert "| S15 t1 | 1/1 |" in report  # C3's table counts the new cell
    row = next(line for line in report.splitlines()
               if line.startswith("| S15 | AppliedOnlyWhatArrived |"))  # fmt: skip
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[2] == "hold (working TLC run)" and cells[5] == "yes", row
    loop.times["add a scenario, run it"] = time.monotonic() - t0

    # 4. Nothing published moved.
    assert tree_hash(copy / "results") == copied, "the loop changed results/ in the copy"
    assert tree_hash(ROOT / "results") == published, "the loop changed the repository's results/"
    total = sum(loop.times.values())
    print("the researcher's loop: " + "; ".join(f"{k} {v:.1f} s" for k, v in loop.times.items())
          + f"; total {total:.1f} s")  # fmt: skip
