"""The local payment target (docs/design.md#test-world, docs/design.md#refund-case): an HTTP server with a SQLite ledger.

One process per run, its tier fixed at start:

- tier 1 dedupes ``POST /refunds`` on the ``Idempotency-Key`` header with Stripe semantics: the
  same key with the same params replays the stored refund (``replayed: true``); the same key with
  different params is ``400 {"error": "key_reused"}``; a key whose first request is still being
  processed is ``409 {"error": "idempotency_key_in_use"}``. Only successful results are stored.
- tier 2 does not dedupe (every POST applies) but can be queried: ``GET /refunds?payment=&key=``.
- tier 3 neither dedupes nor answers lookups (``GET /refunds`` is 404).

A refund's ``key`` is its ``Idempotency-Key`` header, else ``metadata.key`` (how a client marks
its refunds at tiers 2 and 3). A refund larger than ``paid - refunded_total`` is
``400 {"error": "insufficient_funds"}``, a definite failure.

Admin: ``POST /admin/payments {id, paid}``, ``POST /admin/hand_refund {payment, amount}`` (a
refund made by a person, no key), ``POST /admin/prune_keys`` (EMULATED: forgets every stored
idempotency key, standing in for Stripe's 24 h pruning), ``POST /admin/delay {ms[, count]}`` (service delay
inside each ``POST /refunds``, after arrival and before the ledger write; with ``count`` only the
next ``count`` POSTs are delayed), ``Target(lookup=False)`` (a tier-1/2 target without lookups),
``GET /admin/log[?since=ID&path=P&method=M]``, ``GET /admin/ledger``, ``GET /admin/config``.

Access log: every request gets a row at arrival (``time.time()`` once the request line and
headers are read), ``start`` when its body has been read and processing begins (the service delay
runs after it), and ``end`` once the ledger write (or the refusal) is decided, just before the
response is written. It records method, path, query, key, payload, status, response and the
``X-ILR-Worker`` / ``X-ILR-Epoch`` headers. The ledger (``refunds`` table) is ground truth.

Stripe-compatible subset (EMULATED: Stripe cannot be reached from this machine, docs/design.md#emulated). The
same ledger, tier and idempotency store also answer the part of Stripe's v1 API a refund needs, so
the official ``stripe`` SDK can be pointed at this server (world/stripe_target.py):

- Every ``/v1/`` request needs ``Authorization: Bearer <key>`` (or HTTP basic with the key as the
  user name); any test-mode key (``sk_test_...``, ``rk_test_...``) is accepted, anything else is
  ``401``. Keys are never stored or logged (the access log records no other headers than the two
  ``X-ILR-*`` ones).
- ``POST /v1/refunds``, form-encoded: ``payment_intent`` (a ledger payment id), ``amount`` (cents,
  required in this subset) and ``metadata[...]``. Tier 1 honours ``Idempotency-Key`` with Stripe
  semantics: the same params replay the stored refund with header ``Idempotent-Replayed: true``;
  different params are ``400`` with ``type: idempotency_error``; a key whose first request is still
  being processed is ``409`` (code ``idempotency_key_in_use``). Tiers 2 and 3 apply every POST.
  The refund's ``key`` is the ``Idempotency-Key`` header, else ``metadata[key]``.
- ``GET /v1/refunds?payment_intent=&metadata[k]=v&limit=&starting_after=``: a Stripe list object
  (``object: "list"``, ``data`` newest first, ``has_more``). Filtering by metadata is an EMULATED
  extension (Stripe's list has no such filter). ``GET /v1/refunds/{id}``. Tier 3: both ``404``
  (code ``no_lookup``).
- ``GET /v1/payment_intents/{id}[?expand[]=latest_charge]``: the ledger payment as a succeeded
  PaymentIntent (``amount_received`` = paid); its expanded ``latest_charge`` carries
  ``amount_refunded``.
- Objects are Stripe-shaped (``object: "refund"``, ``id: re_...``, ``status: "succeeded"``), errors
  are ``{"error": {"type", "code", "message", "param"}}``, and every ``/v1/`` response carries
  ``X-Emulated: stripe-subset``. Only successful results are stored under a key (Stripe also
  replays stored errors; here a refused request can be retried with the same key).

CLI: ``python -m world.target --tier N [--port 0] [--db PATH] [--delay-ms N]
[--payment ID:PAID ...]`` prints one JSON line ``{"port", "url", "tier", "db"}`` and serves
until SIGTERM or SIGINT. Binds loopback only.
"""

from __future__ import annotations

import argparse
import base64
import ipaddress
import json
import os
import re
import signal
import sqlite3
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, parse_qsl, urlsplit

from world.http_service import serve_in_thread, shut_down

