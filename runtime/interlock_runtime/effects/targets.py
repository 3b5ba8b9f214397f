"""Effect targets: the contract `ctx.effect` relies on, and a reusable JSON-over-HTTP target.

An *effect target* is the object passed as `ctx.effect(target, ...)`: it sends one external
effect (a refund, a payment, an email) and tells the runtime what it knows about the outcome.
[`EffectTarget`][interlock_runtime.effects.targets.EffectTarget] documents what the runtime reads from
such an object; [`HttpTarget`][interlock_runtime.effects.targets.HttpTarget] is a ready-made one for
any HTTP API that takes a JSON body and honours (tier 1) or records (tier 2) an
`Idempotency-Key` header.

The runtime checks a target with `effects.check_target` on every `ctx.effect` call, before
anything is written; this module does not change what that check accepts.
"""

from __future__ import annotations

import asyncio
import contextvars
import importlib
import inspect
import json
import string
import urllib.error
import urllib.parse
import urllib.request
import weakref
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Protocol, runtime_checkable

from .. import stored
from ..errors import InterlockError, InvalidInput, TargetRejected
from ..telemetry import trace_headers
from .spec import check_target, timing_values

__all__ = [
    "AsyncHttpTarget",
    "EffectTarget",
    "HttpTarget",
    "HttpTargetError",
    "NoLookup",
    "QueryableTarget",
]


