"""stored.py: each rule of what a stored value may be, and each form it takes (pure, no
Postgres; test_codec_jsonb.py holds stored_locally to Postgres' own answers)."""

from __future__ import annotations

import hashlib
import sys

import pytest

from interlock_runtime import journal, stored, validate
from interlock_runtime.errors import InvalidInput

# -- the stored text ---------------------------------------------------------------------


def test_stored_text_is_sorted_compact_and_ascii() -> None:
    value = {"b": [1, 2.5, None, True], "a": "é", "c": (1, 2)}
    assert stored.to_json_text(value, "v") == '{"a":"\\u00e9","b":[1,2.5,null,true],"c":[1,2]}'
    assert stored.json_text(value, "v") == stored.to_json_text(value, "v")


@pytest.mark.parametrize(
    ("value", "words"),
    [
        (float("nan"), ["not JSON-serializable", "finite numbers"]),
        ({"x": float("inf")}, ["not JSON-serializable", "finite numbers"]),
        (10**5000, ["not JSON-serializable", "integers of at most 4300 digits"]),
        ({"x": {1, 2}}, ["not JSON-serializable", "pass JSON values only"]),
        ({"x": b"raw"}, ["not JSON-serializable", "pass JSON values only"]),
        ({"x": "a\x00b"}, ["not storable in Postgres", "NUL", "remove or decode it"]),
        (["\ud800"], ["not storable in Postgres", "surrogate", "remove or decode it"]),
        ({"k\x00": 1}, ["not storable in Postgres"]),
        ({"k\udcff": 1}, ["not storable in Postgres"]),
    ],
    ids=["nan", "inf", "huge-int", "set", "bytes", "nul", "surrogate", "nul-key", "surrogate-key"],
)
def test_unstorable_values_are_refused_saying_what_to_do(value: object, words: list[str]) -> None:
    # the same rule, two error types: a value the runtime made (TypeError), a caller's (InvalidInput)
    with pytest.raises(TypeError) as made:
        stored.to_json_text(value, "the output")
    with pytest.raises(InvalidInput) as given:
        stored.json_text(value, "the input")
    assert not isinstance(made.value, InvalidInput)
    for word in words:
        assert word in str(made.value)
        assert word in str(given.value)
    assert str(made.value).startswith("the output ")
    assert str(given.value).startswith("the input ")


def test_escaped_text_that_is_not_a_nul_or_surrogate_passes() -> None:
    # the text hints at \u0000 / \ud..., but the strings hold the escapes literally
    for value in ("\\u0000", "\\ud800", {"\\u0000": "\\udfff"}):
        assert stored.json_value(value, "v") == value


def test_a_callers_document_is_bounded_in_depth() -> None:
    ok: object = 1
    for _ in range(stored.MAX_JSON_DEPTH):
        ok = [ok]
    assert stored.json_text(ok, "input").count("[") == stored.MAX_JSON_DEPTH
    with pytest.raises(
        InvalidInput, match="input nests more than 64 levels deep; the limit is 64: flatten it"
    ):
        stored.json_text([ok], "input")
    assert stored.to_json_text([ok], "output").count("[") == 65  # a made value is not bounded


def test_a_cycle_is_refused_as_too_deep_not_a_recursion_error() -> None:
    loop: list = []
    loop.append(loop)
    assert stored.depth(loop) == stored.MAX_JSON_DEPTH + 1  # the walk stops one past the limit
    with pytest.raises(InvalidInput, match="more than 64 levels"):
        stored.json_text(loop, "input")
    with pytest.raises(
        TypeError, match="not JSON-serializable: .* record a copy without the cycle"
    ):
        stored.to_json_text(loop, "output")


def test_a_made_value_too_deep_to_write_says_to_flatten_it() -> None:
    deep: list = []
    for _ in range(sys.getrecursionlimit() * 2):
        deep = [deep]
    with pytest.raises(TypeError, match="not JSON-serializable: .* too deeply to write: flatten"):
        stored.to_json_text(deep, "output")


def test_a_callers_document_is_bounded_in_size_and_items() -> None:
    assert stored.json_text("x" * 10, "input", max_bytes=12) == '"xxxxxxxxxx"'
    with pytest.raises(InvalidInput, match="input is 13 bytes as JSON; the limit is 12 bytes"):
        stored.json_text("x" * 11, "input", max_bytes=12)
    with pytest.raises(
        InvalidInput, match="input has more than 12 items; the limit is 12 bytes of JSON"
    ):
        stored.json_text([0] * 20, "input", max_bytes=12)
    assert stored.MAX_JSON_BYTES == 1 << 20
    with pytest.raises(InvalidInput, match="the limit is 1048576 bytes"):
        stored.json_text("x" * stored.MAX_JSON_BYTES, "input")


