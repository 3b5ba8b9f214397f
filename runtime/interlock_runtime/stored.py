"""What a value the runtime stores in Postgres may be, and the text it is stored as
(docs/design.md#stored-values).

One place for the rules every stored value obeys (workflow inputs, step outputs, signal
payloads, statuses, effect payloads, results, journal entries):

- JSON types only: dict with str keys, list, tuple, str, int, finite float, bool, None;
- no NaN or infinity, no integer longer than Python writes as text (4300 digits);
- no string (or key) holding NUL or a lone UTF-16 surrogate: jsonb and text refuse both;
- a caller's document at most MAX_JSON_DEPTH deep and MAX_JSON_BYTES long as UTF-8 JSON.

And the forms a value takes: `json_text` / `to_json_text` (sorted keys, compact, ASCII: the
text handed to a jsonb parameter and compared for equality), `canonical` (sorted keys,
compact, UTF-8: the text hashed into payload hashes, effect ids and receipts) and
`stored_locally` (the value as a jsonb column gives it back). Pure: no database access.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

from .errors import InvalidInput

MAX_JSON_BYTES = 1 << 20
"""A workflow input, signal payload, approval or constraints document, as UTF-8 JSON."""
MAX_JSON_DEPTH = 64
"""Nesting of arrays and objects in one JSON document."""
MAX_SAFE_INTEGER = 2**53
"""Numbers in constraint bounds stay within what a JSON reader holds exactly."""
MAX_INT_DIGITS = 4300
"""The longest integer Python writes as text by default (sys.set_int_max_str_digits)."""

_UNSTORABLE_CHAR = re.compile("[\x00\ud800-\udfff]")
_LONE_SURROGATE = re.compile("[\ud800-\udfff]")
_FINITE = (
    f"use finite numbers (no NaN or Infinity) and integers of at most {MAX_INT_DIGITS} digits "
    "(a longer one as a string)"
)
_JSON_TYPES = "pass JSON values only (dict, list, str, number, bool, None)"


# -- strings -----------------------------------------------------------------------------


def string_problem(value: str) -> str | None:
    """Why Postgres cannot store this string (NUL, or a lone surrogate that is no UTF-8), or
    None."""
    if "\x00" in value:
        return "it contains a NUL character"
    if _LONE_SURROGATE.search(value):
        return "it is not valid UTF-8 (a lone surrogate, e.g. from undecodable bytes)"
    return None


def unstorable(value: Any) -> bool:
    """True if any string (or key) in value holds NUL or a lone surrogate. Iterative: a
    value too deep for recursion is still walked."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            if _UNSTORABLE_CHAR.search(item):
                return True
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list | tuple):
            stack.extend(item)
    return False


def _unstorable_message(what: str) -> str:
    return (
        f"{what} is not storable in Postgres: it contains a NUL character or a lone "
        "UTF-16 surrogate (jsonb refuses both); remove or decode it"
    )


# -- limits ------------------------------------------------------------------------------


def too_deep(what: str, levels: int | None = None) -> str:
    """The message for a value nested deeper than MAX_JSON_DEPTH (levels when known)."""
    nests = f"{levels}" if levels is not None else f"more than {MAX_JSON_DEPTH}"
    return f"{what} nests {nests} levels deep; the limit is {MAX_JSON_DEPTH}: flatten it"


def too_many_items(what: str, limit: int = MAX_JSON_BYTES) -> str:
    """The message for a value of more items than its JSON could have bytes."""
    return f"{what} has more than {limit} items; the limit is {limit} bytes of JSON"


def too_big(what: str, size: int, limit: int = MAX_JSON_BYTES) -> str:
    """The message for a document of more than limit bytes of UTF-8 JSON."""
    return f"{what} is {size} bytes as JSON; the limit is {limit} bytes"


def depth(value: Any, *, max_items: int = MAX_JSON_BYTES, what: str = "the value") -> int:
    """The nesting depth of a Python JSON value, without recursion (a scalar is 0). A cycle
    counts as deeper than the limit; more than max_items items (each at least one byte of JSON,
    shared sub-values counted each time) is InvalidInput."""
    deepest = items = 0
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, level = stack.pop()
        items += 1
        if items > max_items:
            raise InvalidInput(too_many_items(what, max_items))
        if isinstance(item, dict | list | tuple):
            level += 1
            deepest = max(deepest, level)
            if level > MAX_JSON_DEPTH:
                return level
            stack.extend((v, level) for v in (item.values() if isinstance(item, dict) else item))
    return deepest


# -- the stored text ---------------------------------------------------------------------


def _dumps(value: Any, *, ascii: bool) -> str:
    return json.dumps(
        value, sort_keys=True, separators=(",", ":"), ensure_ascii=ascii, allow_nan=False
    )


def _what_to_do(exc: Exception) -> str:
    if isinstance(exc, RecursionError):
        return "it nests too deeply to write: flatten it"
    if isinstance(exc, ValueError) and "ircular" in str(exc):
        return "it contains itself: record a copy without the cycle"
    if isinstance(exc, ValueError):  # NaN, infinity, an integer too long to write
        return _FINITE
    return _JSON_TYPES


def _stored_text(value: Any, what: str, error: type[Exception]) -> str:
    try:
        text = _dumps(value, ascii=True)
    except (TypeError, ValueError, RecursionError) as exc:
        raise error(f"{what} is not JSON-serializable: {exc}; {_what_to_do(exc)}") from None
    # ASCII text escapes NUL as \u0000 and a surrogate as \udXXX: walk the value only then
    if ("\\u0000" in text or "\\ud" in text) and unstorable(value):
        raise error(_unstorable_message(what))
    return text