@runtime_checkable
class EffectTarget(Protocol):
    """What the runtime calls on the target of `ctx.effect` (docs/design.md#send-deadline, 5.7).

    **Required** (checked by `effects.check_target` before anything is written): the attributes
    `name` and `tier`, and the methods `apply` and `validate_premises`.
    `isinstance(obj, EffectTarget)` checks that these exist (not their signatures).

    **Optional**, read with `getattr` when present, else the default in parentheses (the
    numeric defaults are `interlock_runtime.effects.TARGET_DEFAULTS`; every time is in
    seconds, converted with `float()`, so `float("inf")` is allowed):

    - `queryable: bool` (`tier == 2`): the target answers `query(effect_id, payload)`. Tier 2
      requires it; a queryable target must have a `query` method (see
      [`QueryableTarget`][interlock_runtime.effects.targets.QueryableTarget]). Set it to `False` at
      tier 3: the runtime also queries a queryable target after a definite refusal, at any
      tier.
    - `send_timeout: float` (35): the local send deadline. The stopwatch starts just before
      the dispatch transaction; `send_deadline` (database time) is recorded with the dispatch.
      `apply` gets what is left of it as `timeout`, is not called at all when less than
      `effects.MIN_SEND_BUDGET` (1 s) is left, and a watchdog ends the worker process
      (`os._exit(75)`) if `apply` is still running when it runs out (assumption A1).
    - `settle_margin: float` (10): how long after `send_deadline` the target may still apply
      a request it received (assumption A2). Recovery does not query or resend an open send
      before `send_deadline + settle_margin`.
    - `premise_max_age: float` (5): if more than this passed between reading the premises
      (`validate_premises`) and the start of the dispatch, they are read once more.
    - `dedup_window: float` (`inf`): tier 1, how long the target remembers an idempotency
      key (Stripe: 24 h = 86400).
    - `dedup_margin: float` (600): tier 1 is accepted only when
      `dedup_margin > send_timeout + settle_margin` (docs/design.md#model-findings C2). Once the first dispatch
      is older than `dedup_window - dedup_margin`, recovery treats the target as tier 2 if it
      is queryable, else tier 3.
    - `breaker_threshold: int | None` (`None`: no circuit breaker): after this many
      consecutive failed sends (a definite refusal or an unknown outcome), counted in
      Postgres per target `name` across all workers, effects to this target are refused as
      `REFUSED:circuit_open` without sending. A successful send closes it again.
    - `breaker_cooldown: float` (60): how long an open breaker refuses before one send is let
      through again (a failure re-opens it).
    - `action: str`: the action a grant must allow to cover this target's effects;
      `ctx.effect(..., action=...)` takes precedence. Without either, the runtime picks a
      default action for the target (see `effects.run_effect`); name it to be explicit.

    These optional members are not part of the protocol's members, so that a target without
    them still satisfies `isinstance(obj, EffectTarget)`.

    **Not expressible as a signature**, but part of the contract:

    - The same `effect_id` may be sent more than once (a resend after a crash or an unknown
      outcome, at tiers 1 and 2), always with the same payload: at tier 1 the target must
      apply it once however often it is sent within `dedup_window`.
    - At a resend the payload is read back from Postgres (jsonb), so its key order may differ
      from the first send's: a target that compares request bodies must compare them as JSON
      values, not as bytes.
    - Results (`apply`'s return value, `TargetRejected.response`, `query`'s answer) are
      journaled in the receipt as JSON: they must be JSON-serializable.
    """

    name: str
    """The target's stable name: recorded with every effect, the key of its circuit breaker
    and of the `targets` mapping of `rt.recover_orphans`. Do not rename a target that has
    effects in flight."""

    tier: int
    """What the target guarantees about a repeated send of the same `effect_id`:

    - `1`: it deduplicates on the effect id (e.g. an `Idempotency-Key` header) for
      `dedup_window` seconds. Recovery resends an open send (`COMMITTED_BY_RETRY`) once;
      a send resent already is looked up first when the target answers lookups.
    - `2`: it does not deduplicate but answers lookups (`query`). Recovery asks first: found
      is `COMMITTED_ON_QUERY`, not found is resent (`REAPPLIED_AFTER_QUERY`).
    - `3`: neither. An open send whose outcome is unknown becomes `AMBIGUOUS` (a person
      reconciles it); it is never resent.
    """

    def apply(
        self, effect_id: str, payload: Any, *, worker: str, epoch: int, timeout: float
    ) -> Any:
        """Send the effect; return the target's response (JSON-serializable).

        Called after the dispatch is durably recorded, with the keyword arguments `worker`
        (the worker id, `"$recovery"` under `rt.recover_orphans`), `epoch` (the workflow's
        claim epoch: it grows with every takeover) and `timeout` (seconds left of
        `send_timeout`; return or raise within it, see `send_timeout`).

        - Return normally: the effect happened. The value becomes `EffectResult.result` and is
          journaled (`COMMITTED`). A value that is not JSON raises `TypeError` after the send
          and leaves the effect open, as a crash there would.
        - Raise [`TargetRejected`][interlock_runtime.errors.TargetRejected] only when the
          target *definitely did not* apply it (e.g. HTTP 400 insufficient funds). The
          effect goes back to `proposed` and the call returns `REFUSED:target_error` (unless
          a queryable target's lookup shows it landed anyway: `COMMITTED_ON_QUERY`).
        - Raise anything else (timeout, connection reset, HTTP 5xx, 409, 429) when it *may*
          have happened. The effect stays dispatched and the workflow waits until
          `send_deadline + settle_margin`; recovery then resolves it by tier.

        Both kinds of exception count as a failure for the circuit breaker.

        `apply` (and `query`) may be `async def`: an asyncio worker awaits them on its event
        loop (a run waiting on the target costs a coroutine, not a thread), under the same
        gate; a plain worker runs the coroutine on an event loop of its own for that call.
        """
        ...

    def validate_premises(self, premises: Any, effect_id: str) -> Iterable[str]:
        """Re-read the external facts the decision rested on; return what no longer holds.

        `premises` is what the caller passed to `ctx.effect(premises=...)` (at recovery: the
        premises recorded with the dispatch; may be `None`). Return an empty iterable when
        they still hold, else one human-readable string per violation: the dispatch is
        refused (`REFUSED:stale_premise`, or `..._at_recovery`). Called before every dispatch
        (twice if the first read is older than `premise_max_age`) and at recovery at tiers 1
        and 2. An exception propagates out of `ctx.effect`.

        Required by `effects.check_target` even for a target without external premises:
        such a target returns `[]` (the grant and local SQL premises are still checked).
        """
        ...


