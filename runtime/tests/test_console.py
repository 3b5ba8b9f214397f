"""The operator console (issue 12) in a real browser: Debian's chromium driven by Playwright,
against a real console process, real workers and the local payment target, on a fresh database.

`make console-shots` runs these tests with ILR_CONSOLE_SHOTS=results/console to keep a
screenshot of each page; otherwise screenshots go to the test's tmp_path.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import flows
import pytest

from conftest import REPO, wait_for
from interlock_runtime import Runtime, db, journal
from interlock_runtime.console import auth
from world import gitstate
from world.target import Target
from world.target_client import TargetAdmin

PAYMENT = "pay_881"
KEY = "console-test-receipt-key"
CHECKS = ["happened", "happened_once", "authorized_when_fired", "assumptions_held",
          "tamper_evident", "signed"]  # fmt: skip
HOSTILE = "<b id='pwn'>bold</b><script>document.title='pwned'</script>"


def chromium_path() -> str:
    path = os.environ.get("ILR_CHROMIUM") or shutil.which("chromium")
    if not path or not os.access(path, os.X_OK):
        pytest.fail("chromium is not installed, so the console's browser tests cannot run: "
                    "run `make browser` (as root: apt-get install -y chromium), or point "
                    "ILR_CHROMIUM at a Chromium binary")  # fmt: skip
    return path


@pytest.fixture(scope="module")
def browser() -> Iterator:
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.fail("playwright is not installed: `make setup` (pip install -e '.[console]')")
    with sync_playwright() as p:
        # --no-sandbox: the tests run as root, where Chromium's sandbox refuses to start.
        b = p.chromium.launch(executable_path=chromium_path(), args=["--no-sandbox"])
        yield b
        b.close()


class Console:
    """`interlock console --port 0` in its own process; reads the URL it prints. `owner_dsn`
    (default: `dsn`) may create operators, which the console's own role may not."""

    def __init__(self, dsn: str, log_dir: Path, env: dict[str, str] | None = None,
                 args: tuple[str, ...] = (), owner_dsn: str | None = None) -> None:  # fmt: skip
        self.owner_dsn = owner_dsn or dsn
        self._err = open(log_dir / "console.stderr", "w")
        cmd = [sys.executable, "-m", "interlock_runtime.cli", "console", "--dsn", dsn,
               "--port", "0", *args]  # fmt: skip
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=self._err, text=True,
                                     env={**os.environ, **(env or {})})  # fmt: skip
        first = self.proc.stdout.readline()
        if not first.startswith("interlock console: http"):
            self.close()
            raise AssertionError(f"the console did not start: {first!r}\n"
                                 + (log_dir / "console.stderr").read_text())  # fmt: skip
        self.url = first.split()[-1].removesuffix("/login")
        wait_for(self._answers, 30, "the console to answer")

    def _answers(self) -> bool:
        try:
            with urllib.request.urlopen(self.url + "/login", timeout=5) as r:
                return r.status == 200
        except OSError:
            if self.proc.poll() is not None:
                raise AssertionError(f"the console exited with {self.proc.returncode}") from None
            return False

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc.stdout.close()
        self._err.close()


@pytest.fixture
def console(dsn: str, tmp_path: Path) -> Iterator[Console]:
    c = Console(dsn, tmp_path, env={"ILR_RECEIPT_KEY": KEY})
    yield c
    c.close()


@pytest.fixture
def target(target_factory) -> tuple[Target, TargetAdmin]:
    return target_factory(2)


