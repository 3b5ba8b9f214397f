"""The validation module (validate.py) on its own, and the Runtime facade's use of it: each
known hostile input of issue 19 is refused with InvalidInput, one line, before anything is
read or written."""

from __future__ import annotations

import math
import threading
import time

import flows
import pytest

from interlock_runtime import InvalidInput, Runtime, validate
from interlock_runtime.errors import DatabaseUnreachable

BAD_IDS = ["", "id with space", "x" * 201, "a\n", "a\x00b", "\ud800", "é", 7, None, "'; --"]


@pytest.mark.parametrize("bad", BAD_IDS)
def test_identifier_refuses(bad) -> None:
    with pytest.raises(InvalidInput, match="is not valid: use 1-200 characters"):
        validate.identifier(bad)


@pytest.mark.parametrize("bad", ["", "   ", "a" * 257, "x\x00", "\udcff", "tab\there", "rtl\u202e",
                                 "line\nbreak", 3, None])  # fmt: skip
def test_name_refuses(bad) -> None:
    with pytest.raises(InvalidInput) as info:
        validate.name(bad, "principal")
    assert "\n" not in str(info.value) and len(str(info.value)) < 200


def test_messages_never_echo_a_huge_value() -> None:
    with pytest.raises(InvalidInput) as info:
        validate.name("p" * 10_000_000, "principal")
    assert len(str(info.value)) < 120 and "limit is 256" in str(info.value)


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf, "nan", "inf", "-1", -1, True, "x",
                                 "1e400", 10**400, [1]])  # fmt: skip
def test_seconds_refuses_non_finite_negative_and_non_numbers(bad) -> None:
    with pytest.raises(InvalidInput):
        validate.seconds(bad, "timeout", from_text=True)


def test_numbers_in_range_pass() -> None:
    assert validate.seconds("2.5", "timeout", from_text=True) == 2.5
    assert validate.seconds(None, "timeout") is None
    assert validate.count("4", "concurrency", high=256, from_text=True) == 4
    with pytest.raises(InvalidInput, match="must be a number, not str"):
        validate.seconds("5", "timeout")  # the API takes numbers, not text
    with pytest.raises(InvalidInput, match="at least 1"):
        validate.count(0, "concurrency", high=256)
    with pytest.raises(InvalidInput, match="whole number"):
        validate.count("1.5", "limit", high=10, from_text=True)
    with pytest.raises(InvalidInput, match="above 0"):
        validate.seconds(0, "expires_in", allow_zero=False)


def test_json_depth_size_and_constants() -> None:
    deep = "[" * 100_000 + "]" * 100_000
    with pytest.raises(InvalidInput, match="levels deep; the limit is 64"):
        validate.parse_json(deep, "--input")
    with pytest.raises(InvalidInput, match="NaN is not a JSON number"):
        validate.parse_json('{"a": NaN}', "--input")
    with pytest.raises(InvalidInput, match="limit is"):
        validate.parse_json('"' + "x" * (1 << 20) + '"', "--input")
    with pytest.raises(InvalidInput, match="not JSON"):
        validate.parse_json("{nope", "--input")
    with pytest.raises(InvalidInput, match="not usable JSON"):
        validate.parse_json("1" * 5000, "--input")
    nested: list = []
    for _ in range(70):
        nested = [nested]
    with pytest.raises(InvalidInput, match="more than 64 levels"):
        validate.json_text(nested, "input")
    cycle: list = []
    cycle.append(cycle)
    with pytest.raises(InvalidInput, match="more than 64 levels"):
        validate.json_text(cycle, "input")
    wide: list = []
    for _ in range(40):
        wide = [wide, wide]  # 2**40 items when written out
    with pytest.raises(InvalidInput, match="more than 1048576 items"):
        validate.json_text(wide, "input")
    assert validate.parse_json('{"a": [1, "]]]"]}', "--input") == {"a": [1, "]]]"]}
    assert validate.json_text([[[]]] * 3, "input") == "[[[]],[[]],[[]]]"


