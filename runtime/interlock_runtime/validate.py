"""The hostile-input contract: every value a caller hands the runtime is checked here first.

The client API (runtime.py) and the CLI (cli/) call these before anything is written or
even read: an id, a name, a number, a JSON document. A refusal is an `InvalidInput` whose
message is one line saying what was wrong and what to pass instead; a value that passes is
returned in the form the runtime stores. The limits are module constants, listed in
docs/errors.md; what a stored value may be (JSON documents, the NUL and UTF-8 rule for
strings) is decided in stored.py (docs/design.md#stored-values).
"""

from __future__ import annotations

import difflib
import json
import math
import re
from collections.abc import Iterable
from typing import Any

from .errors import InvalidInput
from .stored import MAX_JSON_BYTES, MAX_JSON_DEPTH, json_text, string_problem, too_big, too_deep

MAX_ID_CHARS = 200
"""Workflow, grant and effect ids: 1-200 characters of letters, digits and _ . : @ / # = + -"""
MAX_NAME_CHARS = 256
"""Names (signal, action, status, version), principals and who-did-it fields."""
MAX_TEXT_CHARS = 16_384
"""Free text: reconcile evidence (newlines and tabs allowed)."""
MAX_SECONDS = 10 * 365 * 86_400.0
"""The longest timeout or expiry accepted: ten years (None means no limit where allowed)."""
_ID = re.compile(rf"[A-Za-z0-9_.:@/#=+-]{{1,{MAX_ID_CHARS}}}")
_SHOWN = 60


def shown(value: Any) -> str:
    """The value as an error message shows it: its repr, cut so a 10 MB string stays short."""
    text = repr(value)
    return text if len(text) <= _SHOWN else f"{text[:_SHOWN]}... ({len(text)} characters)"


def did_you_mean(word: str, known: Iterable[str]) -> str:
    """` (did you mean 'x'?)` when a known name is close to `word` (a typo), else ''."""
    close = difflib.get_close_matches(word, sorted(set(known)), n=1, cutoff=0.75)
    return f" (did you mean {close[0]!r}?)" if close and close[0] != word else ""


def _text_problem(value: str, *, newlines: bool) -> str | None:
    """What makes a string unstorable or unreadable, or None."""
    problem = string_problem(value)
    if problem:
        return problem
    allowed = "\n\t" if newlines else ""
    if any(not c.isprintable() and c not in allowed for c in value):
        return "it contains a control or invisible formatting character"
    return None


def identifier(value: Any, what: str = "workflow id") -> str:
    """An id: 1-200 characters of letters, digits and _ . : @ / # = + - (no spaces)."""
    if not isinstance(value, str) or not _ID.fullmatch(value):
        raise InvalidInput(
            f"{what} {shown(value)} is not valid: use 1-{MAX_ID_CHARS} characters of letters, "
            "digits and _ . : @ / # = + -"
        )
    return value


def name(value: Any, what: str, *, max_chars: int = MAX_NAME_CHARS) -> str:
    """A name or a who-did-it field: 1..max_chars printable characters, valid UTF-8, no NUL."""
    if not isinstance(value, str):
        raise InvalidInput(f"{what} must be a string, not {type(value).__name__}")
    if not value.strip():
        raise InvalidInput(f"{what} is empty: give 1-{max_chars} printable characters")
    if len(value) > max_chars:
        raise InvalidInput(f"{what} is {len(value)} characters long; the limit is {max_chars}")
    problem = _text_problem(value, newlines=False)
    if problem:
        raise InvalidInput(f"{what} {shown(value)} is refused: {problem}; use printable text")
    return value


def optional_name(value: Any, what: str, *, max_chars: int = MAX_NAME_CHARS) -> str | None:
    return None if value is None else name(value, what, max_chars=max_chars)


def text(value: Any, what: str, *, max_chars: int = MAX_TEXT_CHARS) -> str:
    """Free text (newlines and tabs allowed): non-empty, valid UTF-8, no NUL, bounded."""
    if not isinstance(value, str) or not value.strip():
        raise InvalidInput(f"{what} must be non-empty text")
    if len(value) > max_chars:
        raise InvalidInput(f"{what} is {len(value)} characters long; the limit is {max_chars}")
    problem = _text_problem(value, newlines=True)
    if problem:
        raise InvalidInput(f"{what} is refused: {problem}")
    return value