def to_json_text(value: Any, what: str) -> str:
    """The stored text of a value the runtime made (a step output, a result), or TypeError
    saying what to pass: JSON types, finite numbers, no NUL or lone surrogate. No size or
    depth limit (those bound what callers hand in: `json_text`)."""
    return _stored_text(value, what, TypeError)


def json_text(value: Any, what: str, *, max_bytes: int = MAX_JSON_BYTES) -> str:
    """The stored text of a value a caller handed in, or InvalidInput: the rules of
    `to_json_text`, at most MAX_JSON_DEPTH deep and max_bytes long."""
    if depth(value, max_items=max_bytes, what=what) > MAX_JSON_DEPTH:
        raise InvalidInput(too_deep(what))
    text = _stored_text(value, what, InvalidInput)
    size = len(text.encode())
    if size > max_bytes:
        raise InvalidInput(too_big(what, size, max_bytes))
    return text


def json_value(value: Any, what: str) -> Any:
    """The value as it will read back from jsonb's text (tuples become lists, ...); TypeError
    if it is not storable."""
    return None if value is None else json.loads(to_json_text(value, what))


# -- as jsonb gives it back --------------------------------------------------------------

NEEDS_SERVER: Any = object()
"""stored_locally's answer for a value only Postgres can say how jsonb gives back."""


def stored_locally(value: Any) -> Any:
    """The value as jsonb gives it back, where that is certain without asking: None, bools,
    ints and strings unchanged, lists item by item, objects with their keys in jsonb's order
    (shorter first by UTF-8 bytes, then bytewise; runtime/tests/test_codec_jsonb.py holds the
    rule to Postgres'). NEEDS_SERVER for a float, a key that is not a string, or any other type."""
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, list):
        items = [stored_locally(v) for v in value]
        return NEEDS_SERVER if any(v is NEEDS_SERVER for v in items) else items
    if isinstance(value, dict):
        if not all(isinstance(k, str) for k in value):
            return NEEDS_SERVER
        out = {}
        for key in sorted(value, key=_jsonb_key_order):
            out[key] = stored_locally(value[key])
            if out[key] is NEEDS_SERVER:
                return NEEDS_SERVER
        return out
    return NEEDS_SERVER  # floats (jsonb prints numbers its own way), and anything else


def _jsonb_key_order(key: str) -> tuple[int, bytes]:
    raw = key.encode("utf-8", "surrogatepass")
    return len(raw), raw


# -- the canonical text (hashes, effect ids, receipts) -----------------------------------


class NotJSON(TypeError):
    """A value cannot be written as canonical JSON; the message names where and why."""


def _check_json(value: Any, path: str, active: set[int]) -> None:
    # Walks the value once so the error can name the offending path; json.dumps alone only
    # says "Object of type X is not JSON serializable".
    if value is None or isinstance(value, bool):
        return
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise NotJSON(
                f"{path}: string is not valid Unicode text ({exc.reason} at index {exc.start})"
            ) from None
        return
    if isinstance(value, int):
        try:
            str(value)
        except ValueError:
            raise NotJSON(
                f"{path}: an integer of more than {MAX_INT_DIGITS} digits is not written as JSON; "
                "record it as a string"
            ) from None
        return
    if isinstance(value, float):
        if not math.isfinite(value):
            raise NotJSON(f"{path}: {value!r} is not a JSON number (NaN and infinities are not)")
        return
    if isinstance(value, (list, tuple, dict)):
        ident = id(value)
        if ident in active:
            raise NotJSON(f"{path}: circular reference")
        active.add(ident)
        try:
            if isinstance(value, dict):
                for key, item in value.items():
                    if not isinstance(key, str):
                        raise NotJSON(
                            f"{path}: key {key!r} is a {type(key).__name__}; canonical JSON "
                            "needs string keys (an int key would hash like its string)"
                        )
                    _check_json(item, f"{path}[{key!r}]", active)
            else:
                for index, item in enumerate(value):
                    _check_json(item, f"{path}[{index}]", active)
        finally:
            active.discard(ident)
        return
    hint = ""
    if type(value).__name__ == "Decimal":
        hint = " (convert database numerics with float() or int())"
    elif hasattr(value, "isoformat"):
        hint = " (write dates and times as ISO strings)"
    raise NotJSON(
        f"{path}: {type(value).__name__} is not JSON{hint}; allowed are dict with str keys, "
        "list, tuple, str, int, finite float, bool and None"
    )


def canonical(value: Any) -> str:
    """The canonical JSON text of value: sorted keys, no spaces, UTF-8 characters unescaped.

    Raises NotJSON (a TypeError) naming the offending path for anything that is not plain JSON:
    sets, bytes, Decimal, datetimes, non-string keys, NaN and infinities, lone surrogates.
    It differs from `json_text` only in leaving non-ASCII characters unescaped: hashes already
    sealed and effect ids already issued were computed over this text, so it never changes.
    """
    # Fast path in C; the Python walk runs only to name what is wrong, or when the text does not
    # read back as the value (json.dumps silently turns int keys into strings; tuples are fine).
    try:
        text = _dumps(value, ascii=False)
        text.encode("utf-8")
    except (TypeError, ValueError, RecursionError):
        _check_json(value, "value", set())
        raise
    if json.loads(text) != value:
        _check_json(value, "value", set())
    return text