EMULATED = {
    "prune_keys": "EMULATED: POST /admin/prune_keys forgets stored idempotency keys at once, "
    "standing in for Stripe pruning keys after 24 h",
    "stripe": "EMULATED: the Stripe-compatible subset under /v1/ (refunds, payment intents) is "
    "served by this local target; Stripe itself cannot be reached from this machine",
    "stripe_metadata_filter": "EMULATED extension: GET /v1/refunds filters by metadata[...], "
    "which Stripe's list endpoint does not offer",
}
STRIPE_HEADER = ("X-Emulated", "stripe-subset")
_TEST_KEY_PREFIXES = ("sk_test_", "rk_test_")

_SCHEMA = """
create table if not exists meta (name text primary key, value text not null);
create table if not exists payments (
  id text primary key, paid integer not null, created real not null);
create table if not exists refunds (
  seq integer primary key autoincrement,
  id text unique not null,
  payment text not null references payments(id),
  amount integer not null,
  metadata text not null,
  key text,
  source text not null,            -- 'api' or 'hand'
  created real not null,
  log_id integer);
create index if not exists refunds_by_payment on refunds (payment, key);
create table if not exists idem_keys (
  key text primary key, params text not null, refund_id text not null, created real not null);
create table if not exists access_log (
  id integer primary key autoincrement,
  arrival real not null, start real, "end" real,
  method text not null, path text not null, query text, key text, payload text,
  status integer, response text, worker text, epoch text);
"""


class _Reply(Exception):
    """Raised inside a handler to answer with a status and a JSON body."""

    def __init__(self, status: int, body: Any, headers: dict[str, str] | None = None) -> None:
        super().__init__(status)
        self.status, self.body, self.headers = status, body, dict(headers or {})


def _bad(error: str, detail: str, status: int = 400) -> _Reply:
    return _Reply(status, {"error": error, "detail": detail})


def _stripe_error(
    status: int, code: str | None, message: str, *, kind: str = "invalid_request_error",
    param: str | None = None,
) -> _Reply:  # fmt: skip
    """A Stripe-shaped error: ``{"error": {"type", "code", "message", "param"}}``."""
    err: dict[str, Any] = {"type": kind, "message": message}
    if code is not None:
        err["code"] = code
    if param is not None:
        err["param"] = param
    return _Reply(status, {"error": err})


_FORM_KEY = re.compile(r"([^\[\]]+)\[([^\[\]]*)\]")


def _form_decode(text: str) -> dict[str, Any]:
    """Stripe's form encoding, one level deep: ``a=1``, ``metadata[k]=v`` (a dict) and
    ``expand[0]=x`` / ``expand[]=x`` (a list)."""
    out: dict[str, Any] = {}
    for k, v in parse_qsl(text, keep_blank_values=True):
        m = _FORM_KEY.fullmatch(k)
        if m is None:
            if "[" in k or "]" in k:
                raise _stripe_error(400, "parameter_invalid", f"cannot parse parameter {k!r}")
            out[k] = v
            continue
        name, sub = m.groups()
        if sub == "" or sub.isdigit():
            seq = out.setdefault(name, [])
            if not isinstance(seq, list):
                raise _stripe_error(400, "parameter_invalid", f"{name} is both a list and not")
            seq.append(v)
        else:
            d = out.setdefault(name, {})
            if not isinstance(d, dict):
                raise _stripe_error(400, "parameter_invalid", f"{name} is both a hash and not")
            d[sub] = v
    return out


def _stripe_auth(header: str | None) -> None:
    """Accept any test-mode key (Bearer, or basic with the key as the user). The key is read
    here and dropped: it is never stored, logged or echoed."""
    key = None
    if header:
        scheme, _, value = header.strip().partition(" ")
        if scheme.lower() == "bearer":
            key = value.strip()
        elif scheme.lower() == "basic":
            try:
                key = base64.b64decode(value.strip(), validate=True).decode().partition(":")[0]
            except (ValueError, UnicodeDecodeError):
                key = None
    if not key:
        raise _stripe_error(
            401, None, "You did not provide an API key: send Authorization: Bearer sk_test_..."
        )
    if not key.startswith(_TEST_KEY_PREFIXES):
        raise _stripe_error(
            401, "api_key_invalid", "Invalid API key: this EMULATED target accepts test-mode "
            "keys only (sk_test_... or rk_test_...)",
        )  # fmt: skip


def _require_loopback(host: str) -> None:
    if host == "localhost":
        return
    try:
        if ipaddress.ip_address(host.strip("[]")).is_loopback:
            return
    except ValueError:
        pass
    raise ValueError(f"the target binds loopback only, not {host!r}")