@runtime_checkable
class QueryableTarget(EffectTarget, Protocol):
    """An [`EffectTarget`][interlock_runtime.effects.targets.EffectTarget] that answers lookups: required
    at tier 2, optional at tier 1 (used when the dedup window may have passed, or when the
    grant or premises no longer hold at recovery), not for tier 3."""

    queryable: bool
    """`True` when `query` works; the runtime calls `query` only then."""

    def query(self, effect_id: str, payload: Any) -> Any:
        """Did the effect `effect_id` land? Return a truthy JSON-serializable description of
        what the target applied (journaled as `found`), or `None` when it definitely did not.

        If the answer is a dict with an integer `count` > 1, the journal records that the
        effect was applied more than once (assumption A2 broken). Called outside any
        transaction, at recovery and after a definite refusal; also once after a
        `REAPPLIED_AFTER_QUERY` resend has settled (errors there are only logged).

        Raise when the target cannot tell: returning `None` for an effect that did land
        makes tier-2 recovery send it a second time.
        """
        ...


class NoLookup(InterlockError, LookupError):
    """This target cannot be asked whether an effect landed (no lookup configured)."""


class HttpTargetError(InterlockError, RuntimeError):
    """An HTTP answer that is not a definite refusal (5xx, 3xx, 408, 409, 429, ...): the effect
    may or may not have happened. `status` and `body` (decoded JSON, else text) are kept."""

    def __init__(self, status: int, body: Any, what: str) -> None:
        self.status, self.body = status, body
        shown = body if len(repr(body)) <= 300 else repr(body)[:300] + "..."
        super().__init__(f"{what} -> HTTP {status}: {shown}")


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    """urllib would follow a redirect of a POST as a GET without its body: never follow one,
    so a 3xx is reported as it is (configure the final URL instead)."""

    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


_OPENER = urllib.request.build_opener(_NoRedirect())


def _decode(raw: bytes) -> Any:
    if not raw:
        return None
    try:
        return json.loads(raw)
    except ValueError:
        return raw.decode(errors="replace")


def _check_url(url: Any, what: str) -> urllib.parse.SplitResult:
    try:
        parts = urllib.parse.urlsplit(url) if isinstance(url, str) else None
    except ValueError:
        parts = None
    if parts is None or parts.scheme not in ("http", "https") or not parts.hostname:
        raise InvalidInput(f"{what} must be an absolute http:// or https:// URL, got {url!r}")
    if parts.username is not None or parts.password is not None:
        raise InvalidInput(
            f"{what} carries credentials in the URL: pass them as headers "
            "(headers={'Authorization': ...}), which are never shown or logged"
        )
    return parts


def _redact(url: str) -> str:
    """The URL without its query string (it may hold an API key)."""
    parts = urllib.parse.urlsplit(url)
    return urllib.parse.urlunsplit((parts.scheme, parts.netloc, parts.path, "", ""))


