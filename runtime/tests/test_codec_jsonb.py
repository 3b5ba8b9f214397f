"""stored.stored_locally against Postgres: the value a jsonb column gives back, computed without a
round trip, must be exactly what Postgres returns, object key order included (a replay that
iterates a recorded dict must see the order the first run saw)."""

from __future__ import annotations

import os
import random

import pytest

from interlock_runtime import db, stored

SEED = int(os.environ.get("ILR_TEST_SEED", "20261203"))

# keys whose UTF-8 length differs from their length in characters, so an order by characters
# and the order by bytes disagree ("é" is 2 bytes, "€" 3, "𝄞" 4)
KEY_PARTS = ["a", "b", "Z", "_", "0", "é", "€", "𝄞", " ", "ab", "ba", "aa", ""]


def _key(rng: random.Random) -> str:
    return "".join(rng.choice(KEY_PARTS) for _ in range(rng.randint(0, 3)))


def _value(rng: random.Random, depth: int = 0) -> object:
    kind = rng.choice(["none", "bool", "int", "big", "str", "list", "dict", "dict"] if depth < 4
                      else ["none", "bool", "int", "str"])  # fmt: skip
    if kind == "none":
        return None
    if kind == "bool":
        return rng.random() < 0.5
    if kind == "int":
        return rng.randint(-(10**6), 10**6)
    if kind == "big":
        return rng.randint(-(10**30), 10**30)
    if kind == "str":
        return _key(rng) * rng.randint(0, 2)
    if kind == "list":
        return [_value(rng, depth + 1) for _ in range(rng.randint(0, 4))]
    return {_key(rng): _value(rng, depth + 1) for _ in range(rng.randint(0, 6))}


def _ordered(value: object) -> object:
    """The value with every object as a list of its (key, value) pairs in order: == then
    compares key order too, which dict equality ignores."""
    if isinstance(value, dict):
        return [(k, _ordered(v)) for k, v in value.items()]
    if isinstance(value, list):
        return [_ordered(v) for v in value]
    return value


def test_local_form_is_what_postgres_gives_back_key_order_included(conn) -> None:
    rng = random.Random(SEED)
    print(f"seed {SEED} (ILR_TEST_SEED)")
    values = [_value(rng) for _ in range(400)]
    values += [{"bb": 1, "a": 2, "é": 3, "€": 4, "ccc": 5}, {"€": 1, "aaa": 2}, {"ab": 1, "é": 2}]
    for value in values:
        local = stored.stored_locally(value)
        assert local is not stored.NEEDS_SERVER, value
        server = conn.execute("select %s::jsonb as v", (db.jsonb(value),)).fetchone()["v"]
        assert _ordered(local) == _ordered(server), f"seed {SEED}: {value!r}"


def test_what_only_postgres_can_say_still_asks_it(conn) -> None:
    for value in (1.5, [1, 2.0], {"a": 1, "b": {"c": 1e16}}, {1: "x", "y": 2}, (1, 2)):
        assert stored.stored_locally(value) is stored.NEEDS_SERVER, value
    # and as_stored then makes its round trip: 1e16 comes back an int, as jsonb prints it
    assert db.as_stored(conn, {"b": 1e16, "a": 1}) == {"a": 1, "b": 10000000000000000}


def test_as_stored_makes_no_round_trip_for_a_value_it_can_compute(dsn) -> None:
    closed = db.connect(dsn)
    closed.close()  # any statement on it would raise
    assert list(db.as_stored(closed, {"status": "ok", "id": 7, "é": [1, {"yy": 1, "x": 2}]})) == [
        "id", "é", "status"]  # fmt: skip
    with pytest.raises(Exception):  # noqa: B017,PT011 - psycopg's own error for a closed connection
        db.as_stored(closed, {"a": 0.5})