@pytest.fixture
def shots(tmp_path: Path):
    publish = os.environ.get("ILR_CONSOLE_SHOTS")
    where = Path(publish or tmp_path / "shots")
    if not where.is_absolute():
        where = REPO / where
    where.mkdir(parents=True, exist_ok=True)
    if publish:
        # which code drew the published screenshots (results/INDEX.md reads it)
        manifest = {"commit": gitstate.commit(), "dirty": gitstate.dirty(),
                    "command": "make console-shots"}  # fmt: skip
        (where / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")

    def shot(page, name: str) -> None:
        page.screenshot(path=str(where / f"{name}.png"), full_page=True)

    return shot


def case(t: Target, case_id: str, **extra: object) -> dict:
    return {"id": case_id, "target_url": t.url, "payment": PAYMENT, "tier": t.tier, **extra}


def wait_for_approval_wait(rt: Runtime, wf: str) -> dict:
    wait_for(lambda: (rt.describe(wf)["waiting"] or {}).get("signal") == "approve", 30,
             f"{wf} to wait for approval")  # fmt: skip
    return rt.describe(wf)


PASSWORD = "correct horse battery staple"


def add_operator(dsn: str, name: str, password: str = PASSWORD) -> None:
    """An operator account, as `interlock operator add` makes it (the CLI itself is tested in
    test_operators.py)."""
    with db.connect(dsn) as c:
        if c.execute("select 1 from ilr.operators where name = %s", (name,)).fetchone() is None:
            auth.add_operator(c, name, password)


def login(page, console: Console, who: str, password: str = PASSWORD) -> None:
    add_operator(console.owner_dsn, who)
    page.goto(console.url + "/login")
    page.fill("#name", who)
    page.fill("#password", password)
    page.click("#login")
    page.wait_for_url("**/approvals")
    assert page.inner_text("#who") == who


def test_approve_in_the_browser_then_the_receipt_checks_all_pass(
    dsn, conn, workers, target, console, browser, shots
) -> None:
    t, admin = target
    wf = "refund-case-4471"
    with Runtime(dsn) as rt:
        workers("W1")
        rt.start(flows.refund, wf, case(t, "case-4471", note="customer asked twice"))
        decided = wait_for_approval_wait(rt, wf)["steps"][0]["output"]
        page = browser.new_page(viewport={"width": 1280, "height": 800})
        page.goto(console.url + "/login")
        shots(page, "login")
        login(page, console, "alice")

        card = page.locator(f"section.approval[data-workflow='{wf}']")
        assert card.count() == 1
        # What the model decided and the facts it decided on, as recorded.
        assert json.loads(card.locator(".output").inner_text())["amount"] == 2000
        assert json.loads(card.locator(".premises").inner_text()) == decided["premises"]
        assert decided["premises"] == {"payment": PAYMENT, "eligible": True,
                                       "refunded_by_others": 0}  # fmt: skip
        assert card.locator(".captured-at").inner_text() == decided["captured_at"]
        shown = json.loads(card.locator(".payload").inner_text())
        assert shown == {"payment": PAYMENT, "amount": 2000}
        shots(page, "approvals")

        card.locator("button.approve").click()
        page.wait_for_url(f"**/workflows/{wf}")
        assert "Approved" in page.inner_text("#flash")
        out = rt.result(wf, timeout=60)
        assert out["status"] == "COMMITTED"
        eff = rt.effects(wf)[0]

    # The grant binds exactly the shown payload and premises, and says who approved.
    g = conn.execute("select granted_by, payload_hash, facts_seen from ilr.grants where id = %s",
                     (eff["grant_id"],)).fetchone()  # fmt: skip
    assert g == {"granted_by": "alice", "payload_hash": journal.payload_hash(shown),
                 "facts_seen": decided["premises"]}  # fmt: skip
    assert [r["amount"] for r in admin.ledger()["refunds"]] == [2000]

    page.reload()
    assert page.inner_text("#wf-status") == "completed"
    assert "alice" in page.locator("#signals .sender").all_inner_texts()
    shots(page, "workflow")
    page.click("a.effect-link")
    page.wait_for_url(f"**/effects/{eff['effect_id']}")
    marks = {li.get_attribute("data-check"): li.get_attribute("class")
             for li in page.locator("#checklist li").all()}  # fmt: skip
    assert marks == {c: "check ok" for c in CHECKS}
    assert page.inner_text("#receipt-verdict").startswith("VALID")
    shots(page, "receipt")
    for name in ("workflows", "effects", "grants"):
        page.goto(f"{console.url}/{name}")
        shots(page, name)
    page.close()


def test_revoke_in_the_browser_during_a_slow_send_lists_it_as_may_still_land(
    dsn, conn, workers, target, console, browser, shots
) -> None:
    t, admin = target
    admin.set_delay(10_000, count=1)  # the refund POST sits 10 s at the target
    wf = "refund-slow"
    with Runtime(dsn) as rt:
        rt.register(flows.refund)
        page = browser.new_page(viewport={"width": 1280, "height": 800})
        login(page, console, "bob")
        rt.start(flows.refund, wf, case(t, "case-slow", send_timeout=30))
        workers("W1")
        decided = wait_for_approval_wait(rt, wf)["steps"][0]["output"]
        grant = rt.approve(wf, {"payment": PAYMENT, "amount": 2000}, decided["premises"],
                           by="alice")  # fmt: skip
        page.goto(console.url + "/grants")
        revoke = page.locator(f"tr[data-grant='{grant}'] button.revoke")
        # The send is on the wire: dispatched in Postgres, the POST inside the target's delay.
        wait_for(lambda: rt.effects(wf) and rt.effects(wf)[0]["state"] == "dispatched", 30,
                 "the dispatch")  # fmt: skip
        wait_for(lambda: [p for p in admin.log(path="/refunds", method="POST")
                          if p.get("start") and not p.get("end")], 30, "the POST to arrive")  # fmt: skip
        revoke.click()
        page.wait_for_url("**/revoke")
        eid = rt.effects(wf)[0]["effect_id"]
        assert page.locator("#may-still-land li").all_inner_texts() == [eid]
        shots(page, "revoked")
        row = conn.execute("select revoked_by from ilr.grants where id = %s", (grant,)).fetchone()
        assert row["revoked_by"] == "bob"
        # It was authorized when it was fired, so it may land, and it does.
        assert rt.result(wf, timeout=60)["status"] == "COMMITTED"
    assert [r["amount"] for r in admin.ledger()["refunds"]] == [2000]
    page.goto(console.url + "/grants")
    assert "revoked by bob" in page.inner_text(f"tr[data-grant='{grant}']")
    page.close()


def test_reject_from_the_inbox_cancels_and_records_who(
    dsn, workers, target, console, browser
) -> None:
    t, admin = target
    wf = "refund-rejected"
    with Runtime(dsn) as rt:
        workers("W1")
        rt.start(flows.refund, wf, case(t, "case-rej"))
        wait_for_approval_wait(rt, wf)
        page = browser.new_page()
        login(page, console, "carol")
        page.locator(f"section.approval[data-workflow='{wf}'] button.reject").click()
        page.wait_for_url(f"**/workflows/{wf}")
        wait_for(lambda: rt.describe(wf)["status"] == "cancelled", 30, "the cancel")
        assert rt.describe(wf)["cancel_requested_by"] == "carol"
    page.reload()
    assert "by carol" in page.inner_text("#wf-cancel")
    page.goto(console.url + "/approvals")
    assert page.locator("#empty-inbox").count() == 1
    assert admin.ledger()["refunds"] == []
    page.close()


def test_ambiguous_effect_is_reconciled_from_the_effects_page(
    dsn, conn, workers, target_factory, console, browser, shots
) -> None:
    """A tier-3 target answers no lookups: the sender is SIGKILLed after its send, so the
    successor cannot tell whether the refund landed and the effect ends AMBIGUOUS."""
    t, admin = target_factory(3)
    wf = "refund-ambiguous"
    with Runtime(dsn) as rt:
        dying = workers("W1", env={"ILR_KILL_AT": "effect_after_send"}, lease_ttl=1.5)
        rt.start(flows.refund, wf, case(t, "case-amb"))
        decided = wait_for_approval_wait(rt, wf)["steps"][0]["output"]
        rt.approve(wf, {"payment": PAYMENT, "amount": 2000}, decided["premises"], by="alice")
        assert dying.proc.wait(timeout=30) == -signal.SIGKILL
        workers("W2", lease_ttl=1.5)
        out = rt.result(wf, timeout=40)
    assert out["status"] == "AMBIGUOUS"
    eid = out["effect_id"]

    page = browser.new_page(viewport={"width": 1280, "height": 800})
    login(page, console, "erin")
    page.goto(console.url + "/effects")
    row = page.locator("#ambiguous tbody tr", has_text=eid)
    assert row.count() == 1
    shots(page, "ambiguous")
    row.locator("input[name=evidence]").fill("target ledger shows re_000001 for 2000 on pay_881")
    row.locator("button").click()
    page.wait_for_url(f"**/effects/{eid}")
    assert "Attested by erin" in page.inner_text("#reconciled")
    # The receipt says what is known: the landing is unknown, nothing else failed.
    marks = {li.get_attribute("data-check"): li.get_attribute("class")
             for li in page.locator("#checklist li").all()}  # fmt: skip
    assert marks == {**{c: "check ok" for c in CHECKS}, "happened": "check unknown"}
    got = conn.execute("select reconciled from ilr.effects where effect_id = %s", (eid,))
    assert got.fetchone()["reconciled"]["by"] == "erin"
    page.close()


def test_forged_posts_escaping_and_unknown_ids(dsn, conn, workers, console, browser) -> None:
    with Runtime(dsn) as rt:
        grant = rt.grant("agent", "refund", constraints={"amount": {"max": 5000}}, by="policy")
        workers("W1")
        rt.start(flows.echo, "wf-html", {"note": HOSTILE})
        assert rt.result("wf-html", timeout=30) == {"note": HOSTILE}

    def revoked() -> bool:
        row = conn.execute("select revoked_at from ilr.grants where id = %s", (grant,)).fetchone()
        return row["revoked_at"] is not None

    # A POST from a page without the session cookie (a forged cross-site form) is refused.
    stranger = browser.new_context()
    r = stranger.request.post(console.url + "/revoke", form={"grant_id": grant, "csrf": "x"},
                              max_redirects=0)  # fmt: skip
    assert r.status == 403 and not revoked()
    add_operator(dsn, "eve")
    r = stranger.request.post(console.url + "/login", form={"name": "eve", "password": "wrong" * 5})
    assert r.status == 403 and "Wrong name or password" in r.text()
    stranger.close()

    ctx = browser.new_context()
    page = ctx.new_page()
    login(page, console, "dave")
    # Logged in, but without the CSRF field, or with another value: refused, nothing revoked.
    for form in ({"grant_id": grant}, {"grant_id": grant, "csrf": "not-the-session-csrf"}):
        r = ctx.request.post(console.url + "/revoke", form=form, max_redirects=0)
        assert r.status == 403 and "CSRF" in r.text()
        assert not revoked()

    # HTML in a payload is text on the page, never markup.
    response = page.goto(console.url + "/workflows/wf-html")
    assert response.status == 200
    assert page.locator("#pwn").count() == 0 and page.title() != "pwned"
    assert HOSTILE in page.inner_text("#wf-input")
    assert HOSTILE in page.inner_text("#steps")
    assert "&lt;b id=&#39;pwn&#39;&gt;" in response.text()

    # Unknown ids are 404 pages that say what was not found, not tracebacks.
    for path, says in (("/workflows/no-such-wf", "no workflow with id 'no-such-wf'"),
                       ("/effects/no-such-effect", "no effect with id 'no-such-effect'"),
                       ("/grants/no-such-grant", "no grant with id 'no-such-grant'"),
                       ("/no/such/page", "No page at /no/such/page")):  # fmt: skip
        response = page.goto(console.url + path)
        assert response.status == 404, path
        assert says in page.inner_text("#message")
        assert "Traceback" not in response.text()
    # A revoke of an unknown grant through the real form path is a 404 too.
    r = ctx.request.post(console.url + "/revoke", max_redirects=0,
                         form={"grant_id": "no-such-grant", "csrf": csrf(page)})  # fmt: skip
    assert r.status == 404
    ctx.close()


def csrf(page) -> str:
    return page.locator("input[name=csrf]").first.get_attribute("value")


def test_the_console_refuses_to_bind_anything_but_loopback() -> None:
    for host in ("0.0.0.0", "192.0.2.7", "example.org"):
        p = subprocess.run([sys.executable, "-m", "interlock_runtime.cli", "console", "--host",
                            host, "--port", "0"], capture_output=True, text=True, timeout=60)  # fmt: skip
        assert p.returncode == 2 and "loopback only" in p.stderr, (host, p.stderr)


def test_the_console_runs_under_the_operator_role(dsn, conn, browser, tmp_path) -> None:
    """With an ilr_operator login every page reads and Revoke writes; the header names the
    database role, so an operator sees which authority the console holds."""
    from psycopg.conninfo import conninfo_to_dict, make_conninfo

    from interlock_runtime import db

    db.apply_roles(conn, {"ilr_t_console_op": "operator"})
    op_dsn = make_conninfo(**{**conninfo_to_dict(dsn), "user": "ilr_t_console_op"})
    with Runtime(dsn) as rt:
        grant = rt.grant("agent", "refund", constraints={"amount": {"max": 5000}}, by="policy")
    c = Console(op_dsn, tmp_path, owner_dsn=dsn)
    try:
        page = browser.new_page()
        login(page, c, "frank")
        assert "database role ilr_t_console_op" in page.inner_text("header")
        for name in ("approvals", "workflows", "effects", "grants"):
            assert page.goto(f"{c.url}/{name}").status == 200, name
        page.locator(f"tr[data-grant='{grant}'] button.revoke").click()
        page.wait_for_url("**/revoke")
        assert page.inner_text("#nothing-in-flight").startswith("None")
        row = conn.execute("select revoked_by from ilr.grants where id = %s", (grant,)).fetchone()
        assert row["revoked_by"] == "frank"
        page.close()
    finally:
        c.close()


def test_each_operator_logs_in_and_the_approval_records_who_is_logged_in(
    dsn, conn, workers, target, console, browser, shots
) -> None:
    """Issue 19: `interlock operator add` then the login form; a wrong password is refused; the
    approval records the logged-in operator (there is no field to type a name); the page shows
    the approval at once; when the workflow ends its grant is revoked, with no Revoke button."""
    import hashlib

    t, admin = target
    wf = "refund-operator"
    made = subprocess.run([sys.executable, "-m", "interlock_runtime.cli", "operator", "add",
                           "grace", "--dsn", dsn], input=PASSWORD + "\n", capture_output=True,
                          text=True, timeout=60)  # fmt: skip
    assert made.returncode == 0, made.stderr
    ctx = browser.new_context(viewport={"width": 1280, "height": 800})
    page = ctx.new_page()
    page.goto(console.url + "/login")
    # The login form asks for a name and a password, nothing else.
    fields = page.locator("form.login input").evaluate_all("els => els.map(e => e.name)")
    assert fields == ["name", "password"]
    page.fill("#name", "grace")
    page.fill("#password", PASSWORD + "x")
    page.click("#login")
    assert page.inner_text("#error") == "Wrong name or password."
    assert page.locator("#who").count() == 0 and ctx.cookies() == []
    assert page.goto(console.url + "/approvals").url.endswith("/login")
    page.fill("#name", "grace")
    page.fill("#password", PASSWORD)
    page.click("#login")
    page.wait_for_url("**/approvals")
    assert page.inner_text("#who") == "grace"
    (cookie,) = ctx.cookies()
    assert (cookie["httpOnly"], cookie["sameSite"]) == (True, "Strict")
    stored = conn.execute("select token_hash from ilr.operator_sessions").fetchone()
    assert stored["token_hash"] == hashlib.sha256(cookie["value"].encode()).hexdigest()

    with Runtime(dsn) as rt:
        first = workers("W1")
        rt.start(flows.refund, wf, case(t, "case-op"))
        wait_for_approval_wait(rt, wf)
        first.close()  # no worker: the approval stays untaken while the page is looked at
        page.goto(f"{console.url}/workflows/{wf}")
        card = page.locator(f"section.approval[data-workflow='{wf}']")
        # Nothing on the page asks who approves: only hidden fields and the buttons.
        assert card.locator("input:not([type=hidden]), textarea, select").count() == 0
        assert page.locator("input[name=who], input[name=by], input[name=approver]").count() == 0
        card.locator("button.approve").click()
        page.wait_for_url(f"**/workflows/{wf}")
        # At once: approved, by grace, and nothing left to approve.
        assert "Approved" in page.inner_text("#flash")
        assert page.inner_text("#approved-by") == "grace"
        assert page.locator("button.approve").count() == 0
        assert "waiting for approval" not in page.inner_text("main").lower()
        assert "approved" in page.inner_text("#wf-waiting")
        shots(page, "approved")
        page.goto(console.url + "/approvals")
        assert page.locator("#empty-inbox").count() == 1
        grant = page.goto(f"{console.url}/workflows/{wf}") and page.inner_text("#approved-grant")

        workers("W2")
        assert rt.result(wf, timeout=60)["status"] == "COMMITTED"
    g = conn.execute("select granted_by, revoked_by, revoke_reason from ilr.grants "
                     "where id = %s", (grant,)).fetchone()  # fmt: skip
    assert g == {"granted_by": "grace", "revoked_by": "$runtime",
                 "revoke_reason": "workflow finished"}  # fmt: skip
    sender = conn.execute("select sender from ilr.signals where workflow_id = %s and "
                          "name = 'approve'", (wf,)).fetchone()["sender"]  # fmt: skip
    assert sender == "grace"
    assert [r["amount"] for r in admin.ledger()["refunds"]] == [2000]
    # The finished workflow's grant has no Revoke button any more.
    page.goto(console.url + "/grants")
    row = page.locator(f"tr[data-grant='{grant}']")
    assert "workflow finished" in row.inner_text()
    assert row.locator("button.revoke").count() == 0
    page.goto(f"{console.url}/grants/{grant}")
    assert page.locator("button.revoke").count() == 0
    assert "workflow finished" in page.inner_text("#grant-state")
    # The audit: the refused login, the login, the approval, each with who.
    page.goto(console.url + "/audit")
    shots(page, "audit")
    rows = conn.execute("select event, operator, subject, detail from ilr.operator_audit "
                        "where event <> 'operator_added' order by id").fetchall()  # fmt: skip
    assert [(r["event"], r["operator"]) for r in rows] == [
        ("login_refused", "grace"), ("login", "grace"), ("approve", "grace")]  # fmt: skip
    assert rows[0]["detail"] == {"reason": "wrong password"}
    assert rows[2]["subject"] == wf and rows[2]["detail"]["grant_id"] == grant
    assert page.locator("#audit tr[data-event='approve'] .operator").inner_text() == "grace"
    ctx.close()


def test_a_session_expires_and_a_disabled_operators_session_ends(
    dsn, conn, browser, tmp_path
) -> None:
    with Runtime(dsn) as rt:
        grant = rt.grant("agent", "refund", by="policy")
    c = Console(dsn, tmp_path, args=("--session-ttl", "3"))
    try:
        ctx = browser.new_context()
        page = ctx.new_page()
        login(page, c, "ken")
        token_csrf = csrf(page)
        (cookie,) = ctx.cookies()
        assert 0 < cookie["expires"] - time.time() <= 3.5  # the browser drops it then, too
        time.sleep(3.5)  # past --session-ttl
        # A client that keeps the cookie anyway: the console itself refuses the session.
        ctx.add_cookies([{k: v for k, v in cookie.items() if k != "expires"}])
        assert page.goto(c.url + "/grants").url.endswith("/login")
        r = ctx.request.post(c.url + "/revoke", form={"grant_id": grant, "csrf": token_csrf},
                             max_redirects=0)  # fmt: skip
        assert r.status == 403
        assert conn.execute("select revoked_at from ilr.grants").fetchone()["revoked_at"] is None
        ctx.close()

        ctx = browser.new_context()
        page = ctx.new_page()
        login(page, c, "ken")
        off = subprocess.run([sys.executable, "-m", "interlock_runtime.cli", "operator",
                              "disable", "ken", "--dsn", dsn], capture_output=True, text=True,
                             timeout=60)  # fmt: skip
        assert off.returncode == 0 and "1 session(s) ended" in off.stdout, off.stderr
        assert page.goto(c.url + "/grants").url.endswith("/login")
        page.fill("#name", "ken")
        page.fill("#password", PASSWORD)
        page.click("#login")
        assert page.inner_text("#error") == "Wrong name or password."
        reasons = [r["ended_reason"] for r in conn.execute(
            "select ended_reason from ilr.operator_sessions order by created_at")]  # fmt: skip
        assert reasons == [None, "operator disabled"]  # the first one simply expired
        ctx.close()
    finally:
        c.close()
