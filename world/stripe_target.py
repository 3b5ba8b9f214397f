"""The Stripe refund target (EMULATED): the official ``stripe`` SDK pointed at the local target.

Stripe live mode cannot be reached from this machine (docs/design.md#emulated), so ``StripeRefunds`` talks to
the Stripe-compatible subset the local target serves under ``/v1/`` (world/target.py) through the
real SDK (``stripe.StripeClient`` with ``base_addresses={"api": url}`` and a test-mode key). Every
result it returns comes from that EMULATED subset, not from Stripe.

It implements the runtime's target interface exactly like ``LocalRefunds`` (name
``"stripe-refunds"``; tier 1 by default, the local target's tier otherwise):

- ``apply``: ``POST /v1/refunds`` (``payment_intent``, ``amount``, ``metadata[key] = effect_id``)
  with ``Idempotency-Key: effect_id``. A 4xx is a definite refusal (``TargetRejected``) except
  409 (the key is still in flight: the first request may yet land) and 429 (rate limited). 5xx,
  timeouts and connection errors propagate: the outcome is unknown and the runtime leaves the
  effect open for recovery.
- ``query``: the refunds listed with ``payment_intent`` and ``metadata[key] = effect_id`` (tiers 1
  and 2; the tier 3 target has no lookup and ``NoLookup`` is raised).
- ``capture`` / ``validate_premises``: the PaymentIntent with its ``latest_charge`` expanded
  (``amount_received``, ``amount_refunded``) and our own refunds by metadata, giving the premises
  ``{payment, eligible, refunded_by_others}`` with the same meaning as ``LocalRefunds``.

The SDK's own network retries. ``max_network_retries`` makes the SDK resend a request after a
connection error, a timeout, a 409 or a 5xx, and every resend reuses the same ``Idempotency-Key``
(the one we pass, or the one the SDK generated for the first attempt). What that means depends on
the tier:

- Tier 1 (the target dedupes keys, like Stripe): an SDK retry is a replay. If the first attempt
  landed, the retry returns the stored refund (``Idempotent-Replayed: true``) and nothing new is
  applied, so SDK retries are safe and stay on (``max_network_retries`` defaults to 2). They are
  still sends inside the runtime's send deadline: the retry count and the per-attempt timeout are
  fitted into the ``timeout`` the runtime gives ``apply`` (attempts times timeout plus the SDK's
  backoff sleeps, ``retry_plan``), so no attempt can start after the deadline, and retries are
  dropped when they do not fit (with the default 3 s send timeout: one retry, 1.25 s each). The access log shows each attempt as its own POST under the same key.
- Tiers 2 and 3 (the target applies every POST): an SDK retry after a lost response is a second
  refund that the runtime never authorized and never journaled (no DISPATCHED entry names it), so
  the runtime's at-most-once guarantee would be broken below it. ``max_network_retries`` is
  forced to 0 there (asking for more is a ``ValueError``); resending is the runtime's decision,
  made at recovery from a lookup (tier 2) or left to a person (tier 3, AMBIGUOUS).
- At any tier, reads (list, retrieve) are sent once; the runtime retries them when it needs to.

Keys are never logged or shown (``repr`` leaves the key out); any ``sk_test_`` key is accepted by
the local target.
"""

from __future__ import annotations

import json
from typing import Any

import requests
import stripe

from world.target_client import LocalRefunds, NoLookup, TargetRejected

__all__ = ["EMULATED", "StripeRefunds", "TEST_KEY", "retry_plan"]

EMULATED = (
    "EMULATED: the official stripe SDK pointed at the local target's Stripe-compatible subset "
    "(/v1/refunds, /v1/payment_intents); Stripe itself cannot be reached from this machine"
)
TEST_KEY = "sk_test_emulated"
TIER1_NETWORK_RETRIES = 2
MIN_ATTEMPT_TIMEOUT = 0.5  # seconds; a retry is dropped rather than leave an attempt less than
MIN_ATTEMPT_SHARE = 0.25  # ... this, or this share of the whole budget (slow answers still fit)
DAY = 24 * 3600.0  # Stripe keeps idempotency keys for at least 24 hours

# Status codes that are not a definite refusal (docs/design.md#refinements): the effect may still land.
NOT_DEFINITE = (409, 429)


def _sdk_backoff(retry: int) -> float:
    """The longest sleep the SDK takes before retry number ``retry`` (1-based)."""
    delay = min(stripe.HTTPClient.INITIAL_DELAY * 2 ** (retry - 1), stripe.HTTPClient.MAX_DELAY)
    return max(stripe.HTTPClient.INITIAL_DELAY, delay)


def retry_plan(budget: float, wanted: int) -> tuple[int, float]:
    """(retries, per-attempt timeout) so that every attempt and the SDK's backoff sleeps fit in
    ``budget`` seconds; retries are dropped until each attempt gets at least
    ``MIN_ATTEMPT_TIMEOUT`` and ``MIN_ATTEMPT_SHARE`` of the budget. With no retry the single
    attempt gets the whole budget."""
    floor = max(MIN_ATTEMPT_TIMEOUT, MIN_ATTEMPT_SHARE * budget)
    for n in range(max(0, wanted), 0, -1):
        sleeps = sum(_sdk_backoff(i) for i in range(1, n + 1))
        per = (budget - sleeps) / (n + 1)
        if per >= floor:
            return n, per
    return 0, budget


def _metadata_value(v: Any) -> str:
    return v if isinstance(v, str) else json.dumps(v, sort_keys=True, separators=(",", ":"))


