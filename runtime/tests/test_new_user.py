"""A new user, end to end, outside the repository: the wheel built from this checkout, installed
with pip into a fresh virtualenv, an invoice e-mail workflow written against the public API only,
a worker and every operator step run from that virtualenv's `interlock` command.

The ground truth is the mail API this test serves (a tier-1 HTTP server that dedupes the
Idempotency-Key): what it delivered, not what the runtime reports. Three invoices: one approved
with its exact payload (`--payload`), one approved as proposed (no `--payload`), one approved
with another payload (refused at the effect, nothing sent).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import threading
import time
import zipfile
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
DEV_PACKAGES = ("prove", "baselines", "world", "conformance", "models")

INVOICE_MAIL = '''\
"""Invoice e-mails: composed from the invoice, approved by a person, sent once."""

import os

from interlock_runtime import HttpTarget, workflow

# The mail API dedupes the Idempotency-Key (the effect id), so a resend is harmless: tier 1.
MAIL = HttpTarget("mail-api", os.environ["MAIL_API_URL"] + "/send", tier=1, action="send_email")


def compose(invoice):
    total = sum(line["qty"] * line["unit_cents"] for line in invoice["lines"])
    return {
        "to": invoice["customer_email"],
        "subject": f"Invoice {invoice['number']}",
        "total_cents": total,
    }


@workflow(name="invoice_mail", version="1")
def invoice_mail(ctx, invoice):
    message = ctx.step("compose", compose, invoice)
    approval = ctx.wait_approval(message, timeout=3600)
    if approval is None:
        return {"status": "not approved"}
    sent = ctx.effect(MAIL, key=f"invoice-mail:{invoice['number']}", payload=message,
                      premises=approval["facts_seen"], grant=approval["grant_id"])
    return {"status": sent.status, "effect_id": sent.effect_id, "reason": sent.reason,
            "result": sent.result}
'''


def invoice(number: str, email: str, lines: list[tuple[int, int]]) -> dict:
    return {
        "number": number,
        "customer_email": email,
        "lines": [{"qty": q, "unit_cents": c} for q, c in lines],
    }


def expected_mail(inv: dict) -> dict:
    """What compose() must propose, computed here independently."""
    total = sum(line["qty"] * line["unit_cents"] for line in inv["lines"])
    return {
        "to": inv["customer_email"],
        "subject": f"Invoice {inv['number']}",
        "total_cents": total,
    }


# -- the mail API (the ground truth) --------------------------------------------------------------


class MailApi:
    """POST /send: delivers a message once per Idempotency-Key; a repeated key gets the stored
    response back and delivers nothing (tier 1). Counts every request and every delivery."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.responses: dict[str, dict] = {}
        self.deliveries: list[dict] = []
        self.requests = 0
        api = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 (http.server's name)
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                if self.path != "/send":
                    return self._answer(404, {"error": "not_found"})
                key = self.headers.get("Idempotency-Key")
                if not key:
                    return self._answer(400, {"error": "missing_idempotency_key"})
                with api.lock:
                    api.requests += 1
                    if key not in api.responses:
                        api.deliveries.append({
                            "key": key,
                            "message": json.loads(body),
                            "worker": self.headers.get("X-Interlock-Worker"),
                        })  # fmt: skip
                        api.responses[key] = {"id": f"msg_{len(api.deliveries)}", "queued": True}
                    response = api.responses[key]
                self._answer(200, response)

            def _answer(self, status: int, value: Any) -> None:
                data = json.dumps(value).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def mail_api() -> Iterator[MailApi]:
    api = MailApi()
    yield api
    api.close()


# -- helpers ------------------------------------------------------------------------------------


def run(cmd: list[str], *, timeout: float, check: bool = True, **kwargs: Any):
    """subprocess.run with text output and a timeout; a failure shows the command's output."""
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, **kwargs)
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"timed out after {timeout} s: {' '.join(cmd)}\n{exc.stdout}\n{exc.stderr}")
    if check and proc.returncode != 0:
        pytest.fail(f"exit {proc.returncode}: {' '.join(cmd)}\n"
                    f"stdout:\n{proc.stdout[-3000:]}\nstderr:\n{proc.stderr[-3000:]}")  # fmt: skip
    return proc


def build_wheel(out: Path) -> tuple[Path, Path]:
    """The product's wheel from the checkout's files (tracked and untracked, not ignored). They
    are copied first: setuptools builds in the source tree, and a stale build/ in the checkout
    would put files into the wheel that the checkout no longer has. The build is isolated:
    pyproject.toml asks for setuptools>=77, which pip takes from the package index."""
    listed = run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                 cwd=REPO, timeout=60).stdout  # fmt: skip
    src = out / "src"
    for rel in filter(None, listed.split("\0")):
        if (REPO / rel).is_file():  # a tracked file deleted in the working tree is left out
            (src / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / rel, src / rel)
    proc = run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-w", str(out / "dist"),
                str(src)], timeout=300, check=False)  # fmt: skip
    if proc.returncode != 0:
        pytest.fail("building the wheel failed (pip wheel needs setuptools>=77 from the package "
                    f"index: is the registry reachable?)\n{proc.stdout[-3000:]}\n"
                    f"{proc.stderr[-3000:]}")  # fmt: skip
    (wheel,) = (out / "dist").glob("interlock_runtime-*.whl")
    return wheel, src