class _HttpDeclared:
    """What HttpTarget and AsyncHttpTarget share: the constructor's checks, the headers of a
    send, how an answer and a lookup's answer are read, the lookup URL and the premises. The
    two differ only in how a request travels (urllib in a thread, or httpx on the loop)."""

    NOT_DEFINITE = frozenset({408, 409, 429})
    """4xx statuses that are *not* a definite refusal: 408 (request timeout), 409 (the key is
    in use by a request still being processed) and 429 (rate limited) may still be followed
    by the effect landing, so they raise `HttpTargetError`, not `TargetRejected`."""

    action: str
    send_timeout: float
    settle_margin: float
    premise_max_age: float
    dedup_window: float
    dedup_margin: float
    breaker_cooldown: float

    def __init__(
        self,
        name: str,
        url: str,
        tier: int,
        *,
        lookup: str | Callable[[str, Any], Any] | None = None,
        headers: Mapping[str, str] | None = None,
        action: str | None = None,
        send_timeout: float | None = None,
        settle_margin: float | None = None,
        premise_max_age: float | None = None,
        dedup_window: float | None = None,
        dedup_margin: float | None = None,
        breaker_threshold: int | None = None,
        breaker_cooldown: float | None = None,
        premise_check: Callable[[Any, str], Iterable[str]] | None = None,
        sender_headers: tuple[str, str] | None = ("X-Interlock-Worker", "X-Interlock-Epoch"),
        idempotency_header: str = "Idempotency-Key",
        absent_on_404: bool = False,
    ) -> None:
        if not isinstance(name, str) or not name.strip():
            raise InvalidInput(f"name must be a non-empty string (the target's stable name), "
                               f"got {name!r}")  # fmt: skip
        label = f"{type(self).__name__} {name!r}"
        if isinstance(tier, bool) or tier not in (1, 2, 3):
            raise InvalidInput(
                f"{label}: tier must be 1 (the server dedupes the Idempotency-Key), "
                f"2 (it does not, but answers lookups: pass lookup=...) or 3 (neither), "
                f"got {tier!r}"
            )
        _check_url(url, f"{label}: url")
        if tier == 3 and lookup is not None:
            raise InvalidInput(
                f"{label}: tier 3 means the server can be neither asked nor trusted "
                "to dedupe, so it takes no lookup; a server that answers lookups is tier 2 (or "
                "tier 1 if it also dedupes the Idempotency-Key)"
            )
        if tier == 2 and lookup is None:
            raise InvalidInput(
                f"{label}: tier 2 needs lookup=... (a URL template with "
                "{effect_id}, or a callable): recovery must ask the server whether a send "
                "landed before it resends; a server that cannot be asked is tier 3"
            )
        self._lookup_fields: list[str] = []
        if isinstance(lookup, str):
            self._lookup_fields = self._check_template(label, lookup)
        elif lookup is not None and not callable(lookup):
            raise InvalidInput(f"{label}: lookup must be a URL template or a "
                               f"callable (effect_id, payload), got {lookup!r}")  # fmt: skip
        if not isinstance(idempotency_header, str) or not idempotency_header:
            raise InvalidInput(f"{label}: idempotency_header must be a header name")
        self._headers = self._check_headers(label, headers, idempotency_header, sender_headers)
        if premise_check is not None and not callable(premise_check):
            raise InvalidInput(f"{label}: premise_check must be a callable "
                               "(premises, effect_id) -> violations")  # fmt: skip
        if action is not None:
            if not isinstance(action, str) or not action:
                raise InvalidInput(f"{label}: action must be a non-empty string "
                                   f"(the action grants name), got {action!r}")  # fmt: skip
            self.action = action

        self.name = name
        self.url = url
        self.tier = tier
        self.queryable = lookup is not None
        timings = {"send_timeout": send_timeout, "settle_margin": settle_margin,
                   "premise_max_age": premise_max_age, "dedup_window": dedup_window,
                   "dedup_margin": dedup_margin, "breaker_cooldown": breaker_cooldown}  # fmt: skip
        for key, value in timing_values(timings, f"{label}: ").items():
            setattr(self, key, value)
        self.breaker_threshold = breaker_threshold
        self.idempotency_header = idempotency_header
        self.sender_headers = sender_headers
        self.absent_on_404 = bool(absent_on_404)
        self._lookup = lookup
        self._premise_check = premise_check
        check_target(self)  # the runtime's own rules (tier 1 dedup margin, breaker threshold)

    @staticmethod
    def _check_template(label: str, template: str) -> list[str]:
        try:
            parsed = list(string.Formatter().parse(template))
        except ValueError as exc:
            raise InvalidInput(f"{label}: lookup template {template!r}: {exc} "
                               "(write a literal brace as {{ or }})") from None  # fmt: skip
        fields = []
        for _, field, spec, conversion in parsed:
            if field is None:
                continue
            if not field.isidentifier() or spec or conversion:
                raise InvalidInput(
                    f"{label}: lookup template field {{{field}}} is not a plain "
                    "name; use {effect_id} and top-level payload keys such as {payment}"
                )
            fields.append(field)
        if "effect_id" not in fields:
            raise InvalidInput(f"{label}: the lookup template must contain "
                               f"{{effect_id}} (what to ask about), got {template!r}")  # fmt: skip
        _check_url(template.replace("{", "").replace("}", ""), f"{label}: lookup")
        return fields

    @staticmethod
    def _check_headers(label: str, headers: Mapping[str, str] | None, idempotency_header: str,
                       sender_headers: tuple[str, str] | None) -> dict[str, str]:  # fmt: skip
        if headers is not None and not isinstance(headers, Mapping):
            raise InvalidInput(f"{label}: headers must be a mapping of header "
                               "names to strings")  # fmt: skip
        if sender_headers is not None and (
            not isinstance(sender_headers, (tuple, list))
            or len(sender_headers) != 2
            or not all(isinstance(h, str) and h for h in sender_headers)
        ):
            raise InvalidInput(f"{label}: sender_headers must be two header names "
                               "(worker, epoch) or None")  # fmt: skip
        out = dict(headers or {})
        ours = [h.lower() for h in (idempotency_header, *(sender_headers or ()))]
        for key, value in out.items():
            if not isinstance(key, str) or not isinstance(value, str):
                raise InvalidInput(f"{label}: header {key!r} must map a string "
                                   "name to a string value")  # fmt: skip
            if any(c in key + value for c in "\r\n"):
                raise InvalidInput(f"{label}: header {key!r} contains a line break")
            if key.lower() in ours:
                raise InvalidInput(f"{label}: header {key!r} is set per request by "
                                   "the target (the effect id, the worker, the epoch); leave "
                                   "it out of headers")  # fmt: skip
        return out

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r}, {_redact(self.url)!r}, tier={self.tier})"

    def _send_headers(self, effect_id: str, worker: str | None,
                      epoch: int | None) -> dict[str, str]:  # fmt: skip
        headers = {self.idempotency_header: effect_id}
        if self.sender_headers is not None:
            if worker is not None:
                headers[self.sender_headers[0]] = str(worker)
            if epoch is not None:
                headers[self.sender_headers[1]] = str(epoch)
        return headers

    def _request_headers(self, data: bytes | None,
                         headers: Mapping[str, str] | None) -> dict[str, str]:  # fmt: skip
        out = {"Accept": "application/json"}
        if data is not None:
            out["Content-Type"] = "application/json"
        # the current span's context (W3C traceparent) first: a header of the caller's wins
        out.update({**trace_headers(), **self._headers, **(headers or {})})
        return out

    def _applied(self, status: int, body: Any) -> Any:
        """A POST's answer: the body on 2xx, else TargetRejected or HttpTargetError."""
        if 200 <= status < 300:
            return body
        if 400 <= status < 500 and status not in self.NOT_DEFINITE:
            raise TargetRejected(_reason(status, body), {"status": status, "body": body})
        raise HttpTargetError(status, body, f"{self.name}: POST {_redact(self.url)}")

    def _no_lookup(self) -> NoLookup:
        return NoLookup(f"{self!r} has no lookup (tier {self.tier}); pass lookup=... to ask")

    def _found(self, effect_id: str, status: int, body: Any) -> Any:
        """A lookup template's answer, read as the class documentation says."""
        if status == 404 and self.absent_on_404:
            return None
        what = f"{self.name}: lookup of {effect_id}"
        if status != 200:
            raise HttpTargetError(status, body, what)
        if body is None or body == []:
            return None
        if isinstance(body, list):
            first = body[0]
            found = dict(first) if isinstance(first, dict) else {"found": first}
            found["count"] = len(body)
            return found
        if isinstance(body, dict) and body:
            return body
        raise HttpTargetError(status, body, f"{what}: expected a JSON list or object, so it "
                              "cannot tell whether the effect landed")  # fmt: skip

    def _lookup_url(self, effect_id: str, payload: Any) -> str:
        values = {"effect_id": effect_id}
        for field in self._lookup_fields:
            if field == "effect_id":
                continue
            if not isinstance(payload, dict) or field not in payload:
                raise InvalidInput(f"{self!r}: the lookup template needs {{{field}}}, which is "
                                   "not a top-level key of the effect's payload")  # fmt: skip
            values[field] = str(payload[field])
        quoted = {k: urllib.parse.quote(v, safe="") for k, v in values.items()}
        assert isinstance(self._lookup, str)
        return self._lookup.format(**quoted)

    def validate_premises(self, premises: Any, effect_id: str) -> list[str]:
        """`premise_check(premises, effect_id)` as a list; `[]` without a `premise_check`."""
        if self._premise_check is None:
            return []
        return [str(v) for v in self._premise_check(premises, effect_id)]


