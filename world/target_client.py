"""Clients for the local payment target (world/target.py).

``LocalRefunds`` is the effect target the runtime calls (docs/design.md#send-deadline, 5.7): ``apply``, ``query``,
``capture`` and ``validate_premises``, plus the attributes the runtime reads with ``getattr``
(``tier``, ``queryable``, ``send_timeout``, ``settle_margin``, ``premise_max_age``,
``dedup_window``). ``TargetAdmin`` drives the admin endpoints for scenarios and the oracle.

Premises are ``{payment, eligible, refunded_by_others}`` (docs/design.md#refinements):

- ``refunded_by_others``: the payment's ``refunded_total`` minus the refunds carrying our own key
  (``key == effect_id``). Hand refunds (no key) and refunds under other keys count as others'.
  Our own refunds can only be told apart where the target has a lookup (tiers 1 and 2, unless
  ``queryable=False``); otherwise ``refunded_by_others`` is the whole ``refunded_total``.
- ``eligible``: ``paid - refunded_by_others > 0``. With no effect id this is
  ``paid - refunded_total > 0``; excluding our own refunds keeps a refund that already landed from
  making its own premises look stale at recovery.
"""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

# the runtime's own definite-refusal error: a client here is an effect target of the runtime
from interlock_runtime.errors import TargetRejected


class NoLookup(RuntimeError):
    """The target cannot be queried for an effect (tier 3, or queryable=False)."""


# Status codes that are not a definite refusal: 409 (the key is in use by a request still being
# processed) and 429 (rate limited) may still be followed by the effect landing.
_NOT_DEFINITE = (409, 429)


class _Http:
    def __init__(self, url: str) -> None:
        self.url = url.rstrip("/")

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        headers: dict[str, str] | None = None,
        timeout: float = 10.0,
    ) -> tuple[int, Any]:
        """Return (status, decoded JSON) for any HTTP status; network errors propagate.

        A urllib URLError that wraps an OS-level error (timeout, refused) is unwrapped so that
        callers see the underlying exception (e.g. TimeoutError, ConnectionRefusedError)."""
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.url + path, data=data, method=method)
        if data is not None:
            req.add_header("Content-Type", "application/json")
        for k, v in (headers or {}).items():
            req.add_header(k, v)
        try:
            with urllib.request.urlopen(req, timeout=timeout) as resp:
                return resp.status, _decode(resp.read())
        except urllib.error.HTTPError as e:
            with e:
                return e.code, _decode(e.read())
        except urllib.error.URLError as e:
            if isinstance(e.reason, BaseException):
                raise e.reason from e
            raise


def _decode(raw: bytes) -> Any:
    try:
        return json.loads(raw) if raw else None
    except ValueError:
        return raw.decode(errors="replace")


class TargetHTTPError(RuntimeError):
    """A non-definite HTTP failure (5xx, 409, 429, or an unexpected status)."""

    def __init__(self, status: int, body: Any, what: str) -> None:
        self.status, self.body = status, body
        super().__init__(f"{what} -> HTTP {status}: {body}")


