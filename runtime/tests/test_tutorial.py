"""docs/tutorial.md, run as written: its files and its `bash` blocks, extracted from the page,
in a fresh directory outside the repository, with the wheel built from this checkout installed
into a new virtualenv (test_new_user.py's build) and the `pg` extra's own cluster on a free
port. Ground truth is the tutorial's blog: the files it writes for each request and each
publication, not what the runtime reports.

A block runs when the line before its fence is `<!-- tutorial: run -->`; a file is written when
it is `<!-- tutorial: file NAME -->`. The other blocks (building the wheel in the checkout,
pointing WHEEL at it) are what this test does itself.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from test_new_user import REPO, build_wheel, check_wheel_contents, run

from world.temporal_server import free_port

pytestmark = pytest.mark.slow

PAGE = REPO / "docs" / "tutorial.md"
BLOCK = re.compile(r"^<!-- tutorial: (run|file (\S+)) -->\n```(\w+)\n(.*?)^```$", re.M | re.S)


def extract(text: str) -> tuple[dict[str, str], list[str]]:
    """The page's files (name -> text) and its runnable shell blocks, in page order."""
    files: dict[str, str] = {}
    blocks: list[str] = []
    for what, name, lang, body in BLOCK.findall(text):
        if what == "run":
            assert lang == "bash", f"a run block must be bash, got {lang}"
            blocks.append(body)
        else:
            files[name] = body
    return files, blocks


def test_extract_finds_the_pages_files_and_blocks() -> None:
    files, blocks = extract(PAGE.read_text())
    assert sorted(files) == ["announce.py", "blog.py"]
    assert len(blocks) >= 6 and any("kill -9 $W1" in b for b in blocks)
    # a marker that is not right before its fence is a mistake in the page, not a skipped block
    markers = PAGE.read_text().count("<!-- tutorial:")
    assert markers == len(files) + len(blocks)


def test_the_tutorial_runs_as_written_from_the_wheel(tmp_path: Path) -> None:
    assert REPO not in tmp_path.resolve().parents
    wheel, src = build_wheel(tmp_path / "build")
    check_wheel_contents(wheel, src)
    files, blocks = extract(PAGE.read_text())
    home = tmp_path / "announcer"
    home.mkdir()
    for name, text in files.items():
        (home / name).write_text(text)
    # The page's blog listens on 8089: run it elsewhere when that port is busy here.
    blog_port = str(free_port())
    script = "set -euo pipefail\n" + "\n".join(blocks).replace("8089", blog_port)
    (home / "tutorial.sh").write_text(script)

    repo_bins = {str(REPO / ".venv" / "bin"), str(Path(sys.executable).parent)}
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("ILR_", "PYTHON", "VIRTUAL_ENV"))}  # fmt: skip
    env["PATH"] = os.pathsep.join(p for p in env["PATH"].split(os.pathsep) if p not in repo_bins)
    env.update(WHEEL=str(wheel), ILR_PG_PORT=str(free_port()), HOME=str(tmp_path))
    proc = subprocess.Popen(["bash", "tutorial.sh"], cwd=home, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            start_new_session=True)  # fmt: skip
    try:
        out, _ = proc.communicate(timeout=300)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        pytest.fail(f"the tutorial did not finish in 300 s:\n{out[-4000:]}")
    finally:
        _cleanup(proc, home, env)
    logs = "".join(f"\n--- {p.name}\n{p.read_text()[-2000:]}" for p in home.glob("w*.log"))
    assert proc.returncode == 0, f"the tutorial failed (exit {proc.returncode}):\n{out}{logs}"

    # The blog's ground truth: two requests, one from each worker, one publication.
    requests = [json.loads(line) for line in (home / "requests.jsonl").read_text().splitlines()]
    published = [json.loads(line) for line in (home / "published.jsonl").read_text().splitlines()]
    assert [r["worker"] for r in requests] == ["w1", "w2"], requests
    assert len({r["key"] for r in requests}) == 1
    assert len(published) == 1, published
    assert published[0]["post"] == {
        "title": "Acme CLI 2.0 is out",
        "body": "Acme CLI 2.0: plugins load twice as fast.",
    }
    result = json.loads((home / "result.json").read_text())
    assert result["status"] == "COMMITTED_BY_RETRY" and result["effect_id"] == requests[0]["key"]
    # The receipt verified with the public key alone (the database was stopped first), and
    # the forged one was refused.
    assert "verified: signed by ed25519 key" in out, out
    assert re.search(r"forged\.json: INVALID", out) and "refused: exit 1" in out, out


def _cleanup(proc: subprocess.Popen, home: Path, env: dict[str, str]) -> None:
    """Whatever the page left running when it failed: its processes, and its cluster."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    interlock = home / ".venv" / "bin" / "interlock"
    if interlock.exists():
        run([str(interlock), "pg", "stop"], timeout=60, check=False, cwd=home, env=env)
