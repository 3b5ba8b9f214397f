"""The console's web app: Starlette routes over Store, Jinja2 templates with autoescape on.

Each operator logs in with their own name and password (`interlock operator add`, auth.py);
the session cookie (HttpOnly, SameSite=Strict, a random token the database keeps only hashed)
expires after the console's --session-ttl, at logout, or when the operator is disabled. Who
approved, rejected, revoked or reconciled is the session's operator, never a typed name, and
each such action writes its audit row in its own transaction. Every action is a POST that must
carry the session's CSRF field; a POST without both is refused before anything is read.
"""

from __future__ import annotations

import hmac
import json
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
from . import auth
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
                "unsigned: integrity not established (the console has no receipt key, "
                "ILR_RECEIPT_KEY)",
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
"""One logged-in operator (auth.session): who, csrf, expires_at; and the page's flash."""
Page = Callable[[Request], Awaitable[Response]]
"""A GET endpoint."""
Action = Callable[[Request, Any, Session], Awaitable[Response]]
"""A POST action's handler: (request, form, session)."""


class Flashes:
    """One-shot messages per session (in memory: a restart loses at most a message)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_token: dict[str, str] = {}

    def put(self, token: str, text: str) -> None:
        with self._lock:
            self._by_token[auth.token_hash(token)] = text

    def take(self, token: str) -> str | None:
        with self._lock:
            return self._by_token.pop(auth.token_hash(token), None)


def create_app(dsn: str, receipt_key: bytes | None = None,
               session_ttl: float = auth.DEFAULT_SESSION_TTL) -> Starlette:  # fmt: skip
    """The console for one database. Operators log in with their own name and password
    (`interlock operator add`); a session lasts `session_ttl` seconds. `receipt_key` signs and
    verifies receipts (None: receipts are shown unsigned and `signed` is not checked)."""
    if not session_ttl > 0:
        raise ValueError("the session lifetime must be a positive number of seconds")
    store = Store(dsn, session_ttl)
    flashes = Flashes()
    env = Environment(
        loader=FileSystemLoader(str(HERE / "templates")),
        autoescape=select_autoescape(default=True, default_for_string=True),
    )
    env.filters.update(ts=_ts, pretty=_pretty, compact=_compact, u=lambda s: quote(str(s), safe=""))
    whoami = store.whoami()

    async def current(request: Request) -> Session | None:
        token = request.cookies.get(COOKIE)
        return await run_in_threadpool(store.session, token) if token else None

    def page(request: Request, template: str, status: int = 200, session: Session | None = None,
             **ctx: Any) -> HTMLResponse:  # fmt: skip
        token = request.cookies.get(COOKIE)
        flash = flashes.take(token) if session is not None and token else None
        html = env.get_template(template).render(session=session, flash=flash, db_user=whoami,
                                             path=request.url.path, **ctx)  # fmt: skip
        return HTMLResponse(html, status_code=status, headers=HEADERS)

    def message(request: Request, status: int, title: str, text: str,
                session: Session | None = None) -> HTMLResponse:  # fmt: skip
        return page(request, "message.html", status=status, session=session, title=title,
                    text=text)  # fmt: skip

    def guarded(handler: Callable[[Request, Session], Awaitable[Response]]) -> Page:
        """GET pages: a live session or the login page; an unknown id is a 404 page."""

        async def endpoint(request: Request) -> Response:
            session = await current(request)
            if session is None:
                response = RedirectResponse("/login", status_code=303)
                if request.cookies.get(COOKIE):  # expired, ended or disabled: forget it
                    response.delete_cookie(COOKIE, httponly=True, samesite="strict")
                return response
            try:
                return await handler(request, session)
            except WorkflowNotFound as exc:
                return message(request, 404, "Not found", str(exc), session)

        return endpoint

    def action(handler: Action) -> Page:
        """POST actions: a live session's cookie and its CSRF field, or 403 and nothing done.
        The handler gets (request, form, session); who acted is the session's operator."""

        async def endpoint(request: Request) -> Response:
            session = await current(request)
            if session is None:
                return message(request, 403, "Refused", "Not logged in, or the session ended: "
                               "log in again.")  # fmt: skip
            form = await request.form()
            sent = str(form.get("csrf") or "")
            if not hmac.compare_digest(sent.encode(), session["csrf"].encode()):
                return message(request, 403, "Refused", "Missing or wrong CSRF field.", session)
            try:
                return await handler(request, form, session)
            except WorkflowNotFound as exc:
                return message(request, 404, "Not found", str(exc), session)
            except InterlockError as exc:  # refused by the runtime: show why, change nothing
                return message(request, 409, "Refused", str(exc), session)

        return endpoint

    def flash(request: Request, text: str) -> None:
        token = request.cookies.get(COOKIE)
        if token:
            flashes.put(token, text)

    # -- login -------------------------------------------------------------------------------

    async def login_form(request: Request) -> Response:
        return page(request, "login.html")

    async def login(request: Request) -> Response:
        form = await request.form()
        name = str(form.get("name") or "").strip()
        password = str(form.get("password") or "")
        made = await run_in_threadpool(store.login, name, password)
        if made is None:
            return page(request, "login.html", status=403, error="Wrong name or password.",
                        name=name[:100])  # fmt: skip
        response = RedirectResponse("/approvals", status_code=303)
        response.set_cookie(COOKIE, made["token"], max_age=int(session_ttl), path="/",
                            httponly=True, samesite="strict")  # fmt: skip
        return response

    async def logout(request: Request, form: Any, session: Session) -> Response:
        await run_in_threadpool(store.logout, request.cookies.get(COOKIE) or "")
        response = RedirectResponse("/login", status_code=303)
        response.delete_cookie(COOKIE, httponly=True, samesite="strict")
        return response

    # -- pages -------------------------------------------------------------------------------

    async def workflows(request: Request, session: Session) -> Response:
        q = request.query_params
        filters = {k: (q.get(k) or "").strip() or None for k in ("status", "name", "version")}
        rows = await run_in_threadpool(store.workflows, **filters)
        return page(request, "workflows.html", session=session, rows=rows, filters=filters,
                    statuses=STATUSES)  # fmt: skip

    async def workflow(request: Request, session: Session) -> Response:
        wf_id = request.path_params["wf_id"]
        wf = await run_in_threadpool(store.workflow, wf_id)
        # Approved but not yet picked up by a worker: shown as approved, with nothing to click.
        waiting = (wf.get("waiting") or {}).get("signal") == "approve" and wf["status"] in (
            "pending", "running", "sleeping") and wf["approved"] is None  # fmt: skip
        return page(request, "workflow.html", session=session, wf=wf,
                    proposal=proposal(wf) if waiting else None)  # fmt: skip

    async def approvals(request: Request, session: Session) -> Response:
        items = await run_in_threadpool(store.inbox)
        return page(request, "approvals.html", session=session, items=items)

    async def effects(request: Request, session: Session) -> Response:
        rows = await run_in_threadpool(store.effects)
        ambiguous = await run_in_threadpool(store.ambiguous)
        return page(request, "effects.html", session=session, rows=rows, ambiguous=ambiguous)

    async def effect(request: Request, session: Session) -> Response:
        eid = request.path_params["effect_id"]
        eff = await run_in_threadpool(store.effect, eid, receipt_key)
        checks = receipt_checks(eff["verify"], receipt_key is not None) if eff["verify"] else []
        return page(request, "effect.html", session=session, eff=eff, checks=checks)

    async def receipt_json(request: Request, session: Session) -> Response:
        eid = request.path_params["effect_id"]
        eff = await run_in_threadpool(store.effect, eid, receipt_key)
        if eff["bundle"] is None:
            return message(request, 404, "Not found", f"effect {eid!r} has no journal yet",
                           session)  # fmt: skip
        headers = {**HEADERS, "Content-Disposition": 'attachment; filename="receipt.json"'}
        return JSONResponse(eff["bundle"], headers=headers)

    async def grants(request: Request, session: Session) -> Response:
        rows = await run_in_threadpool(store.grants)
        return page(request, "grants.html", session=session, rows=rows)

    async def grant(request: Request, session: Session) -> Response:
        gid = request.path_params["grant_id"]
        g = await run_in_threadpool(store.grant, gid)
        return page(request, "grant.html", session=session, g=g)

    async def audit_page(request: Request, session: Session) -> Response:
        rows = await run_in_threadpool(store.audit_log)
        return page(request, "audit.html", session=session, rows=rows)

    # -- actions: who acted is the logged-in operator, never a typed name ----------------------

    async def approve(request: Request, form: Any, session: Session) -> Response:
        wf_id = str(form.get("workflow_id") or "")
        who = session["who"]

        def run() -> str | None:
            wf = store.workflow(wf_id)
            p = proposal(wf)
            if p["payload"] is None:
                raise InvalidInput(p["problem"] or "nothing to approve")
            # Approve exactly what the page showed: a different proposal is refused.
            if not hmac.compare_digest(str(form.get("fingerprint") or ""), p["fingerprint"]):
                return None
            return store.approve(wf_id, p["payload"], p["facts"], who)

        grant_id = await run_in_threadpool(run)
        if grant_id is None:
            return message(request, 409, "Refused", "The proposal changed since the page was "
                           "shown; nothing was approved. Reload the inbox.", session)  # fmt: skip
        flash(request, f"Approved {wf_id} as {who}: grant {grant_id}")
        return RedirectResponse(f"/workflows/{quote(wf_id, safe='')}", status_code=303)

    async def reject(request: Request, form: Any, session: Session) -> Response:
        wf_id = str(form.get("workflow_id") or "")
        await run_in_threadpool(store.reject, wf_id, session["who"])
        flash(request, f"Rejected {wf_id} as {session['who']}: cancel requested")
        return RedirectResponse(f"/workflows/{quote(wf_id, safe='')}", status_code=303)

    async def revoke(request: Request, form: Any, session: Session) -> Response:
        gid = str(form.get("grant_id") or "")
        still = await run_in_threadpool(store.revoke, gid, session["who"])
        return page(request, "revoked.html", session=session, grant_id=gid, still=still,
                    who=session["who"])  # fmt: skip

    async def reconcile(request: Request, form: Any, session: Session) -> Response:
        eid = str(form.get("effect_id") or "")
        evidence = str(form.get("evidence") or "").strip()
        if not evidence:
            return message(request, 400, "Refused", "Reconcile needs the evidence text.", session)
        await run_in_threadpool(store.reconcile, eid, evidence, session["who"])
        flash(request, f"Reconciled {eid} as {session['who']}")
        return RedirectResponse(f"/effects/{quote(eid, safe='')}", status_code=303)

    async def home(request: Request, session: Session) -> Response:
        return RedirectResponse("/approvals", status_code=303)

    async def not_found(request: Request, exc: Exception) -> Response:
        status = getattr(exc, "status_code", 404)
        session = await current(request)
        if status == 405:
            return message(request, 405, "Method not allowed", "Actions are POST forms.", session)
        return message(request, 404, "Not found", f"No page at {request.url.path}.", session)

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
        Route("/audit", guarded(audit_page)),
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
