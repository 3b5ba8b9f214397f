"""The Stripe refund target (EMULATED): the official ``stripe`` SDK pointed at the local target.

Stripe live mode cannot be reached from this machine (docs/design.md#emulated), so ``StripeRefunds`` talks to
the Stripe-compatible subset the local target serves under ``/v1/`` (world/target.py) through the
real SDK (``stripe.StripeClient`` with ``base_addresses={"api": url}`` and a test-mode key). Every
result it returns comes from that EMULATED subset, not from Stripe.

The target itself is the library's ``interlock_runtime.stripe_refunds.StripeRefundTarget`` (the
``stripe`` extra); ``StripeRefunds`` is a thin subclass that keeps the shape of ``LocalRefunds``
(``StripeRefunds(url, payment, tier)``, the payload's ``payment``, ``metadata[key]``, the
``X-ILR-*`` sender headers the local target logs, no proxy from the environment). It implements
the runtime's target interface like ``LocalRefunds`` (name ``"stripe-refunds"``; tier 1 by
default, the local target's tier otherwise):

- ``apply``: ``POST /v1/refunds`` (``payment_intent``, ``amount``, ``metadata[key] = effect_id``)
  with ``Idempotency-Key: effect_id``. A 4xx is a definite refusal (``TargetRejected``) except
  408, 409 (the key is still in flight: the first request may yet land) and 429 (rate limited). 5xx,
  timeouts and connection errors propagate: the outcome is unknown and the runtime leaves the
  effect open for recovery.
- ``query``: the refunds listed with ``payment_intent``, those with ``metadata[key] = effect_id``
  picked out client-side as against Stripe (tiers 1 and 2; the tier 3 target has no lookup and
  ``NoLookup`` is raised).
- ``capture`` / ``validate_premises``: the PaymentIntent with its ``latest_charge`` expanded
  (``amount_received``, ``amount_refunded``) and our own refunds by metadata, giving the premises
  ``{payment, eligible, refunded_by_others}`` with the same meaning as ``LocalRefunds``.

The SDK's own network retries (the library's rules, ``retry_plan`` included).
``max_network_retries`` makes the SDK resend a request after a connection error, a timeout, a 409
or a 5xx, and every resend reuses the same ``Idempotency-Key`` (the one we pass). What that means
depends on the tier:

- Tier 1 (the target dedupes keys, like Stripe): an SDK retry is a replay. If the first attempt
  landed, the retry returns the stored refund (``Idempotent-Replayed: true``) and nothing new is
  applied, so SDK retries are safe and stay on (``max_network_retries`` defaults to 2). They are
  still sends inside the runtime's send deadline: the retry count and the per-attempt timeout are
  fitted into the ``timeout`` the runtime gives ``apply`` (attempts times timeout plus the SDK's
  backoff sleeps, ``retry_plan``), so no attempt can start after the deadline, and retries are
  dropped when they do not fit (with the default 3 s send timeout: one retry, 1.25 s each). The
  access log shows each attempt as its own POST under the same key.
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

from typing import Any

import requests
import stripe

from interlock_runtime import stripe_refunds
from interlock_runtime.stripe_refunds import DAY, StripeRefundTarget, retry_plan
from world.target_client import LocalRefunds, NoLookup

__all__ = ["EMULATED", "StripeRefunds", "TEST_KEY", "retry_plan"]

EMULATED = (
    "EMULATED: the official stripe SDK pointed at the local target's Stripe-compatible subset "
    "(/v1/refunds, /v1/payment_intents); Stripe itself cannot be reached from this machine"
)
TEST_KEY = "sk_test_emulated"


class StripeRefunds(StripeRefundTarget):
    """The refund effect through the official stripe SDK (EMULATED: the local target)."""

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
        # LocalRefunds reads a tier-3 target as non-queryable whatever it is told
        super().__init__(api_key, payment, payment_field="payment", tier=tier, base_url=url,
                         max_network_retries=max_network_retries, metadata_key="key",
                         queryable=None if tier == 3 else queryable, send_timeout=send_timeout,
                         settle_margin=settle_margin, premise_max_age=premise_max_age,
                         dedup_window=dedup_window,
                         sender_headers=("X-ILR-Worker", "X-ILR-Epoch"))  # fmt: skip
        self.url = self.base_url
        self.payment = payment

    def __repr__(self) -> str:
        return f"StripeRefunds({self.url!r}, {self.payment!r}, tier={self.tier})"

    def http_client(self, timeout: float) -> stripe.HTTPClient:
        session = requests.Session()
        session.trust_env = False  # loopback only: no proxy from the environment
        return stripe.RequestsClient(timeout=timeout, session=session)

    def request_headers(self, worker: str | None, epoch: int | str | None) -> dict[str, str]:
        return LocalRefunds.who_headers(worker, epoch)  # a worker id always (pid: fallback)

    def query(self, effect_id: str, payload: Any = None) -> dict[str, Any] | None:
        """As the library's, raising world.target_client.NoLookup like LocalRefunds."""
        try:
            return super().query(effect_id, payload)
        except stripe_refunds.NoLookup as e:
            raise NoLookup(str(e)) from e