def test_a_document_given_as_text_meets_the_same_limits() -> None:
    with pytest.raises(
        InvalidInput, match="--input nests 70 levels deep; the limit is 64: flatten"
    ):
        validate.parse_json("[" * 70 + "]" * 70, "--input")
    with pytest.raises(InvalidInput, match="--input is 13 bytes as JSON; the limit is 12 bytes"):
        validate.parse_json('"' + "x" * 11 + '"', "--input", max_bytes=12)
    with pytest.raises(InvalidInput, match="not storable in Postgres"):
        validate.parse_json('{"a": "\\u0000"}', "--input")


def test_unstorable_walks_values_too_deep_for_recursion() -> None:
    deep: object = "\x00"
    for _ in range(sys.getrecursionlimit() * 2):
        deep = {"k": [deep]}
    assert stored.unstorable(deep)
    assert not stored.unstorable({"k": ["fine", 1, None, ("tuple",)]})
    assert stored.unstorable({"k": ("\ud800",)})


def test_string_problem_names_nul_and_lone_surrogates() -> None:
    assert stored.string_problem("fine é \u202e") is None
    assert stored.string_problem("a\x00") == "it contains a NUL character"
    assert "not valid UTF-8" in (stored.string_problem("\udc80") or "")
    with pytest.raises(InvalidInput, match="NUL character"):  # validate's names use the rule
        validate.name("a\x00", "signal name")


def test_json_value_is_the_value_as_its_text_reads_back() -> None:
    assert stored.json_value(None, "v") is None
    assert stored.json_value({"t": (1, 2)}, "v") == {"t": [1, 2]}
    with pytest.raises(TypeError, match="not storable in Postgres"):
        stored.json_value({"s": "\x00"}, "v")


# -- as jsonb gives it back --------------------------------------------------------------


def test_stored_locally_orders_keys_as_jsonb_does() -> None:
    got = stored.stored_locally({"bb": 1, "a": {"é": 1, "z": 2, "yy": 3}, "c": [True, None]})
    assert list(got) == ["a", "c", "bb"]  # shorter first, then bytewise
    assert list(got["a"]) == ["z", "yy", "é"]  # "é" is two bytes of UTF-8, 0xc3 0xa9
    assert got["c"] == [True, None]


def test_stored_locally_leaves_floats_and_other_keys_to_the_server() -> None:
    for value in (0.5, [1, 2.0], {"a": {"b": 1e16}}, {1: "one"}, (1, 2), {"s": {1}}):
        assert stored.stored_locally(value) is stored.NEEDS_SERVER, value


# -- the canonical text ------------------------------------------------------------------


def test_canonical_keeps_unicode_where_the_stored_text_escapes_it() -> None:
    assert stored.canonical({"b": 1, "a": "é"}) == '{"a":"é","b":1}'
    assert stored.json_text({"b": 1, "a": "é"}, "v") == '{"a":"\\u00e9","b":1}'
    assert stored.canonical({"b": [1, 2.5]}) == stored.json_text({"b": [1, 2.5]}, "v")


def test_canonical_text_of_an_effect_key_never_changes() -> None:
    # effect ids already issued were hashed over this text: non-ASCII stays unescaped
    digest = hashlib.sha256('{"request_id":"café"}'.encode()).hexdigest()
    assert journal.effect_id_for("café") == "eff_" + digest[:32]


@pytest.mark.parametrize(
    ("value", "words"),
    [
        ({1: "one"}, ["key 1", "string keys"]),
        ({"s": "\ud800"}, ["value['s']", "not valid Unicode"]),
        ({"x": [float("nan")]}, ["value['x'][0]", "NaN"]),
        ({"x": {1}}, ["set is not JSON", "allowed are"]),
        ({"n": 10**5000}, ["value['n']", "more than 4300 digits", "as a string"]),
    ],
    ids=["int-key", "surrogate", "nan", "set", "huge-int"],
)
def test_canonical_names_where_a_value_is_not_json(value: object, words: list[str]) -> None:
    with pytest.raises(stored.NotJSON) as info:
        stored.canonical(value)
    for word in words:
        assert word in str(info.value)


# -- one rule, one place -----------------------------------------------------------------


def test_the_journal_hashes_with_the_canonical_text() -> None:
    assert journal.canonical is stored.canonical
    assert journal.NotJSON is stored.NotJSON