def choice(value: Any, what: str, allowed: Iterable[str]) -> str:
    """One of a fixed set of words."""
    options = tuple(allowed)
    if not isinstance(value, str) or value not in options:
        raise InvalidInput(f"{what} {shown(value)} is not one of: {', '.join(options)}")
    return value


def number(value: Any, what: str, *, low: float, high: float, low_open: bool = False,
           integer: bool = False, unit: str = "", from_text: bool = False) -> float:  # fmt: skip
    """A finite number in [low, high] (or (low, high] with low_open). With from_text (the
    CLI's arguments) a string is parsed first; the API takes numbers only. NaN, infinities,
    booleans and out-of-range values are refused. Returns an int when integer, else a float."""
    raw = value
    if from_text and isinstance(value, str):
        try:
            value = int(value) if integer else float(value)
        except ValueError:
            kind = "a whole number" if integer else "a number"
            raise InvalidInput(f"{what} {shown(raw)} is not {kind}") from None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InvalidInput(f"{what} must be a number, not {type(value).__name__}")
    if integer and (isinstance(value, float) and not value.is_integer()):
        raise InvalidInput(f"{what} must be a whole number, not {shown(raw)}")
    try:
        finite = math.isfinite(value)
    except OverflowError:  # an int too large for a float
        finite = False
    if not finite:
        raise InvalidInput(f"{what} must be a finite number, not {shown(raw)}")
    below = value <= low if low_open else value < low
    if below or value > high:
        lower = f"above {_fmt(low)}" if low_open else f"at least {_fmt(low)}"
        suffix = f" {unit}" if unit else ""
        raise InvalidInput(f"{what} must be {lower} and at most {_fmt(high)}{suffix}, "
                           f"not {shown(raw)}")  # fmt: skip
    return int(value) if integer else float(value)


def _fmt(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else str(x)


def seconds(value: Any, what: str, *, allow_zero: bool = True, optional: bool = True,
            high: float = MAX_SECONDS, from_text: bool = False) -> float | None:  # fmt: skip
    """A duration in seconds: finite, not negative (or positive when not allow_zero), at most
    ten years. None passes when optional (no timeout / no expiry)."""
    if value is None:
        if optional:
            return None
        raise InvalidInput(f"{what} is required: a number of seconds")
    return number(value, what, low=0, high=high, low_open=not allow_zero, unit="seconds",
                  from_text=from_text)  # fmt: skip


def count(value: Any, what: str, *, low: int = 1, high: int, from_text: bool = False) -> int:
    """A whole number in [low, high] (limits, concurrency, sequence numbers)."""
    return int(number(value, what, low=low, high=high, integer=True, from_text=from_text))


# -- JSON -------------------------------------------------------------------------------------


def _reject_constant(token: str) -> Any:
    raise InvalidInput(f"{token} is not a JSON number: give a finite number")


def parse_json(text_value: Any, what: str, *, max_bytes: int = MAX_JSON_BYTES) -> Any:
    """A JSON document given as text (a CLI argument): size, syntax, depth, NaN, NUL checked."""
    if not isinstance(text_value, str):
        raise InvalidInput(f"{what} must be JSON text")
    size = len(text_value.encode("utf-8", "surrogatepass"))
    if size > max_bytes:
        raise InvalidInput(too_big(what, size, max_bytes))
    depth = _text_depth(text_value)
    if depth > MAX_JSON_DEPTH:
        raise InvalidInput(too_deep(what, depth))
    try:
        value = json.loads(text_value, parse_constant=_reject_constant)
    except json.JSONDecodeError as exc:
        raise InvalidInput(f"{what} is not JSON ({exc}); give a JSON value such as "
                           "'{\"key\": 1}'") from None  # fmt: skip
    except RecursionError:
        raise InvalidInput(too_deep(what)) from None
    except ValueError as exc:  # e.g. an integer of more digits than Python converts
        raise InvalidInput(f"{what} is not usable JSON ({exc})") from None
    json_text(value, what, max_bytes=max_bytes)
    return value


def _text_depth(source: str) -> int:
    """The deepest bracket nesting outside strings: an upper bound of the document's depth,
    counted without parsing (json.loads of 100 000 '[' would hit the recursion limit)."""
    depth = deepest = 0
    in_string = escaped = False
    for c in source:
        if in_string:
            if escaped:
                escaped = False
            elif c == "\\":
                escaped = True
            elif c == '"':
                in_string = False
        elif c == '"':
            in_string = True
        elif c in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif c in "]}":
            depth -= 1
    return deepest