class HttpTarget(_HttpDeclared):
    """A JSON-over-HTTP effect target (standard library only).

    `apply` POSTs the payload as JSON to `url` with the header `Idempotency-Key: <effect_id>`
    at every tier (a tier-2 server records it so that the lookup can find the effect; a tier-3
    server may ignore it), plus the sender headers below and your `headers`. Every request
    (lookups too) carries the current trace context, a W3C `traceparent` header, when
    OpenTelemetry is installed and a span is current (docs/observability.md).

    Outcome of a POST:

    - 2xx: the effect happened; `apply` returns the decoded JSON body (`None` when empty,
      the text when it is not JSON).
    - 4xx other than those in `NOT_DEFINITE` (408, 409, 429): raises
      `TargetRejected(reason, {"status": ..., "body": ...})`, a definite refusal. `reason` is
      the body's `error` (a string, or an object's `code` or `type`), else `http_<status>`.
    - 408, 409 (the key is in use by a request still being processed), 429, 3xx, 5xx:
      raises [`HttpTargetError`][interlock_runtime.effects.targets.HttpTargetError]; timeouts and
      connection errors raise the underlying `OSError` (`TimeoutError`,
      `ConnectionRefusedError`, ...). The runtime treats all of these as "may have happened".

    Redirects are never followed (urllib would turn a POST into a GET). `timeout` bounds the
    connect and each read, not the whole exchange; the runtime's watchdog bounds that. The
    body is canonical JSON (sorted keys), so a resend is byte-identical to the first send.

    Arguments (every time in seconds):

    - `name`: the target's stable name (see `EffectTarget.name`).
    - `url`: the POST endpoint, `http://` or `https://`, without credentials in it.
    - `tier`: `1` the server dedupes `Idempotency-Key`; `2` it does not, but `lookup` can ask
      it; `3` neither (recovery of an unknown outcome ends `AMBIGUOUS`).
    - `lookup`: how `query` asks whether an effect landed; required at tier 2, optional at
      tier 1, refused at tier 3. Either a URL template (`GET`, with your `headers`) whose
      `{effect_id}` placeholder is filled with the effect id and any other `{field}` with the
      payload's top-level `field` (each URL-quoted), e.g.
      `"http://127.0.0.1:8080/refunds?payment={payment}&key={effect_id}"`; or a callable
      `lookup(effect_id, payload)` returning what `query` should (it may use
      `target.request`). A template's answer is read as: `200` with a JSON list, empty =
      not applied, else applied (the first item, with `count` = the list's length); `200`
      with a non-empty JSON object = applied; `200 null` = not applied; `404` = not
      applied only with `absent_on_404=True`; anything else raises (the runtime cannot
      tell, and will not guess).
    - `headers`: extra request headers, e.g. `{"Authorization": "Bearer ..."}`; sent with
      every request, never shown in `repr` or in errors.
    - `action`: the action a grant must allow for this target's effects (see
      `EffectTarget`); when left out, the attribute is not set and the runtime's default
      for a target without one applies.
    - `send_timeout`, `settle_margin`, `premise_max_age`, `dedup_window`, `dedup_margin`,
      `breaker_cooldown`: see `EffectTarget`; `None` takes the runtime's default
      (`effects.TARGET_DEFAULTS`). `breaker_threshold`: `None` for no circuit breaker.
    - `premise_check`: `premise_check(premises, effect_id) -> iterable of violations`,
      called as `validate_premises`; without it the target has no external premises.
    - `sender_headers`: the names of the two headers that carry the worker id and the claim
      epoch (default `X-Interlock-Worker`, `X-Interlock-Epoch`), or `None` to send neither.
      They let the server's access log tell a first send from a resend by another worker;
      a server may also refuse an epoch lower than one it has seen for the same key (a
      fencing token). Lookups do not carry them.
    - `idempotency_header`: the name of the effect id header (default `Idempotency-Key`).
    - `absent_on_404`: see `lookup`.

    Invalid arguments raise [`InvalidInput`][interlock_runtime.errors.InvalidInput] (a
    `ValueError`) saying what to change; the runtime's own check (`effects.check_target`,
    e.g. tier 1's `dedup_margin > send_timeout + settle_margin`) runs in the constructor too.
    """

    # -- HTTP ---------------------------------------------------------------------------------

    def request(self, method: str, url: str, body: Any = None, *,
                headers: Mapping[str, str] | None = None,
                timeout: float | None = None) -> tuple[int, Any]:  # fmt: skip
        """One request with the configured `headers`; returns `(status, decoded body)` for any
        HTTP status (the body is JSON-decoded, else text, `None` when empty). Connection
        errors and timeouts raise the underlying `OSError`; `timeout` defaults to
        `send_timeout`. Meant for lookup callables."""
        data = None if body is None and method == "GET" else _json_bytes(body)
        req = urllib.request.Request(url, data=data, method=method)
        for key, value in self._request_headers(data, headers).items():
            req.add_header(key, value)
        wait = self.send_timeout if timeout is None else timeout
        try:
            with _OPENER.open(req, timeout=wait) as resp:
                return resp.status, _decode(resp.read())
        except urllib.error.HTTPError as e:
            with e:
                return e.code, _decode(e.read())
        except urllib.error.URLError as e:
            if isinstance(e.reason, OSError):
                raise e.reason from e
            raise

    # -- the effect ---------------------------------------------------------------------------

    def apply(self, effect_id: str, payload: Any, *, worker: str | None = None,
              epoch: int | None = None, timeout: float | None = None) -> Any:  # fmt: skip
        """POST the payload; see the class documentation for what each answer means."""
        headers = self._send_headers(effect_id, worker, epoch)
        return self._applied(*self.request("POST", self.url, payload, headers=headers,
                                           timeout=timeout))  # fmt: skip

    def query(self, effect_id: str, payload: Any = None) -> Any:
        """Ask whether `effect_id` landed, through `lookup` (see the class documentation).
        Raises [`NoLookup`][interlock_runtime.effects.targets.NoLookup] when there is none."""
        if self._lookup is None:
            raise self._no_lookup()
        if callable(self._lookup):
            return self._lookup(effect_id, payload)
        return self._found(effect_id, *self.request("GET", self._lookup_url(effect_id, payload)))