def check_wheel_contents(wheel: Path, src: Path) -> None:
    names = zipfile.ZipFile(wheel).namelist()
    tops = {n.split("/", 1)[0] for n in names}
    dist_info = [t for t in tops if t.endswith(".dist-info")]
    assert len(dist_info) == 1 and tops == {"interlock_runtime", *dist_info}, (
        f"the wheel must hold interlock_runtime alone, it holds {sorted(tops)}"
    )
    assert not any(n.split("/")[1:2] and n.split("/")[1] in DEV_PACKAGES for n in names)
    # Every file of the package in the copied checkout ships: modules, py.typed, SQL (the
    # migrations included), the console's templates and CSS.
    package = src / "runtime" / "interlock_runtime"
    want = {
        str(Path("interlock_runtime", f.relative_to(package)))
        for f in package.rglob("*")
        if f.is_file() and "__pycache__" not in f.parts
    }
    for required in ("interlock_runtime/py.typed", "interlock_runtime/sql/queries.sql",
                     "interlock_runtime/sql/migrations/0001_initial.sql"):  # fmt: skip
        assert required in want, f"{required} is not in the checkout"
    missing = sorted(want - set(names))
    assert not missing, (
        f"the wheel lacks files of the package (pyproject.toml package-data?): {missing}"
    )


def new_user_env(venv: Path, home: Path, dsn: str, mail_url: str) -> dict[str, str]:
    """The environment of a user's shell: the new virtualenv's bin/ on PATH, nothing of the
    repository's (no PYTHONPATH, no VIRTUAL_ENV, no ILR_* settings but the DSN)."""
    repo_bins = {str(REPO / ".venv" / "bin"), str(Path(sys.executable).parent)}
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP", "VIRTUAL_ENV", "PYTHONSAFEPATH")
        and not k.startswith("ILR_")
    }
    path = [p for p in env.get("PATH", "").split(os.pathsep) if p and p not in repo_bins]
    env["PATH"] = os.pathsep.join([str(venv / "bin"), *path])
    env["VIRTUAL_ENV"] = str(venv)
    env["ILR_DSN"] = dsn
    env["MAIL_API_URL"] = mail_url
    env["PYTHONPATH"] = str(home)  # where invoice_mail.py is, as `interlock worker` asks
    return env


# -- the test -----------------------------------------------------------------------------------