def _raised_within(seconds: float, fn) -> BaseException | str:
    """What fn raised, run in a thread; 'accepted' or 'hung' when it raised nothing."""
    box: dict = {}

    def body() -> None:
        try:
            fn()
            box["exc"] = "accepted"
        except BaseException as exc:  # noqa: BLE001 - the caller judges it
            box["exc"] = exc

    t = threading.Thread(target=body, daemon=True)
    t.start()
    t.join(seconds)
    return box.get("exc", f"hung for more than {seconds} s")


def _nested(levels: int) -> list:
    value: list = []
    for _ in range(levels - 1):
        value = [value]
    return value


def _counts(conn) -> dict[str, int]:
    tables = ("workflows", "signals", "grants", "steps")
    return {t: conn.execute(f"select count(*) as n from ilr.{t}").fetchone()["n"] for t in tables}


def test_the_facade_refuses_each_known_failure_before_writing(dsn, conn) -> None:
    with Runtime(dsn) as rt:
        rt.register(flows.waiter)
        rt.start(flows.waiter, "w1", {})
        before = _counts(conn)
        t0 = time.monotonic()
        cases = [
            lambda: rt.result("w1", timeout=math.nan),
            lambda: rt.result("w1", timeout=-1),
            lambda: rt.result("w1", timeout=math.inf),
            lambda: rt.approve("w1", {"a": 1}, by="ann", expires_in=-5),
            lambda: rt.grant("agent", "refund", by="ops", expires_in=-5),
            lambda: rt.grant("agent", "refund", by="ops", constraints={"amount": {"max": -1}}),
            lambda: rt.grant("agent", "refund", by="ops", constraints={"n": {"max": 2**60}}),
            lambda: rt.grant("p" * 10_000_000, "refund", by="ops"),
            lambda: rt.grant("agent", "refund", by="o\x00ps"),
            lambda: rt.list(limit=-1),
            lambda: rt.list(limit=0),
            lambda: rt.list(status="bogus"),
            lambda: rt.describe("a b"),
            lambda: rt.describe("\ud800"),
            lambda: rt.result("a\x00"),
            lambda: rt.revoke("g\x00"),
            lambda: rt.revoke("g1", by="x" * 300),
            lambda: rt.cancel("w1", by="\x1b[31m"),
            lambda: rt.signal("w1", "go", sender="\x00"),
            lambda: rt.signal("w1", "go", _nested(65)),
            lambda: rt.fork("w1", True, "w2"),
            lambda: rt.fork("bad id", 1, "w2"),
            lambda: rt.migrate("w1", "\x00"),
            lambda: rt.reconcile("eff_x", "seen\x00", by="ann"),
            lambda: rt.receipt("e f"),
            lambda: rt.reset_breaker(""),
            lambda: rt.start(flows.waiter, "w3", {"x": math.nan}),
            lambda: rt.start("waiter", "w3", {}, version="v\x00"),
        ]
        refused = 0
        for i, case in enumerate(cases):
            exc = _raised_within(5.0, case)  # a refusal is immediate: a wait fails the test
            assert isinstance(exc, InvalidInput), f"case {i}: {exc!r}"
            assert "\n" not in str(exc), (i, str(exc))
            refused += 1
        assert refused == len(cases)
        assert time.monotonic() - t0 < 10, "a refusal waited instead of refusing"
        assert _counts(conn) == before


def test_a_database_that_is_down_is_one_line_naming_the_address() -> None:
    with pytest.raises(DatabaseUnreachable) as info:
        Runtime("postgresql://postgres@127.0.0.1:1/nothing?connect_timeout=3")
    text = str(info.value)
    assert "127.0.0.1:1/nothing" in text and "interlock pg start" in text and "ILR_DSN" in text
    assert "\n" not in text
    with pytest.raises(InvalidInput, match="DSN is not valid"):
        Runtime("this is not a dsn")
