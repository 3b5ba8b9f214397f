"""The console's web app: Starlette routes over Store, Jinja2 templates with autoescape on.

Authentication is a token printed when the console starts: the login form trades it (and the
operator's name, recorded as who acted) for a session cookie. Every action is a POST that must
carry the session's CSRF field; a POST without both is refused before anything is read.
"""

from __future__ import annotations

import hmac
import json
import secrets
import threading
from collections.abc import Awaitable, Callable
from datetime import datetime
from pathlib import Path
from typing import Any
from urllib.parse import quote

from jinja2 import Environment, FileSystemLoader, select_autoescape
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from ..errors import InterlockError, InvalidInput, WorkflowNotFound
from .store import STATUSES, Store, proposal

HERE = Path(__file__).resolve().parent
COOKIE = "ilr_console"
# Loopback names only: a page on another origin that rebinds its DNS name to 127.0.0.1 still
# sends its own Host header and is refused.
HOSTS = ["127.0.0.1", "localhost", "[::1]", "::1"]
HEADERS = {
    "Content-Security-Policy": "default-src 'none'; style-src 'self'; img-src 'self'; "
    "form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}
# verify() answers shown as a checklist, in the order of the issue.
CHECKS = [
    ("happened", "happened"),
    ("happened_once", "happened once"),
    ("authorized_when_fired", "authorized when fired"),
    ("assumptions_held", "premises held"),
    ("tamper_evident", "tamper evident"),
    ("signed", "signed"),
]


def _ts(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, datetime):
        return "never" if value.year == 9999 else value.strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]
    return str(value)


def _pretty(value: Any) -> str:
    return json.dumps(value, indent=2, sort_keys=True, default=str)


def _compact(value: Any) -> str:
    text = json.dumps(value, sort_keys=True, default=str)
    return text if len(text) <= 120 else text[:117] + "..."


def receipt_checks(v: dict[str, Any], key_given: bool) -> list[dict[str, Any]]:
    """verify()'s answers as rows: ok, fail, unknown, or fact (a definite 'did not happen')."""
    rows = []
    for field, label in CHECKS:
        value = v.get(field)
        if field == "signed" and value is None:
            state, detail = (
                "unknown",
                "not checked: the console has no receipt key (ILR_RECEIPT_KEY)",
            )
        elif value is True:
            state, detail = "ok", "yes"
        elif field == "happened" and value is False:
            state, detail = "fact", "no"
        elif value == "unknown":
            state, detail = "unknown", "unknown"
        else:
            state, detail = "fail", "no"
        rows.append({"field": field, "label": label, "state": state, "detail": detail})
    return rows


Session = dict[str, Any]
"""One logged-in operator: who, csrf, flash."""
Page = Callable[[Request], Awaitable[Response]]
"""A GET endpoint."""
Action = Callable[[Request, Any, Session], Awaitable[Response]]
"""A POST action's handler: (request, form, session)."""