class AsyncHttpTarget(_HttpDeclared):
    """HttpTarget for `async def` workflows: the same arguments, checks, headers and reading
    of every answer (see [`HttpTarget`][interlock_runtime.effects.targets.HttpTarget]), with `apply`
    and `query` coroutines, so that a run waiting on the server costs a coroutine on the
    worker's event loop, not a thread (docs/async.md#effects).

    Needs the `async-http` extra (`pip install 'interlock-runtime[async-http]'`, which brings
    httpx); constructing one without it raises InvalidInput naming the extra.

    The runtime awaits `apply` on the loop under the same gate as any send: the stopwatch
    started before T_dispatch, the local lease check right before the send, `timeout` = what
    is left of `send_timeout` (httpx applies it to the connect and to each read and write),
    and the watchdog thread that ends the process at the send deadline, even when the loop is
    blocked. `lookup` may be a URL template, a plain callable or an `async def` callable
    (effect_id, payload); a callable may use `await target.request(...)`. `premise_check` is
    a plain function (run in a thread by the asyncio worker).

    Redirects are never followed. One connection pool per event loop (an httpx.AsyncClient
    shared by every AsyncHttpTarget, no limit on connections: a send never queues behind
    another); a plain worker may use this target too (each send then runs on a short event
    loop of its own, without connection reuse).
    """

    def __init__(self, name: str, url: str, tier: int, **kwargs: Any) -> None:
        _httpx()  # the missing extra is named before anything else
        super().__init__(name, url, tier, **kwargs)

    async def request(self, method: str, url: str, body: Any = None, *,
                      headers: Mapping[str, str] | None = None,
                      timeout: float | None = None) -> tuple[int, Any]:  # fmt: skip
        """HttpTarget.request, awaited: `(status, decoded body)` for any HTTP status;
        connection errors and timeouts raise (httpx's TransportError and TimeoutException,
        which the runtime reads as "may have happened")."""
        httpx = _httpx()
        data = None if body is None and method == "GET" else _json_bytes(body)
        wait = self.send_timeout if timeout is None else timeout
        if not SHORT_LOOP.get():
            client = _client()
            resp = await client.request(method, url, content=data,
                                        headers=self._request_headers(data, headers),
                                        timeout=httpx.Timeout(wait))  # fmt: skip
        else:  # a loop of its own for this call only (a plain worker): no pool to keep
            async with httpx.AsyncClient(follow_redirects=False) as client:
                resp = await client.request(method, url, content=data,
                                            headers=self._request_headers(data, headers),
                                            timeout=httpx.Timeout(wait))  # fmt: skip
        return resp.status_code, _decode(resp.content)

    async def apply(self, effect_id: str, payload: Any, *, worker: str | None = None,
                    epoch: int | None = None, timeout: float | None = None) -> Any:  # fmt: skip
        """POST the payload; HttpTarget.apply's answers, awaited."""
        headers = self._send_headers(effect_id, worker, epoch)
        return self._applied(*await self.request("POST", self.url, payload, headers=headers,
                                                 timeout=timeout))  # fmt: skip

    async def query(self, effect_id: str, payload: Any = None) -> Any:
        """HttpTarget.query, awaited (an async lookup callable is awaited too)."""
        if self._lookup is None:
            raise self._no_lookup()
        if callable(self._lookup):
            found = self._lookup(effect_id, payload)
            return await found if inspect.isawaitable(found) else found
        url = self._lookup_url(effect_id, payload)
        return self._found(effect_id, *await self.request("GET", url))