def test_new_user_installs_the_wheel_and_sends_an_approved_invoice_mail(
    dsn: str, tmp_path: Path, mail_api: MailApi
) -> None:
    assert REPO not in tmp_path.resolve().parents, "tmp_path must be outside the repository"
    wheel, src = build_wheel(tmp_path / "build")
    check_wheel_contents(wheel, src)

    # A fresh virtualenv; pip installs the wheel and pulls psycopg[binary] from the index.
    home = tmp_path / "home"
    home.mkdir()
    venv = tmp_path / "venv"
    run([sys.executable, "-m", "venv", str(venv)], timeout=120)
    py, interlock = str(venv / "bin" / "python"), str(venv / "bin" / "interlock")
    env = new_user_env(venv, home, dsn, mail_api.url)
    proc = run([py, "-m", "pip", "install", str(wheel)], timeout=300, check=False, cwd=home,
               env=env)  # fmt: skip
    if proc.returncode != 0:
        pytest.fail("pip could not install the wheel into a fresh virtualenv (it needs "
                    "psycopg[binary] from the package registry: is it reachable?)\n"
                    f"{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")  # fmt: skip

    # Only the product is importable there, from the virtualenv, not from the checkout.
    probe = textwrap.dedent("""\
        import importlib, json, sys
        import interlock_runtime, interlock_runtime.effects.targets
        dev = {}
        for name in sys.argv[1:]:
            try:
                importlib.import_module(name)
                dev[name] = "imported"
            except ModuleNotFoundError as exc:
                dev[name] = str(exc)
        print(json.dumps({"product": interlock_runtime.__file__, "dev": dev, "path": sys.path}))
    """)
    seen = json.loads(run([py, "-c", probe, *DEV_PACKAGES], timeout=60, cwd=home, env=env).stdout)
    assert Path(seen["product"]).is_relative_to(venv), seen["product"]
    assert seen["dev"] == {m: f"No module named {m!r}" for m in DEV_PACKAGES}, seen["dev"]
    assert not any(str(REPO) in p for p in seen["path"]), seen["path"]

    (home / "invoice_mail.py").write_text(INVOICE_MAIL)

    def cli(*args: str, timeout: float = 60, check: bool = True):
        return run([interlock, *args], timeout=timeout, check=check, cwd=home, env=env)

    worker_log = tmp_path / "worker.log"
    with open(worker_log, "w") as log:
        worker = subprocess.Popen(
            [interlock, "worker", "--module", "invoice_mail", "--id", "new-user-w1",
             "--poll", "0.2", "--lease-ttl", "10"],
            cwd=home, env=env, stdout=log, stderr=subprocess.STDOUT,
        )  # fmt: skip
    try:
        invoices = {
            "INV-1001": invoice("INV-1001", "ana@example.com", [(2, 1250), (1, 4999)]),
            "INV-1002": invoice("INV-1002", "bo@example.com", [(3, 700)]),
            "INV-1003": invoice("INV-1003", "cy@example.com", [(1, 10000)]),
        }
        # `interlock start` finds a workflow by name once a worker has registered it.
        deadline = time.monotonic() + 30
        while '"event": "registered"' not in worker_log.read_text():
            assert worker.poll() is None, f"the worker exited ({worker.returncode})"
            assert time.monotonic() < deadline, "the worker never registered its workflows"
            time.sleep(0.1)
        for number, inv in invoices.items():
            out = cli("start", "invoice_mail", f"wf-{number}", "--input", json.dumps(inv)).stdout
            assert f"as wf-{number}" in out, out

        def waiting(wf_id: str) -> dict:
            deadline = time.monotonic() + 45
            while time.monotonic() < deadline:
                assert worker.poll() is None, f"the worker exited ({worker.returncode})"
                wf = json.loads(cli("describe", wf_id, "--json").stdout)
                w = wf.get("waiting") or {}
                if w.get("signal") == "approve" and "proposal" in w:
                    return w
                time.sleep(0.3)
            pytest.fail(f"{wf_id} never waited for approval; last seen: {wf}")

        for number, inv in invoices.items():
            assert waiting(f"wf-{number}")["proposal"] == expected_mail(inv)
        # alice approves the first with its exact payload, the second as proposed, and the
        # third with a total that is not what the workflow will send.
        first = expected_mail(invoices["INV-1001"])
        cli("approve", "wf-INV-1001", "--by", "alice", "--payload", json.dumps(first))
        cli("approve", "wf-INV-1002", "--by", "alice")
        other = dict(expected_mail(invoices["INV-1003"]), total_cents=1)
        cli("approve", "wf-INV-1003", "--by", "alice", "--payload", json.dumps(other))

        results = {
            number: json.loads(cli("result", f"wf-{number}", "--timeout", "45", timeout=90).stdout)
            for number in invoices
        }

        # The mail API delivered exactly the two approved messages, once each, under their effects'
        # ids; the third was refused before anything was sent.
        sent = {number: results[number] for number in ("INV-1001", "INV-1002")}
        assert [r["status"] for r in sent.values()] == ["COMMITTED", "COMMITTED"], sent
        refused = results["INV-1003"]
        assert refused["status"] == "REFUSED:authority", refused
        assert (refused["reason"] or "").startswith("payload_not_approved"), refused
        keys = sorted(d["key"] for d in mail_api.deliveries)
        assert keys == sorted(r["effect_id"] for r in sent.values()), mail_api.deliveries
        assert mail_api.requests == 2, f"resent: {mail_api.requests} requests"
        by_key = {d["key"]: d for d in mail_api.deliveries}
        for number, r in sent.items():
            assert by_key[r["effect_id"]]["message"] == expected_mail(invoices[number])
            assert by_key[r["effect_id"]]["worker"] == "new-user-w1"
            assert r["result"] == mail_api.responses[r["effect_id"]], r

        # Each receipt verifies from its file alone (no key: the chain is checked, and verify
        # says, exit 3, that integrity is not established): the sent mails happened once,
        # authorized; the refused one did not happen.
        def verify(wf_id: str, effect_id: str) -> dict:
            bundle = home / f"receipt-{wf_id}.json"
            bundle.write_text(cli("receipt", effect_id).stdout)
            checked = cli("verify", bundle.name, "--json", check=False)
            assert checked.returncode == 3, checked.stdout + checked.stderr
            verdict = json.loads(checked.stdout)
            assert verdict["integrity"] == "unsigned: integrity not established", verdict
            return verdict

        for number, r in sent.items():
            verdict = verify(number, r["effect_id"])
            for claim in ("valid", "happened", "happened_once", "authorized_when_fired"):
                assert verdict[claim] is True, (number, claim, verdict)
            assert verdict["sends"] == 1, verdict
        verdict = verify("INV-1003", refused["effect_id"])
        assert verdict["valid"] is True and verdict["refused"] is True, verdict
        assert verdict["happened"] is False and verdict["sends"] == 0, verdict
    except BaseException:
        print(f"worker log:\n{worker_log.read_text()[-6000:]}")
        raise
    finally:
        if worker.poll() is None:
            worker.send_signal(signal.SIGTERM)
        try:
            worker.wait(timeout=20)
        except subprocess.TimeoutExpired:
            worker.kill()
            worker.wait(timeout=10)
    # SIGTERM stops the worker cleanly.
    assert worker.returncode == 0, f"worker exit {worker.returncode}:\n{worker_log.read_text()}"
