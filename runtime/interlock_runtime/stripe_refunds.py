"""Stripe refunds as an effect target, through the official `stripe` SDK (the `stripe` extra).

`pip install "interlock-runtime[stripe]"`, then pass a
[`StripeRefundTarget`][interlock_runtime.stripe_refunds.StripeRefundTarget] to `ctx.effect`.
This module imports `stripe` when it is imported; `import interlock_runtime` never imports it.

What the target does (see the class for the arguments):

- `apply`: `POST /v1/refunds` (`payment_intent`, `amount`, `reason` when the payload has them,
  `metadata` with `metadata[metadata_key] = effect_id`) with `Idempotency-Key: effect_id`. A 4xx
  is a definite refusal (`TargetRejected`) except 408, 409 (the key is still in flight: the first
  request may yet land) and 429 (rate limited). Those, 5xx, timeouts and connection errors
  propagate: the outcome is unknown and the runtime leaves the effect open for recovery.
- `query`: the refunds of the payment intent (listed by `payment_intent`, paged) whose
  `metadata[metadata_key]` is the effect id; Stripe's list has no metadata filter, so the
  selection is made here.
- `capture` / `validate_premises`: the PaymentIntent with its `latest_charge` expanded, giving
  the premises `{payment, eligible, refunded_by_others}` (refunds carrying another effect id or
  none count as others'; ours are told apart only where the target is queryable).

The SDK's own network retries (`max_network_retries`) resend after a connection error, a
timeout, a 409 or a 5xx, reusing the same `Idempotency-Key`. At tier 1 (Stripe itself: the key
is deduplicated for at least 24 hours) such a resend is a replay and stays on (2 by default), but
every attempt and the SDK's backoff sleeps are fitted into the `timeout` the runtime gives
`apply` ([`retry_plan`][interlock_runtime.stripe_refunds.retry_plan]), so no attempt starts after
the send deadline. At tiers 2 and 3 (a target that applies every POST; only Stripe-compatible
test servers) an SDK resend would be a second refund the runtime never authorized, so retries
are 0 there and asking for more is an `InvalidInput`. Reads are sent once.

The API key is never shown (`repr` leaves it out).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

try:
    import stripe
except ImportError as exc:  # pragma: no cover - depends on the installed extras
    raise ImportError(
        "interlock_runtime.stripe_refunds needs the stripe SDK: "
        "pip install 'interlock-runtime[stripe]'"
    ) from exc

from .effects.spec import check_target, timing_values
from .effects.targets import NoLookup
from .errors import InvalidInput, TargetRejected

if TYPE_CHECKING:
    from stripe.params import RefundCreateParams

__all__ = ["DAY", "NOT_DEFINITE", "STRIPE_API", "StripeRefundTarget", "retry_plan"]

STRIPE_API = "https://api.stripe.com"
DAY = 24 * 3600.0
"""Stripe keeps an idempotency key for at least 24 hours: the default `dedup_window`."""

TIER1_NETWORK_RETRIES = 2
MIN_ATTEMPT_TIMEOUT = 0.5  # seconds; a retry is dropped rather than leave an attempt less than
MIN_ATTEMPT_SHARE = 0.25  # ... this, or this share of the whole budget (slow answers still fit)

NOT_DEFINITE = frozenset({408, 409, 429})
"""4xx statuses that are not a definite refusal: the refund may still land."""


def _sdk_backoff(retry: int) -> float:
    """The longest sleep the SDK takes before retry number `retry` (1-based)."""
    delay = min(stripe.HTTPClient.INITIAL_DELAY * 2 ** (retry - 1), stripe.HTTPClient.MAX_DELAY)
    return float(max(stripe.HTTPClient.INITIAL_DELAY, delay))


def retry_plan(budget: float, wanted: int) -> tuple[int, float]:
    """(retries, per-attempt timeout) so that every attempt and the SDK's backoff sleeps fit in
    `budget` seconds; retries are dropped until each attempt gets at least
    `MIN_ATTEMPT_TIMEOUT` and `MIN_ATTEMPT_SHARE` of the budget. With no retry the single
    attempt gets the whole budget."""
    floor = max(MIN_ATTEMPT_TIMEOUT, MIN_ATTEMPT_SHARE * budget)
    for n in range(max(0, wanted), 0, -1):
        sleeps = sum(_sdk_backoff(i) for i in range(1, n + 1))
        per = (budget - sleeps) / (n + 1)
        if per >= floor:
            return n, per
    return 0, budget


def _close(http: stripe.HTTPClient) -> None:
    close: Callable[[], object] = http.close  # the SDK leaves close() unannotated
    close()


def _metadata_value(v: Any) -> str:
    return v if isinstance(v, str) else json.dumps(v, sort_keys=True, separators=(",", ":"))


class StripeRefundTarget:
    """Refunds of Stripe PaymentIntents: an
    [`EffectTarget`][interlock_runtime.effects.targets.EffectTarget].

    - `api_key`: the secret (or restricted) key; never shown in `repr` or errors.
    - `payment_intent`: the PaymentIntent every effect refunds, or `None` to take it from each
      payload's `payment_field` (a payload's value wins over `payment_intent`). Premises are
      read for `payment_intent`, else for the `payment` named in the premises.
    - `payment_field`: the payload key naming the PaymentIntent (default `"payment_intent"`).
      The payload's `amount` (cents; left out: Stripe refunds what remains), `reason` and
      `metadata` (values that are not strings are sent as JSON) are passed on.
    - `tier`: 1 for Stripe (the default); 2 and 3 only for a Stripe-compatible server that does
      not deduplicate keys.
    - `base_url`: the API's address (default `STRIPE_API`, Stripe's own); tests pass a local
      Stripe-compatible server.
    - `max_network_retries`: the SDK's retries at tier 1 (default 2, fitted into the send
      timeout); at tiers 2 and 3 only 0 is accepted.
    - `metadata_key`: the metadata key that carries the effect id (what `query` looks for).
    - `name`, `action`, `queryable` and the timings (`send_timeout`, `settle_margin`,
      `premise_max_age`, `dedup_window` (default 24 h), `dedup_margin`, `breaker_threshold`,
      `breaker_cooldown`): see `EffectTarget`; `None` takes the runtime's default.
    - `sender_headers`: two header names for the worker id and the claim epoch sent with each
      refund request, or `None` (the default) to send neither.

    Invalid arguments raise [`InvalidInput`][interlock_runtime.errors.InvalidInput]; the
    runtime's own check (`effects.check_target`) runs in the constructor too.
    """

    send_timeout: float
    settle_margin: float
    premise_max_age: float
    dedup_window: float
    dedup_margin: float
    breaker_cooldown: float

    def __init__(
        self,
        api_key: str,
        payment_intent: str | None = None,
        *,
        payment_field: str = "payment_intent",
        tier: int = 1,
        base_url: str | None = None,
        max_network_retries: int | None = None,
        metadata_key: str = "interlock_effect_id",
        name: str = "stripe-refunds",
        action: str = "refund",
        queryable: bool | None = None,
        send_timeout: float | None = None,
        settle_margin: float | None = None,
        premise_max_age: float | None = None,
        dedup_window: float | None = DAY,
        dedup_margin: float | None = None,
        breaker_threshold: int | None = None,
        breaker_cooldown: float | None = None,
        sender_headers: tuple[str, str] | None = None,
    ) -> None:
        if not isinstance(api_key, str) or not api_key:
            raise InvalidInput("api_key must be a non-empty string (a Stripe secret key)")
        if isinstance(tier, bool) or tier not in (1, 2, 3):
            raise InvalidInput(f"tier must be 1 (Stripe), 2 or 3, not {tier!r}")
        if payment_intent is not None and (
            not isinstance(payment_intent, str) or not payment_intent
        ):
            raise InvalidInput(f"payment_intent must be a PaymentIntent id or None, "
                               f"not {payment_intent!r}")  # fmt: skip
        for what, text in (("payment_field", payment_field), ("metadata_key", metadata_key),
                           ("name", name), ("action", action)):  # fmt: skip
            if not isinstance(text, str) or not text:
                raise InvalidInput(f"{what} must be a non-empty string, not {text!r}")
        url = STRIPE_API if base_url is None else base_url
        if not isinstance(url, str) or not url.startswith(("http://", "https://")):
            raise InvalidInput(f"base_url must be an http:// or https:// URL, not {base_url!r}")
        if max_network_retries is not None and (
            isinstance(max_network_retries, bool)
            or not isinstance(max_network_retries, int)
            or max_network_retries < 0
        ):
            raise InvalidInput(f"max_network_retries must be an integer >= 0, "
                               f"not {max_network_retries!r}")  # fmt: skip
        if tier != 1 and max_network_retries:
            raise InvalidInput(
                f"max_network_retries={max_network_retries} at tier {tier}: the target does not "
                "dedupe, so an SDK retry would be a second refund the runtime never authorized; "
                "only tier 1 may retry inside the SDK"
            )
        if tier == 3 and queryable:
            raise InvalidInput("tier 3 means the target answers no lookups: queryable must be "
                               "False or None there")  # fmt: skip
        if sender_headers is not None and (
            not isinstance(sender_headers, tuple)
            or len(sender_headers) != 2
            or not all(isinstance(h, str) and h for h in sender_headers)
        ):
            raise InvalidInput("sender_headers must be two header names (worker, epoch) or None")

        self.name = name
        self.action = action
        self.tier = tier
        self.queryable = tier in (1, 2) if queryable is None else bool(queryable)
        self.payment_intent = payment_intent
        self.payment_field = payment_field
        self.metadata_key = metadata_key
        self.base_url = url.rstrip("/")
        self.sender_headers = sender_headers
        if tier == 1:
            self.max_network_retries = (
                TIER1_NETWORK_RETRIES if max_network_retries is None else max_network_retries
            )
        else:
            self.max_network_retries = 0
        timings = {"send_timeout": send_timeout, "settle_margin": settle_margin,
                   "premise_max_age": premise_max_age, "dedup_window": dedup_window,
                   "dedup_margin": dedup_margin, "breaker_cooldown": breaker_cooldown}  # fmt: skip
        for key, value in timing_values(timings).items():
            setattr(self, key, value)
        self.breaker_threshold = breaker_threshold
        self._api_key = api_key
        check_target(self)

    def __repr__(self) -> str:
        return (f"{type(self).__name__}({self.base_url!r}, {self.payment_intent!r}, "
                f"tier={self.tier})")  # fmt: skip

    # -- the SDK ------------------------------------------------------------------------------

    def http_client(self, timeout: float) -> stripe.HTTPClient:
        """The SDK's HTTP client for one call (`timeout` per attempt); closed after the call.
        Override to configure proxies or sessions."""
        return stripe.RequestsClient(timeout=timeout)

    def _client(
        self, timeout: float, retries: int
    ) -> tuple[stripe.StripeClient, stripe.HTTPClient]:
        http = self.http_client(timeout)
        client = stripe.StripeClient(self._api_key, base_addresses={"api": self.base_url},
                                     max_network_retries=retries, http_client=http)  # fmt: skip
        return client, http

    def payment_of(self, payload: Any) -> str | None:
        """The PaymentIntent a payload refunds: its `payment_field`, else `payment_intent`."""
        if isinstance(payload, Mapping):
            value = payload.get(self.payment_field)
            if isinstance(value, str) and value:
                return value
        return self.payment_intent

    def params_for(self, effect_id: str, payload: Any) -> RefundCreateParams:
        """The POST /v1/refunds params: deterministic, so a tier-1 resend replays."""
        if not isinstance(payload, Mapping):
            raise TargetRejected("invalid_payload", {"error": "the payload must be a JSON object"})
        payment = self.payment_of(payload)
        if payment is None:
            why = f"no PaymentIntent: no {self.payment_field!r} in the payload, none configured"
            raise TargetRejected("invalid_payload", {"error": why})
        metadata = payload.get("metadata") or {}
        if not isinstance(metadata, Mapping):
            raise TargetRejected("invalid_payload", {"error": "metadata must be a JSON object"})
        meta = {str(k): _metadata_value(v) for k, v in metadata.items()}
        meta[self.metadata_key] = effect_id
        params: RefundCreateParams = {"payment_intent": payment, "metadata": meta}
        if payload.get("amount") is not None:
            params["amount"] = payload["amount"]
        if payload.get("reason") is not None:
            params["reason"] = payload["reason"]
        return params

    def request_headers(self, worker: str | None, epoch: int | str | None) -> dict[str, str]:
        """The sender headers of one refund request (none unless `sender_headers` is set)."""
        headers: dict[str, str] = {}
        if self.sender_headers is not None:
            if worker is not None:
                headers[self.sender_headers[0]] = str(worker)
            if epoch is not None:
                headers[self.sender_headers[1]] = str(epoch)
        return headers

    # -- the effect ---------------------------------------------------------------------------

    def apply(
        self,
        effect_id: str,
        payload: Any,
        *,
        worker: str | None = None,
        epoch: int | str | None = None,
        timeout: float | None = None,
    ) -> dict[str, Any]:
        """Create the refund. Returns the Refund as a plain dict plus `replayed` (Stripe
        answered `Idempotent-Replayed: true`) and `attempts_allowed` (1 + SDK retries)."""
        params = self.params_for(effect_id, payload)  # an invalid payload is never sent
        budget = self.send_timeout if timeout is None else float(timeout)
        retries, per_attempt = retry_plan(budget, self.max_network_retries)
        client, http = self._client(per_attempt, retries)
        try:
            refund = client.v1.refunds.create(
                params=params,
                options={
                    "idempotency_key": effect_id,
                    "headers": self.request_headers(worker, epoch),
                },  # fmt: skip
            )
        except stripe.StripeError as e:
            status = e.http_status
            if status is not None and 400 <= status < 500 and status not in NOT_DEFINITE:
                body = e.json_body if isinstance(e.json_body, dict) else None
                err = (body or {}).get("error") or {}
                reason = err.get("code") or err.get("type") or f"http_{status}"
                raise TargetRejected(str(reason), {"status": status, "body": body}) from e
            raise  # 408, 409, 429, 5xx, timeouts, connection errors: the outcome is unknown
        finally:
            _close(http)
        out = refund.to_dict()
        last = refund.last_response
        out["replayed"] = bool(last and last.headers.get("Idempotent-Replayed") == "true")
        out["attempts_allowed"] = retries + 1
        return out

    def refunds(self, effect_id: str, payment: str) -> list[dict[str, Any]]:
        """Our refunds (`metadata[metadata_key] == effect_id`) on `payment`, oldest first.
        Raises `NoLookup` when the server answers `no_lookup` (a tier-3 test server)."""
        client, http = self._client(self.send_timeout, 0)
        try:
            page = client.v1.refunds.list(params={"payment_intent": payment, "limit": 100})
            found = [r.to_dict() for r in page.auto_paging_iter()]
        except stripe.InvalidRequestError as e:
            if e.http_status == 404 and e.code == "no_lookup":
                raise NoLookup(f"{self!r}: the server answered no_lookup") from e
            raise
        finally:
            _close(http)
        found = [r for r in found if (r.get("metadata") or {}).get(self.metadata_key) == effect_id]
        return sorted(found, key=lambda r: (r["created"], r["id"]))

    def query(self, effect_id: str, payload: Any = None) -> dict[str, Any] | None:
        """The refund created under `effect_id`, or None; with `count` set to the number found
        (more than 1 only where the server does not dedupe). A payload without a
        PaymentIntent was never sent: None."""
        if not self.queryable or self.tier == 3:
            raise NoLookup(f"{self!r} has no lookup (tier {self.tier})")
        payment = self.payment_of(payload)
        if payment is None:
            return None
        found = self.refunds(effect_id, payment)
        if not found:
            return None
        first = dict(found[0])
        first["count"] = len(found)
        return first

    # -- premises -----------------------------------------------------------------------------

    def payment_state(self, payment: str | None = None) -> dict[str, Any]:
        """The PaymentIntent with its latest charge: `{id, paid, refunded_total}`."""
        pid = payment or self.payment_intent
        if pid is None:
            raise InvalidInput(f"{self!r}: no PaymentIntent to read (none configured or given)")
        client, http = self._client(self.send_timeout, 0)
        try:
            pi = client.v1.payment_intents.retrieve(pid, params={"expand": ["latest_charge"]})
        finally:
            _close(http)
        charge = pi.latest_charge
        refunded = charge.amount_refunded if isinstance(charge, stripe.Charge) else 0
        return {"id": pi.id, "paid": pi.amount_received, "refunded_total": refunded}

    def capture(self, effect_id: str | None = None, payment: str | None = None) -> dict[str, Any]:
        """The premises now: `{payment, eligible, refunded_by_others}`. Refunds carrying
        `effect_id` are ours (failed or canceled ones count for nobody); others' are the
        rest of the charge's `amount_refunded`."""
        p = self.payment_state(payment)
        ours = 0
        if effect_id is not None and self.queryable and self.tier in (1, 2):
            ours = sum(int(r.get("amount") or 0) for r in self.refunds(effect_id, p["id"])
                       if r.get("status") not in ("failed", "canceled"))  # fmt: skip
        others = p["refunded_total"] - ours
        return {"payment": p["id"], "eligible": p["paid"] - others > 0,
                "refunded_by_others": others}  # fmt: skip

    def validate_premises(self, premises: Any, effect_id: str) -> list[str]:
        """Re-read the payment and list what no longer holds (empty: the premises hold).
        Without a configured PaymentIntent and no `payment` in the premises there is nothing
        external to check."""
        facts = premises if isinstance(premises, Mapping) else {}
        named = facts.get("payment")
        payment = self.payment_intent or (named if isinstance(named, str) and named else None)
        if payment is None:
            return []
        now = self.capture(effect_id, payment)
        out = []
        if named not in (None, payment):
            out.append(f"payment changed: {named} -> {payment}")
        if "refunded_by_others" in facts:
            was = facts["refunded_by_others"]
            if was != now["refunded_by_others"]:
                out.append(f"refunded_by_others changed: {was} -> {now['refunded_by_others']}")
        if not now["eligible"] and facts.get("eligible", True):
            out.append(f"payment {payment} is no longer eligible")
        return out