class Sessions:
    """Logged-in operators: session id -> {who, csrf, flash}. In memory: a restart logs out."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_id: dict[str, Session] = {}

    def new(self, who: str) -> str:
        sid = secrets.token_urlsafe(32)
        with self._lock:
            self._by_id[sid] = {"who": who, "csrf": secrets.token_urlsafe(32), "flash": None}
        return sid

    def get(self, sid: str | None) -> Session | None:
        if not sid:
            return None
        with self._lock:
            return self._by_id.get(sid)

    def drop(self, sid: str | None) -> None:
        with self._lock:
            self._by_id.pop(sid or "", None)


def create_app(dsn: str, token: str, receipt_key: bytes | None = None) -> Starlette:
    """The console for one database. `token` is the login secret; `receipt_key` signs and
    verifies receipts (None: receipts are shown unsigned and `signed` is not checked)."""
    if len(token) < 16:
        raise ValueError("the console token must be at least 16 characters")
    store = Store(dsn)
    sessions = Sessions()
    env = Environment(
        loader=FileSystemLoader(str(HERE / "templates")),
        autoescape=select_autoescape(default=True, default_for_string=True),
    )
    env.filters.update(ts=_ts, pretty=_pretty, compact=_compact, u=lambda s: quote(str(s), safe=""))
    whoami = store.whoami()

    def page(request: Request, name: str, status: int = 200, **ctx: Any) -> HTMLResponse:
        session = sessions.get(request.cookies.get(COOKIE))
        flash = None
        if session is not None:
            flash, session["flash"] = session["flash"], None
        html = env.get_template(name).render(session=session, flash=flash, db_user=whoami,
                                             path=request.url.path, **ctx)  # fmt: skip
        return HTMLResponse(html, status_code=status, headers=HEADERS)

    def message(request: Request, status: int, title: str, text: str) -> HTMLResponse:
        return page(request, "message.html", status=status, title=title, text=text)

    def guarded(handler: Page) -> Page:
        """GET pages: log in first; an unknown id is a 404 page."""

        async def endpoint(request: Request) -> Response:
            if sessions.get(request.cookies.get(COOKIE)) is None:
                return RedirectResponse("/login", status_code=303)
            try:
                return await handler(request)
            except WorkflowNotFound as exc:
                return message(request, 404, "Not found", str(exc))

        return endpoint

    def action(handler: Action) -> Page:
        """POST actions: the session cookie and the session's CSRF field, or 403 and nothing
        done. The handler gets (request, form, who)."""

        async def endpoint(request: Request) -> Response:
            session = sessions.get(request.cookies.get(COOKIE))
            if session is None:
                return message(request, 403, "Refused", "Not logged in: log in with the token.")
            form = await request.form()
            sent = str(form.get("csrf") or "")
            if not hmac.compare_digest(sent.encode(), session["csrf"].encode()):
                return message(request, 403, "Refused", "Missing or wrong CSRF field.")
            try:
                return await handler(request, form, session)
            except WorkflowNotFound as exc:
                return message(request, 404, "Not found", str(exc))
            except InterlockError as exc:  # refused by the runtime: show why, change nothing
                return message(request, 409, "Refused", str(exc))

        return endpoint

    # -- login -------------------------------------------------------------------------------

    async def login_form(request: Request) -> Response:
        return page(request, "login.html")

    async def login(request: Request) -> Response:
        form = await request.form()
        sent = str(form.get("token") or "")
        who = str(form.get("who") or "").strip()
        if not hmac.compare_digest(sent.encode(), token.encode()):
            return page(request, "login.html", status=403, error="Wrong token.", who=who)
        if not who or len(who) > 100:
            return page(request, "login.html", status=400,
                        error="Give your name (1-100 characters): it is recorded as who acted.")  # fmt: skip
        response = RedirectResponse("/approvals", status_code=303)
        response.set_cookie(COOKIE, sessions.new(who), httponly=True, samesite="strict")
        return response

    async def logout(request: Request, form: Any, session: Session) -> Response:
        sessions.drop(request.cookies.get(COOKIE))
        response = RedirectResponse("/login", status_code=303)
        response.delete_cookie(COOKIE)
        return response

    # -- pages -------------------------------------------------------------------------------

    async def workflows(request: Request) -> Response:
        q = request.query_params
        filters = {k: (q.get(k) or "").strip() or None for k in ("status", "name", "version")}
        rows = await run_in_threadpool(store.workflows, **filters)
        return page(request, "workflows.html", rows=rows, filters=filters, statuses=STATUSES)

    async def workflow(request: Request) -> Response:
        wf_id = request.path_params["wf_id"]
        wf = await run_in_threadpool(store.workflow, wf_id)
        waiting = (wf.get("waiting") or {}).get("signal") == "approve" and wf["status"] in (
            "pending", "running", "sleeping")  # fmt: skip
        return page(request, "workflow.html", wf=wf, proposal=proposal(wf) if waiting else None)

    async def approvals(request: Request) -> Response:
        items = await run_in_threadpool(store.inbox)
        return page(request, "approvals.html", items=items)

    async def effects(request: Request) -> Response:
        rows = await run_in_threadpool(store.effects)
        ambiguous = await run_in_threadpool(store.ambiguous)
        return page(request, "effects.html", rows=rows, ambiguous=ambiguous)

    async def effect(request: Request) -> Response:
        eid = request.path_params["effect_id"]
        eff = await run_in_threadpool(store.effect, eid, receipt_key)
        checks = receipt_checks(eff["verify"], receipt_key is not None) if eff["verify"] else []
        return page(request, "effect.html", eff=eff, checks=checks)

    async def receipt_json(request: Request) -> Response:
        eid = request.path_params["effect_id"]
        eff = await run_in_threadpool(store.effect, eid, receipt_key)
        if eff["bundle"] is None:
            return message(request, 404, "Not found", f"effect {eid!r} has no journal yet")
        headers = {**HEADERS, "Content-Disposition": 'attachment; filename="receipt.json"'}
        return JSONResponse(eff["bundle"], headers=headers)

    async def grants(request: Request) -> Response:
        rows = await run_in_threadpool(store.grants)
        return page(request, "grants.html", rows=rows)

    async def grant(request: Request) -> Response:
        gid = request.path_params["grant_id"]
        g = await run_in_threadpool(store.grant, gid)
        return page(request, "grant.html", g=g)

    # -- actions -----------------------------------------------------------------------------

    async def approve(request: Request, form: Any, session: Session) -> Response:
        wf_id = str(form.get("workflow_id") or "")

        def run() -> str | None:
            wf = store.workflow(wf_id)
            p = proposal(wf)
            if p["payload"] is None:
                raise InvalidInput(p["problem"] or "nothing to approve")
            # Approve exactly what the page showed: a different proposal is refused.
            if not hmac.compare_digest(str(form.get("fingerprint") or ""), p["fingerprint"]):
                return None
            return store.rt.approve(wf_id, p["payload"], p["facts"], by=session["who"])

        grant_id = await run_in_threadpool(run)
        if grant_id is None:
            return message(request, 409, "Refused", "The proposal changed since the page was "
                           "shown; nothing was approved. Reload the inbox.")  # fmt: skip
        session["flash"] = f"Approved {wf_id} as {session['who']}: grant {grant_id}"
        return RedirectResponse(f"/workflows/{quote(wf_id, safe='')}", status_code=303)

    async def reject(request: Request, form: Any, session: Session) -> Response:
        wf_id = str(form.get("workflow_id") or "")
        await run_in_threadpool(store.rt.cancel, wf_id, session["who"])
        session["flash"] = f"Rejected {wf_id} as {session['who']}: cancel requested"
        return RedirectResponse(f"/workflows/{quote(wf_id, safe='')}", status_code=303)

    async def revoke(request: Request, form: Any, session: Session) -> Response:
        gid = str(form.get("grant_id") or "")
        still = await run_in_threadpool(store.rt.revoke, gid, session["who"])
        return page(request, "revoked.html", grant_id=gid, still=still, who=session["who"])

    async def reconcile(request: Request, form: Any, session: Session) -> Response:
        eid = str(form.get("effect_id") or "")
        evidence = str(form.get("evidence") or "").strip()
        if not evidence:
            return message(request, 400, "Refused", "Reconcile needs the evidence text.")
        await run_in_threadpool(store.rt.reconcile, eid, evidence, session["who"])
        session["flash"] = f"Reconciled {eid} as {session['who']}"
        return RedirectResponse(f"/effects/{quote(eid, safe='')}", status_code=303)

    async def home(request: Request) -> Response:
        return RedirectResponse("/approvals", status_code=303)

    async def not_found(request: Request, exc: Exception) -> Response:
        status = getattr(exc, "status_code", 404)
        if status == 405:
            return message(request, 405, "Method not allowed", "Actions are POST forms.")
        return message(request, 404, "Not found", f"No page at {request.url.path}.")

    async def server_error(request: Request, exc: Exception) -> Response:
        # No traceback to the browser; the console's stderr has it.
        return message(request, 500, "Error", f"{type(exc).__name__}: the console's log has more")

    routes = [
        Route("/", guarded(home)),
        Route("/login", login_form, methods=["GET"]),
        Route("/login", login, methods=["POST"]),
        Route("/logout", action(logout), methods=["POST"]),
        Route("/workflows", guarded(workflows)),
        Route("/workflows/{wf_id:path}", guarded(workflow)),
        Route("/approvals", guarded(approvals)),
        Route("/approve", action(approve), methods=["POST"]),
        Route("/reject", action(reject), methods=["POST"]),
        Route("/effects", guarded(effects)),
        Route("/receipts/{effect_id:path}", guarded(receipt_json)),
        Route("/effects/{effect_id:path}", guarded(effect)),
        Route("/reconcile", action(reconcile), methods=["POST"]),
        Route("/grants", guarded(grants)),
        Route("/grants/{grant_id:path}", guarded(grant)),
        Route("/revoke", action(revoke), methods=["POST"]),
        Mount("/static", StaticFiles(directory=str(HERE / "static")), name="static"),
    ]
    app = Starlette(
        routes=routes,
        middleware=[Middleware(TrustedHostMiddleware, allowed_hosts=HOSTS)],
        exception_handlers={HTTPException: not_found, Exception: server_error},
    )
    app.state.store = store
    return app