class LocalRefunds:
    """The refund effect on one payment of the local target, as the runtime sees it."""

    name = "local-refunds"
    action = "refund"  # what a grant must allow (the runtime's default is the target's name)

    def __init__(
        self,
        url: str,
        payment: str,
        tier: int,
        *,
        send_timeout: float = 3.0,
        settle_margin: float = 5.0,
        premise_max_age: float = 5.0,
        dedup_window: float = float("inf"),
        queryable: bool | None = None,
    ) -> None:
        if tier not in (1, 2, 3):
            raise ValueError(f"tier must be 1, 2 or 3, not {tier!r}")
        self.url = url.rstrip("/")
        self.payment = payment
        self.tier = tier
        # Tier 1 (Stripe-like) and tier 2 answer lookups; override for S04's non-queryable variant.
        self.queryable = tier in (1, 2) if queryable is None else bool(queryable)
        self.send_timeout = float(send_timeout)
        self.settle_margin = float(settle_margin)
        self.premise_max_age = float(premise_max_age)
        self.dedup_window = float(dedup_window)
        self._http = _Http(self.url)

    def __repr__(self) -> str:
        return f"LocalRefunds({self.url!r}, {self.payment!r}, tier={self.tier})"

    # -- the effect

    def body_for(self, effect_id: str, payload: dict) -> dict:
        """The POST /refunds body for an effect: deterministic, so a tier-1 resend replays."""
        metadata = dict(payload.get("metadata") or {})
        metadata["key"] = effect_id
        return {
            "payment": payload.get("payment", self.payment),
            "amount": payload["amount"],
            "metadata": metadata,
        }

    @staticmethod
    def who_headers(worker: str | None, epoch: int | str | None) -> dict[str, str]:
        """Who sent a request (the worker, its epoch), for the target's access log."""
        headers = {"X-ILR-Worker": str(worker if worker is not None else f"pid:{os.getpid()}")}
        if epoch is not None:
            headers["X-ILR-Epoch"] = str(epoch)
        return headers

    def apply(
        self,
        effect_id: str,
        payload: dict,
        *,
        worker: str | None = None,
        epoch: int | str | None = None,
        timeout: float | None = None,
    ) -> dict:
        """POST /refunds. Tier 1 sends Idempotency-Key: effect_id; tiers 2 and 3 carry the key
        in metadata only. A 4xx other than 409/429 raises TargetRejected (definite: nothing
        happened); timeouts, connection errors and 5xx propagate (the outcome is unknown)."""
        headers = self.who_headers(worker, epoch)
        if self.tier == 1:
            headers["Idempotency-Key"] = effect_id
        status, body = self._http.request(
            "POST",
            "/refunds",
            self.body_for(effect_id, payload),
            headers=headers,
            timeout=self.send_timeout if timeout is None else timeout,
        )
        if status == 200 and isinstance(body, dict):
            return body
        if 400 <= status < 500 and status not in _NOT_DEFINITE:
            reason = body.get("error") if isinstance(body, dict) else None
            raise TargetRejected(reason or f"http_{status}", {"status": status, "body": body})
        raise TargetHTTPError(status, body, f"POST /refunds {effect_id}")

    def query(self, effect_id: str, payload: dict | None = None) -> dict | None:
        """The refund applied under effect_id, or None. Raises NoLookup when not queryable.

        When a tier-2 target applied the effect more than once, the first refund is returned
        with ``count`` set to the number found."""
        if not self.queryable or self.tier == 3:
            raise NoLookup(f"{self!r} has no lookup (tier {self.tier})")
        found = self._refunds(effect_id, payload)
        if not found:
            return None
        first = dict(found[0])
        first["count"] = len(found)
        return first

    def _refunds(self, key: str, payload: dict | None = None) -> list[dict]:
        payment = (payload or {}).get("payment", self.payment)
        qs = urllib.parse.urlencode({"payment": payment, "key": key})
        status, body = self._http.request("GET", f"/refunds?{qs}", timeout=self.send_timeout)
        if status == 404 and isinstance(body, dict) and body.get("error") == "no_lookup":
            raise NoLookup(f"{self!r}: the target answered no_lookup")
        if status != 200 or not isinstance(body, list):
            raise TargetHTTPError(status, body, f"GET /refunds key={key}")
        return body

    # -- premises

    def payment_state(self) -> dict:
        """GET /payments/{id}: {id, paid, refunded_total}."""
        pid = urllib.parse.quote(self.payment, safe="")
        status, body = self._http.request("GET", f"/payments/{pid}", timeout=self.send_timeout)
        if status != 200 or not isinstance(body, dict):
            raise TargetHTTPError(status, body, f"GET /payments/{self.payment}")
        return body

    def capture(self, effect_id: str | None = None) -> dict:
        """The premises now: {payment, eligible, refunded_by_others} (see the module doc)."""
        p = self.payment_state()
        ours = 0
        # Our own refunds can be told apart only where the target answers lookups (a
        # non-queryable tier-1 target, S04, is read like tier 3).
        if effect_id is not None and self.queryable and self.tier in (1, 2):
            ours = sum(r["amount"] for r in self._refunds(effect_id))
        others = p["refunded_total"] - ours
        return {
            "payment": self.payment,
            "eligible": p["paid"] - others > 0,
            "refunded_by_others": others,
        }

    def validate_premises(self, premises: dict | None, effect_id: str) -> list[str]:
        """Re-read the payment and list what no longer holds (empty: the premises still hold)."""
        premises = premises or {}
        now = self.capture(effect_id)
        out = []
        if premises.get("payment") not in (None, self.payment):
            out.append(f"payment changed: {premises['payment']} -> {self.payment}")
        if "refunded_by_others" in premises:
            was = premises["refunded_by_others"]
            if was != now["refunded_by_others"]:
                out.append(f"refunded_by_others changed: {was} -> {now['refunded_by_others']}")
        if not now["eligible"] and premises.get("eligible", True):
            out.append(f"payment {self.payment} is no longer eligible")
        return out


class TargetAdmin:
    """The target's admin and read endpoints, for scenarios, tests and the oracle."""

    def __init__(self, url: str, timeout: float = 10.0) -> None:
        self.url = url.rstrip("/")
        self.timeout = timeout
        self._http = _Http(self.url)

    def _call(self, method: str, path: str, body: Any = None) -> Any:
        status, reply = self._http.request(method, path, body, timeout=self.timeout)
        if status != 200:
            raise TargetHTTPError(status, reply, f"{method} {path}")
        return reply

    def create_payment(self, payment: str, paid: int) -> dict:
        return self._call("POST", "/admin/payments", {"id": payment, "paid": paid})

    def hand_refund(self, payment: str, amount: int) -> dict:
        return self._call("POST", "/admin/hand_refund", {"payment": payment, "amount": amount})

    def prune_keys(self) -> dict:
        """EMULATED: forget stored idempotency keys (stands in for Stripe's 24 h pruning)."""
        return self._call("POST", "/admin/prune_keys", {})

    def set_delay(self, ms: float, count: int | None = None) -> dict:
        """Service delay for POST /refunds; with ``count`` only the next ``count`` POSTs."""
        body: dict[str, Any] = {"ms": ms}
        if count is not None:
            body["count"] = int(count)
        return self._call("POST", "/admin/delay", body)

    def payment(self, payment: str) -> dict:
        return self._call("GET", f"/payments/{urllib.parse.quote(payment, safe='')}")

    def log(self, since: int = 0, path: str | None = None, method: str | None = None) -> list[dict]:
        """The access log (entries after id ``since``), optionally for one path and method."""
        q: dict[str, Any] = {"since": since}
        if path:
            q["path"] = path
        if method:
            q["method"] = method
        return self._call("GET", f"/admin/log?{urllib.parse.urlencode(q)}")

    def ledger(self) -> dict:
        return self._call("GET", "/admin/ledger")

    def config(self) -> dict:
        return self._call("GET", "/admin/config")