def _canon(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"))


def _int_amount(v: Any, what: str = "amount") -> int:
    if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
        raise _bad("invalid_request", f"{what} must be a positive integer (cents), got {v!r}")
    return v


class Ledger:
    """The SQLite ledger and access log. All access goes through one lock (one writer)."""

    def __init__(self, path: str, tier: int) -> None:
        self.path = path
        self.tier = tier
        self.lock = threading.Lock()
        self.db = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
        self.db.row_factory = sqlite3.Row
        self.db.execute("pragma journal_mode=wal")
        self.db.execute("pragma synchronous=full")
        self.db.executescript(_SCHEMA)
        row = self.db.execute("select value from meta where name = 'tier'").fetchone()
        if row is None:
            self.db.execute("insert into meta values ('tier', ?)", (str(tier),))
        elif int(row[0]) != tier:
            raise ValueError(f"ledger {path} belongs to a tier {row[0]} target, not tier {tier}")
        self.in_flight: set[str] = set()

    def close(self) -> None:
        with self.lock:
            self.db.close()

    # -- access log

    def log_arrival(
        self, arrival: float, method: str, path: str, query: str, worker: Any, epoch: Any
    ) -> int:
        with self.lock:
            cur = self.db.execute(
                "insert into access_log (arrival, method, path, query, worker, epoch)"
                " values (?, ?, ?, ?, ?, ?)",
                (arrival, method, path, query or None, worker, epoch),
            )
            return int(cur.lastrowid)

    def log_update(self, log_id: int, **cols: Any) -> None:
        if not cols:
            return
        names = ", ".join(f'"{k}" = ?' for k in cols)
        with self.lock:
            self.db.execute(f"update access_log set {names} where id = ?", (*cols.values(), log_id))

    def access_log(
        self, since: int = 0, path: str | None = None, method: str | None = None
    ) -> list[dict]:
        sql = "select * from access_log where id > ?"
        args: list[Any] = [since]
        if path:
            sql += " and path = ?"
            args.append(path)
        if method:
            sql += " and method = ?"
            args.append(method.upper())
        with self.lock:
            rows = self.db.execute(sql + " order by id", args).fetchall()
        out = []
        for r in rows:
            d = dict(r)
            for k in ("payload", "response"):
                if d[k] is not None:
                    try:
                        d[k] = json.loads(d[k])
                    except ValueError:
                        pass
            out.append(d)
        return out

    # -- ledger

    @staticmethod
    def _refund(r: sqlite3.Row, replayed: bool = False) -> dict:
        return {
            "id": r["id"],
            "payment": r["payment"],
            "amount": r["amount"],
            "metadata": json.loads(r["metadata"]),
            "key": r["key"],
            "created": r["created"],
            "replayed": replayed,
            "source": r["source"],
        }

    def _payment(self, pid: str) -> dict | None:
        p = self.db.execute("select id, paid from payments where id = ?", (pid,)).fetchone()
        if p is None:
            return None
        total = self.db.execute(
            "select coalesce(sum(amount), 0) from refunds where payment = ?", (pid,)
        ).fetchone()[0]
        return {"id": p["id"], "paid": p["paid"], "refunded_total": total}

    def payment(self, pid: str) -> dict | None:
        with self.lock:
            return self._payment(pid)

    def create_payment(self, pid: str, paid: int) -> dict:
        with self.lock:
            existing = self._payment(pid)
            if existing is not None:
                if existing["paid"] != paid:
                    raise _bad("payment_exists", f"{pid} exists with paid {existing['paid']}", 409)
                return existing
            self.db.execute("insert into payments values (?, ?, ?)", (pid, paid, time.time()))
            return self._payment(pid)  # type: ignore[return-value]

    def _insert_refund(
        self, payment: str, amount: int, metadata: dict, key: str | None, source: str, log_id: int
    ) -> sqlite3.Row:
        p = self._payment(payment)
        if p is None:
            raise _bad("no_such_payment", f"no payment {payment!r}", 404)
        available = p["paid"] - p["refunded_total"]
        if amount > available:
            raise _bad(
                "insufficient_funds",
                f"refund of {amount} exceeds what is left on {payment}"
                f" (paid {p['paid']}, refunded {p['refunded_total']})",
            )
        self.db.execute("begin immediate")
        try:
            cur = self.db.execute(
                "insert into refunds (id, payment, amount, metadata, key, source, created, log_id)"
                " values ('', ?, ?, ?, ?, ?, ?, ?)",
                (payment, amount, _canon(metadata), key, source, time.time(), log_id),
            )
            seq = cur.lastrowid
            self.db.execute("update refunds set id = ? where seq = ?", (f"re_{seq:06d}", seq))
            if source == "api" and key is not None and self.tier == 1:
                self.db.execute(
                    "insert into idem_keys values (?, ?, ?, ?)",
                    (key, _canon([payment, amount, metadata]), f"re_{seq:06d}", time.time()),
                )
            self.db.execute("commit")
        except BaseException:
            self.db.execute("rollback")
            raise
        return self.db.execute("select * from refunds where seq = ?", (seq,)).fetchone()

    def claim_key(self, key: str) -> None:
        """Tier 1: refuse a key whose first request is still in progress (Stripe's 409)."""
        with self.lock:
            if key in self.in_flight:
                raise _bad(
                    "idempotency_key_in_use",
                    "another request with this Idempotency-Key is still being processed",
                    409,
                )
            self.in_flight.add(key)

    def release_key(self, key: str) -> None:
        with self.lock:
            self.in_flight.discard(key)

    def refund(
        self, payment: str, amount: int, metadata: dict, header_key: str | None, log_id: int
    ) -> dict:
        key = header_key if header_key is not None else metadata.get("key")
        key = None if key is None else str(key)
        with self.lock:
            if self.tier == 1 and header_key is not None:
                stored = self.db.execute(
                    "select params, refund_id from idem_keys where key = ?", (header_key,)
                ).fetchone()
                if stored is not None:
                    if stored["params"] != _canon([payment, amount, metadata]):
                        raise _bad(
                            "key_reused",
                            "this Idempotency-Key was used with different parameters",
                        )
                    r = self.db.execute(
                        "select * from refunds where id = ?", (stored["refund_id"],)
                    ).fetchone()
                    return self._refund(r, replayed=True)
            return self._refund(self._insert_refund(payment, amount, metadata, key, "api", log_id))

    def hand_refund(self, payment: str, amount: int, log_id: int) -> dict:
        with self.lock:
            r = self._insert_refund(payment, amount, {"by": "hand"}, None, "hand", log_id)
            return self._refund(r)

    def find_refunds(self, payment: str | None, key: str | None) -> list[dict]:
        sql, args = "select * from refunds where 1 = 1", []
        if payment is not None:
            sql += " and payment = ?"
            args.append(payment)
        if key is not None:
            sql += " and key = ?"
            args.append(key)
        with self.lock:
            return [self._refund(r) for r in self.db.execute(sql + " order by seq", args)]

    def prune_keys(self) -> int:
        with self.lock:
            return self.db.execute("delete from idem_keys").rowcount

    def ledger(self) -> dict:
        with self.lock:
            pids = [r[0] for r in self.db.execute("select id from payments order by id")]
            payments = [self._payment(p) for p in pids]
            refunds = [
                self._refund(r) for r in self.db.execute("select * from refunds order by seq")
            ]
            keys = [dict(r) for r in self.db.execute("select * from idem_keys order by created")]
        return {
            "tier": self.tier,
            "payments": payments,
            "refunds": refunds,
            "idempotency_keys": keys,
        }


class _Handler(BaseHTTPRequestHandler):
    server_version = "ilr-target/1"
    server: _TargetHTTPServer

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
        pass

    def do_GET(self) -> None:  # noqa: N802
        self._handle("GET")

    def do_POST(self) -> None:  # noqa: N802
        self._handle("POST")

    def _handle(self, method: str) -> None:
        target = self.server.target
        with target._busy_cond:
            target._busy += 1
        try:
            self._handle_one(method, target)
        except sqlite3.ProgrammingError:
            pass  # the target was closed while this request was still in progress
        finally:
            with target._busy_cond:
                target._busy -= 1
                target._busy_cond.notify_all()

    def _handle_one(self, method: str, target: Target) -> None:
        ledger = target.ledger
        arrival = time.time()
        url = urlsplit(self.path)
        path = url.path.rstrip("/") or "/"
        stripe_api = path.startswith("/v1/")
        query = {k: v[-1] for k, v in parse_qs(url.query).items()}
        worker = self.headers.get("X-ILR-Worker")
        epoch = self.headers.get("X-ILR-Epoch")
        log_id = ledger.log_arrival(arrival, method, path, url.query, worker, epoch)
        if target.on_arrival is not None:
            target.on_arrival(arrival, method, path)
        key = self.headers.get("Idempotency-Key")
        payload: Any = None
        claimed: str | None = None
        headers: dict[str, str] = {}
        try:
            try:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                if stripe_api:
                    payload = _form_decode(raw.decode()) if raw else None
                else:
                    payload = json.loads(raw) if raw else None
            except (ValueError, UnicodeDecodeError) as e:
                ledger.log_update(log_id, start=time.time())
                if stripe_api:
                    raise _stripe_error(
                        400, "parameter_invalid", f"body not readable: {e}"
                    ) from None
                raise _bad("invalid_request", f"body is not JSON: {e}") from None
            except _Reply:
                ledger.log_update(log_id, start=time.time())
                raise
            if stripe_api and method == "GET":
                try:
                    payload_q = _form_decode(url.query)
                except _Reply:
                    payload_q = {}
                meta = payload_q.get("metadata")
                if key is None and isinstance(meta, dict) and meta.get("key") is not None:
                    key = str(meta["key"])
            if key is None and method == "GET":
                key = query.get("key")
            if key is None and isinstance(payload, dict):
                meta = payload.get("metadata")
                if isinstance(meta, dict) and meta.get("key") is not None:
                    key = str(meta["key"])
            ledger.log_update(
                log_id,
                start=time.time(),
                key=key,
                payload=None if payload is None else _canon(payload),
            )
            if stripe_api:
                _stripe_auth(self.headers.get("Authorization"))
                ctype = (self.headers.get("Content-Type") or "").split(";")[0].strip().lower()
                if (
                    method == "POST"
                    and payload is not None
                    and ctype not in ("application/x-www-form-urlencoded", "")
                ):
                    raise _stripe_error(400, "parameter_invalid",
                                        "this API takes form-encoded bodies "
                                        "(application/x-www-form-urlencoded)")  # fmt: skip
                status = 200
                body, headers = target.stripe_route(
                    method, path, url.query, payload, self.headers.get("Idempotency-Key"), log_id
                )
            elif method == "POST" and path == "/refunds":
                header_key = self.headers.get("Idempotency-Key")
                if ledger.tier == 1 and header_key is not None:
                    ledger.claim_key(header_key)
                    claimed = header_key
                status, body = 200, target.post_refund(payload, header_key, log_id)
            else:
                status, body = 200, target.route(method, path, query, payload, log_id)
        except _Reply as r:
            status, body, headers = r.status, r.body, r.headers
        except Exception as e:  # noqa: BLE001 - the server must answer and log every request
            status = 500
            if stripe_api:
                body = {"error": {"type": "api_error", "message": f"{type(e).__name__}: {e}"}}
            else:
                body = {"error": "internal", "detail": f"{type(e).__name__}: {e}"}
        finally:
            if claimed is not None:
                ledger.release_key(claimed)
        data = json.dumps(body).encode()
        # An admin read's answer is not kept: an /admin/log answer holds every earlier answer,
        # so keeping it doubled the ledger file per call (800 MB after 19 reads; the state
        # machine's checks then timed out).
        admin_read = method == "GET" and path.startswith("/admin/")
        ledger.log_update(log_id, end=time.time(), status=status,
                          response=None if admin_read else data.decode())  # fmt: skip
        if stripe_api:
            headers = {STRIPE_HEADER[0]: STRIPE_HEADER[1], "Request-Id": f"req_{log_id:08d}",
                       **headers}  # fmt: skip
        try:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            for name, value in headers.items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(data)
        except OSError:
            pass  # the client went away; the ledger and the log already hold the outcome


def _stripe_refund(r: dict) -> dict:
    """A ledger refund as a Stripe Refund object (metadata values are strings in Stripe)."""
    return {
        "id": r["id"],
        "object": "refund",
        "amount": r["amount"],
        "balance_transaction": None,
        "charge": f"ch_{r['payment']}",
        "created": int(r["created"]),
        "currency": "usd",
        "metadata": {
            str(k): v if isinstance(v, str) else json.dumps(v)
            for k, v in (r["metadata"] or {}).items()
        },  # fmt: skip
        "payment_intent": r["payment"],
        "reason": None,
        "receipt_number": None,
        "source_transfer_reversal": None,
        "status": "succeeded",
        "transfer_reversal": None,
    }


def _stripe_payment_intent(p: dict, expand_charge: bool) -> dict:
    """A ledger payment as a succeeded PaymentIntent; its charge carries amount_refunded."""
    charge: Any = f"ch_{p['id']}"
    if expand_charge:
        charge = {
            "id": charge, "object": "charge", "amount": p["paid"], "amount_captured": p["paid"],
            "amount_refunded": p["refunded_total"], "refunded": p["refunded_total"] >= p["paid"],
            "captured": True, "paid": True, "currency": "usd", "payment_intent": p["id"],
            "status": "succeeded", "livemode": False, "metadata": {},
        }  # fmt: skip
    return {
        "id": p["id"], "object": "payment_intent", "amount": p["paid"],
        "amount_received": p["paid"], "amount_capturable": 0, "currency": "usd",
        "status": "succeeded", "latest_charge": charge, "livemode": False, "metadata": {},
    }  # fmt: skip


def _stripe_from_ledger(e: _Reply, payment: str) -> _Reply:
    """The ledger's own refusals, as Stripe would word them."""
    error = e.body.get("error") if isinstance(e.body, dict) else None
    detail = e.body.get("detail", "") if isinstance(e.body, dict) else str(e.body)
    if error == "key_reused":
        return _stripe_error(400, None, "Keys for idempotent requests can only be used with the "
                             "same parameters they were first used with.",
                             kind="idempotency_error")  # fmt: skip
    if error == "no_such_payment":
        return _stripe_error(400, "resource_missing", f"No such payment_intent: '{payment}'",
                             param="payment_intent")  # fmt: skip
    if error == "insufficient_funds":
        return _stripe_error(400, "amount_too_large", detail, param="amount")
    return _stripe_error(e.status, error, detail)


class _TargetHTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    # listen() backlog: socketserver's default of 5 overflows under the bench's 64
    # clients per worker (the kernel drops the SYN; the client retries after 1 s, 3 s...)
    request_queue_size = 128
    target: Target


class Target:
    """The payment target: a loopback HTTP server over a SQLite ledger. ``start()`` serves in a
    background thread; the CLI runs it in its own process (one per run)."""

    def __init__(
        self,
        tier: int,
        *,
        db: str | None = None,
        host: str = "127.0.0.1",
        port: int = 0,
        delay_ms: float = 0,
        lookup: bool = True,
    ) -> None:
        if tier not in (1, 2, 3):
            raise ValueError(f"tier must be 1, 2 or 3, not {tier!r}")
        _require_loopback(host)
        if delay_ms < 0:
            raise ValueError("delay_ms must be >= 0")
        self.tier = tier
        self.host, self.port = host, port
        self.delay_ms = float(delay_ms)
        # How many more POSTs get the service delay (None: every one); S08 delays one request.
        self.delay_count: int | None = None
        self._delay_lock = threading.Lock()
        # lookup=False: a tier-1/2 target that answers no lookups (S04's non-queryable variant).
        self.lookup = bool(lookup) and tier in (1, 2)
        self._own_db = db is None
        if db is None:
            fd, db = tempfile.mkstemp(prefix="ilr-target-", suffix=".sqlite")
            os.close(fd)
        self.db_path = db
        self.ledger = Ledger(db, tier)
        self._http: _TargetHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._busy = 0
        self._busy_cond = threading.Condition()
        self.url = ""
        # Called as on_arrival(arrival, method, path) from the handler thread, right after the
        # access log row: a harness in this process can anchor its timing on an arrival.
        self.on_arrival: Callable[[float, str, str], None] | None = None

    def start(self) -> Target:
        if self._http is not None:
            return self
        self._http = _TargetHTTPServer((self.host, self.port), _Handler)
        self._http.target = self
        self.port = self._http.server_address[1]
        self.url = f"http://{self.host}:{self.port}"
        self._thread = serve_in_thread(self._http)
        return self

    def stop(self) -> None:
        shut_down(self._http, self._thread)
        self._http = self._thread = None

    def close(self, drain: float = 3.0) -> None:
        """Stop serving, let requests in progress finish (up to ``drain`` seconds), close the
        ledger; a temp ledger this object made is deleted."""
        self.stop()
        with self._busy_cond:
            self._busy_cond.wait_for(lambda: self._busy == 0, drain)
        self.ledger.close()
        if self._own_db:
            for suffix in ("", "-wal", "-shm"):
                try:
                    os.unlink(self.db_path + suffix)
                except OSError:
                    pass

    def __enter__(self) -> Target:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def config(self) -> dict:
        return {
            "tier": self.tier,
            "dedupes": self.tier == 1,
            "lookup": self.lookup,
            "delay_ms": self.delay_ms,
            "delay_count": self.delay_count,
            "db": self.db_path,
            "emulated": EMULATED,
        }

    # -- request handling (called from handler threads)

    def post_refund(self, payload: Any, header_key: str | None, log_id: int) -> dict:
        if not isinstance(payload, dict):
            raise _bad("invalid_request", "body must be a JSON object {payment, amount, metadata}")
        payment = payload.get("payment")
        if not isinstance(payment, str) or not payment:
            raise _bad("invalid_request", "payment must be a non-empty string")
        amount = _int_amount(payload.get("amount"))
        metadata = payload.get("metadata") or {}
        if not isinstance(metadata, dict):
            raise _bad("invalid_request", "metadata must be an object")
        self._service_delay()
        return self.ledger.refund(payment, amount, metadata, header_key, log_id)

    def _service_delay(self) -> None:
        """The service delay: after arrival, before the ledger write (maybe only N times)."""
        with self._delay_lock:
            ms = self.delay_ms
            if self.delay_count is not None:
                if self.delay_count <= 0:
                    ms = 0.0
                else:
                    self.delay_count -= 1
        if ms > 0:
            time.sleep(ms / 1000.0)

    def route(self, method: str, path: str, query: dict, payload: Any, log_id: int) -> Any:
        body = payload if isinstance(payload, dict) else {}
        if method == "GET" and path == "/refunds":
            if not self.lookup:
                raise _bad("no_lookup", f"this tier {self.tier} target has no refund lookup", 404)
            return self.ledger.find_refunds(query.get("payment"), query.get("key"))
        if method == "GET" and path.startswith("/payments/"):
            pid = path[len("/payments/") :]
            p = self.ledger.payment(pid)
            if p is None:
                raise _bad("no_such_payment", f"no payment {pid!r}", 404)
            return p
        if method == "POST" and path == "/admin/payments":
            pid = body.get("id")
            if not isinstance(pid, str) or not pid:
                raise _bad("invalid_request", "id must be a non-empty string")
            return self.ledger.create_payment(pid, _int_amount(body.get("paid"), "paid"))
        if method == "POST" and path == "/admin/hand_refund":
            payment = body.get("payment")
            if not isinstance(payment, str):
                raise _bad("invalid_request", "payment must be a string")
            return self.ledger.hand_refund(payment, _int_amount(body.get("amount")), log_id)
        if method == "POST" and path == "/admin/prune_keys":
            return {"pruned": self.ledger.prune_keys(), "emulated": EMULATED["prune_keys"]}
        if method == "POST" and path == "/admin/delay":
            ms = body.get("ms")
            if isinstance(ms, bool) or not isinstance(ms, (int, float)) or ms < 0:
                raise _bad("invalid_request", f"ms must be a number >= 0, got {ms!r}")
            count = body.get("count")
            if count is not None and (isinstance(count, bool) or not isinstance(count, int)
                                      or count < 0):  # fmt: skip
                raise _bad("invalid_request", f"count must be an integer >= 0, got {count!r}")
            with self._delay_lock:
                self.delay_ms, self.delay_count = float(ms), count
            return {"delay_ms": self.delay_ms, "delay_count": self.delay_count}
        if method == "GET" and path == "/admin/log":
            since = int(query.get("since") or 0)
            return self.ledger.access_log(since, query.get("path"), query.get("method"))
        if method == "GET" and path == "/admin/ledger":
            return self.ledger.ledger()
        if method == "GET" and path == "/admin/config":
            return self.config()
        raise _bad("not_found", f"no route {method} {path}", 404)

    # -- the Stripe-compatible subset (EMULATED), called from handler threads

    def stripe_route(
        self, method: str, path: str, raw_query: str, form: Any, header_key: str | None,
        log_id: int,
    ) -> tuple[Any, dict[str, str]]:  # fmt: skip
        """Answer one ``/v1/`` request: (Stripe-shaped body, extra headers); errors raise."""
        if method == "POST" and path == "/v1/refunds":
            return self._stripe_create_refund(form or {}, header_key, log_id)
        query = _form_decode(raw_query)
        if method == "GET" and path == "/v1/refunds":
            return self._stripe_list_refunds(query), {}
        if method == "GET" and path.startswith("/v1/refunds/"):
            self._stripe_lookup_allowed()
            rid = path[len("/v1/refunds/") :]
            for r in self.ledger.find_refunds(None, None):
                if r["id"] == rid:
                    return _stripe_refund(r), {}
            raise _stripe_error(404, "resource_missing", f"No such refund: '{rid}'", param="id")
        if method == "GET" and path.startswith("/v1/payment_intents/"):
            pid = path[len("/v1/payment_intents/") :]
            p = self.ledger.payment(pid)
            if p is None:
                raise _stripe_error(404, "resource_missing", f"No such payment_intent: '{pid}'",
                                    param="intent")  # fmt: skip
            expand = query.get("expand") or []
            return _stripe_payment_intent(p, "latest_charge" in expand), {}
        raise _stripe_error(404, None, f"Unrecognized request URL ({method}: {path}); this "
                                       "EMULATED subset serves /v1/refunds and "
                                       "/v1/payment_intents/{id}")  # fmt: skip

    def _stripe_lookup_allowed(self) -> None:
        if not self.lookup:
            raise _stripe_error(404, "no_lookup", f"this tier {self.tier} target has no lookup")

    def _stripe_create_refund(
        self, form: dict, header_key: str | None, log_id: int
    ) -> tuple[dict, dict[str, str]]:
        unknown = sorted(set(form) - {"payment_intent", "amount", "metadata"})
        if unknown:
            raise _stripe_error(400, "parameter_unknown",
                                f"Received unknown parameter: {unknown[0]} (this EMULATED subset "
                                "takes payment_intent, amount, metadata)", param=unknown[0])  # fmt: skip
        pid = form.get("payment_intent")
        if not isinstance(pid, str) or not pid:
            raise _stripe_error(400, "parameter_missing", "Missing required param: "
                                "payment_intent.", param="payment_intent")  # fmt: skip
        amount = form.get("amount")
        if not isinstance(amount, str) or not amount.isdigit() or int(amount) <= 0:
            raise _stripe_error(400, "parameter_invalid_integer", "amount must be a positive "
                                f"integer (cents), got {amount!r}", param="amount")  # fmt: skip
        metadata = form.get("metadata") or {}
        if not isinstance(metadata, dict):
            raise _stripe_error(400, "parameter_invalid", "metadata must be a hash",
                                param="metadata")  # fmt: skip
        claimed = None
        if self.tier == 1 and header_key is not None:
            try:
                self.ledger.claim_key(header_key)
            except _Reply:
                raise _stripe_error(409, "idempotency_key_in_use", "There is currently another "
                                    "in-progress request using this Idempotent Key (that probably "
                                    "means you submitted twice, and the other request is still "
                                    "going through): please retry later.") from None  # fmt: skip
            claimed = header_key
        try:
            self._service_delay()
            try:
                r = self.ledger.refund(pid, int(amount), metadata, header_key, log_id)
            except _Reply as e:
                raise _stripe_from_ledger(e, pid) from None
        finally:
            if claimed is not None:
                self.ledger.release_key(claimed)
        headers = {"Idempotency-Key": header_key} if header_key is not None else {}
        if r["replayed"]:
            headers["Idempotent-Replayed"] = "true"
        return _stripe_refund(r), headers

    def _stripe_list_refunds(self, query: dict) -> dict:
        self._stripe_lookup_allowed()
        allowed = {"payment_intent", "charge", "metadata", "limit", "starting_after",
                   "ending_before", "expand"}  # fmt: skip
        unknown = sorted(set(query) - allowed)
        if unknown:
            raise _stripe_error(400, "parameter_unknown",
                                f"Received unknown parameter: {unknown[0]}", param=unknown[0])  # fmt: skip
        limit = query.get("limit", "10")
        if not isinstance(limit, str) or not limit.isdigit() or not 1 <= int(limit) <= 100:
            raise _stripe_error(400, "parameter_invalid_integer", "limit must be an integer "
                                "between 1 and 100", param="limit")  # fmt: skip
        payment = query.get("payment_intent")
        charge = query.get("charge")
        if isinstance(charge, str):
            payment = charge[3:] if charge.startswith("ch_") else charge
        metadata = query.get("metadata") or {}
        if not isinstance(metadata, dict):
            raise _stripe_error(400, "parameter_invalid", "metadata must be a hash")
        rows = [
            _stripe_refund(r)
            for r in reversed(self.ledger.find_refunds(payment, None))  # newest first
        ]
        rows = [r for r in rows if all(r["metadata"].get(k) == v for k, v in metadata.items())]
        for cursor, after in (("starting_after", True), ("ending_before", False)):
            rid = query.get(cursor)
            if rid is None:
                continue
            ids = [r["id"] for r in rows]
            if rid not in ids:
                raise _stripe_error(400, "resource_missing", f"No such refund: '{rid}'",
                                    param=cursor)  # fmt: skip
            i = ids.index(rid)
            rows = rows[i + 1 :] if after else rows[:i]
        n = int(limit)
        page = rows[:n] if query.get("ending_before") is None else rows[-n:]
        return {"object": "list", "data": page, "has_more": len(rows) > n, "url": "/v1/refunds"}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m world.target", description="Local payment target (tiers 1, 2, 3)."
    )
    ap.add_argument("--tier", type=int, required=True, choices=(1, 2, 3))
    ap.add_argument("--host", default="127.0.0.1", help="loopback address to bind")
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument(
        "--db", default=None, help="SQLite ledger file (default: a temp file, deleted at exit)"
    )
    ap.add_argument("--delay-ms", type=float, default=0.0, help="service delay per POST /refunds")
    ap.add_argument(
        "--payment", action="append", default=[], metavar="ID:PAID", help="create a payment"
    )
    args = ap.parse_args(argv)
    try:
        target = Target(
            args.tier, db=args.db, host=args.host, port=args.port, delay_ms=args.delay_ms
        )
        for spec in args.payment:
            pid, _, paid = spec.rpartition(":")
            target.ledger.create_payment(pid, int(paid))
        target.start()
    except (ValueError, OSError, _Reply) as e:
        print(f"target: {e}", file=sys.stderr)
        return 2
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    info = {"port": target.port, "url": target.url, "tier": target.tier, "db": target.db_path}
    print(json.dumps(info), flush=True)
    while not stop.wait(0.5):
        pass
    target.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