# One httpx client per event loop, shared by every AsyncHttpTarget: a workflow may build its
# target per call, and a client costs a TLS context to make (tens of ms on the loop).
_CLIENTS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Any] = weakref.WeakKeyDictionary()


def _client() -> Any:
    loop = asyncio.get_running_loop()
    client = _CLIENTS.get(loop)
    if client is None:
        limits = _httpx().Limits(max_connections=None, max_keepalive_connections=64)
        client = _CLIENTS[loop] = _httpx().AsyncClient(follow_redirects=False, limits=limits)
    return client


def _httpx() -> Any:
    try:
        return importlib.import_module("httpx")
    except ImportError:
        raise InvalidInput("AsyncHttpTarget needs httpx: pip install "
                           "'interlock-runtime[async-http]'") from None  # fmt: skip


# True inside an event loop made for one call (effects.send runs an async target's coroutine
# with asyncio.run from a plain worker's thread): a pooled client would outlive its loop.
SHORT_LOOP: contextvars.ContextVar[bool] = contextvars.ContextVar("interlock_short_loop",
                                                                  default=False)  # fmt: skip


def _json_bytes(body: Any) -> bytes:
    """The stored text (sorted keys, stored.to_json_text): a resend of the same payload is the
    same bytes, whatever key order the payload came back from Postgres in."""
    return stored.to_json_text(body, "the request body").encode()


def _reason(status: int, body: Any) -> str:
    err = body.get("error") if isinstance(body, dict) else None
    if isinstance(err, dict):
        err = err.get("code") or err.get("type")
    return err if isinstance(err, str) and err else f"http_{status}"