class StripeRefunds(LocalRefunds):
    """The refund effect through the official stripe SDK (EMULATED: the local target)."""

    name = "stripe-refunds"

    def __init__(
        self,
        url: str,
        payment: str,
        tier: int = 1,
        *,
        api_key: str = TEST_KEY,
        max_network_retries: int | None = None,
        send_timeout: float = 3.0,
        settle_margin: float = 5.0,
        premise_max_age: float = 5.0,
        dedup_window: float = DAY,
        queryable: bool | None = None,
    ) -> None:
        super().__init__(url, payment, tier, send_timeout=send_timeout,
                         settle_margin=settle_margin, premise_max_age=premise_max_age,
                         dedup_window=dedup_window, queryable=queryable)  # fmt: skip
        if max_network_retries is not None and (
            isinstance(max_network_retries, bool)
            or not isinstance(max_network_retries, int)
            or max_network_retries < 0
        ):
            raise ValueError(f"max_network_retries must be an integer >= 0, "
                             f"not {max_network_retries!r}")  # fmt: skip
        if tier != 1 and max_network_retries:
            raise ValueError(
                f"max_network_retries={max_network_retries} at tier {tier}: the target does not "
                "dedupe, so an SDK retry would be a second refund the runtime never authorized; "
                "only tier 1 may retry inside the SDK"
            )
        if tier == 1:
            self.max_network_retries = (
                TIER1_NETWORK_RETRIES if max_network_retries is None else max_network_retries
            )
        else:
            self.max_network_retries = 0
        if not isinstance(api_key, str) or not api_key:
            raise ValueError("api_key must be a non-empty string (any sk_test_ key)")
        self._api_key = api_key

    def __repr__(self) -> str:
        return f"StripeRefunds({self.url!r}, {self.payment!r}, tier={self.tier})"

    # -- the SDK

    def _client(
        self, timeout: float, retries: int
    ) -> tuple[stripe.StripeClient, stripe.RequestsClient]:
        """A client for one call (the timeout is per call); close the HTTP client after it."""
        session = requests.Session()
        session.trust_env = False  # loopback only: no proxy from the environment
        http = stripe.RequestsClient(timeout=timeout, session=session)
        client = stripe.StripeClient(self._api_key, base_addresses={"api": self.url},
                                     max_network_retries=retries, http_client=http)  # fmt: skip
        return client, http

    def params_for(self, effect_id: str, payload: dict) -> dict:
        """The POST /v1/refunds params: deterministic, so a tier-1 resend replays."""
        body = self.body_for(effect_id, payload)
        return {
            "payment_intent": body["payment"],
            "amount": body["amount"],
            "metadata": {str(k): _metadata_value(v) for k, v in body["metadata"].items()},
        }

    # -- the effect

    def apply(
        self,
        effect_id: str,
        payload: dict,
        *,
        worker: str | None = None,
        epoch: int | str | None = None,
        timeout: float | None = None,
    ) -> dict:
        """Create the refund. Returns the Refund as a plain dict plus ``replayed`` (the target
        answered ``Idempotent-Replayed: true``) and ``attempts_allowed`` (1 + SDK retries)."""
        headers = self.who_headers(worker, epoch)
        budget = self.send_timeout if timeout is None else float(timeout)
        retries, per_attempt = retry_plan(budget, self.max_network_retries)
        client, http = self._client(per_attempt, retries)
        try:
            refund = client.v1.refunds.create(
                params=self.params_for(effect_id, payload),  # type: ignore[arg-type]
                options={"idempotency_key": effect_id, "headers": headers},
            )
        except stripe.StripeError as e:
            status = e.http_status
            if status is not None and 400 <= status < 500 and status not in NOT_DEFINITE:
                err = (e.json_body or {}).get("error") or {}
                reason = err.get("code") or err.get("type") or f"http_{status}"
                raise TargetRejected(reason, {"status": status, "body": e.json_body}) from e
            raise  # 409, 429, 5xx, timeouts, connection errors: the outcome is unknown
        finally:
            http.close()
        out = refund.to_dict()
        last = refund.last_response
        out["replayed"] = bool(last and last.headers.get("Idempotent-Replayed") == "true")
        out["attempts_allowed"] = retries + 1
        return out

    def _refunds(self, key: str, payload: dict | None = None) -> list[dict]:
        """Our refunds (``metadata[key] == key``) on the payment, oldest first."""
        payment = (payload or {}).get("payment", self.payment)
        client, http = self._client(self.send_timeout, 0)
        try:
            page = client.v1.refunds.list(
                params={"payment_intent": payment, "metadata": {"key": key}, "limit": 100}  # type: ignore[typeddict-unknown-key]
            )
            found = [r.to_dict() for r in page.auto_paging_iter()]
        except stripe.InvalidRequestError as e:
            if e.http_status == 404 and e.code == "no_lookup":
                raise NoLookup(f"{self!r}: the target answered no_lookup") from e
            raise
        finally:
            http.close()
        found = [r for r in found if (r.get("metadata") or {}).get("key") == key]
        return sorted(found, key=lambda r: (r["created"], r["id"]))

    # -- premises

    def payment_state(self) -> dict:
        """The PaymentIntent with its charge: {id, paid, refunded_total}."""
        client, http = self._client(self.send_timeout, 0)
        try:
            pi = client.v1.payment_intents.retrieve(
                self.payment, params={"expand": ["latest_charge"]}
            )
        finally:
            http.close()
        charge = pi.latest_charge
        refunded = charge.amount_refunded if isinstance(charge, stripe.Charge) else 0
        return {"id": pi.id, "paid": pi.amount_received, "refunded_total": refunded}
