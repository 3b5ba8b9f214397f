"""Fuzzing the scenario loader (prove/scenario.py) with hostile files.

The loader's contract: a bad file raises ScenarioError (and nothing else), whose message names
the file, and the line and field when it knows them. Hypothesis feeds it random bytes, random
YAML-looking text, deep nesting, small alias bombs, huge numbers, non-UTF-8 bytes, wrong types,
unknown keys and mutated copies of the shipped scenarios.

The nine loader bugs this found (non-UTF-8 bytes, deep nesting, a 5000-digit integer, an
unhashable key, an unknown tag, a bad merge key, an empty tagged int, int and str keys in one
mapping, a collection alias bomb) each escaped as something other than ScenarioError; they
are fixed in the loader and kept below as regression tests, one each.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import hypothesis.strategies as st
import pytest
import yaml
from hypothesis import HealthCheck, given, settings

from prove.scenario import SCENARIOS, Scenario, ScenarioError, load

KNOWN_INVARIANTS: set[str] | None = None
SHIPPED = {p.stem: yaml.safe_load(p.read_text()) for p in sorted(SCENARIOS.glob("S*.yaml"))}
FUZZ = settings(max_examples=40, deadline=None, database=None, derandomize=True,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])  # fmt: skip


def known() -> set[str]:
    global KNOWN_INVARIANTS
    if KNOWN_INVARIANTS is None:
        from prove.scenario import _catalog_invariants

        KNOWN_INVARIANTS = _catalog_invariants()
    return KNOWN_INVARIANTS


def check(data: bytes, name: str = "S99.yaml") -> Scenario | None:
    """Load `data` as a scenario file; fail unless it loads or raises a ScenarioError that
    names the file (and a line within the file, when it gives one)."""
    with tempfile.TemporaryDirectory(prefix="scn-fuzz-") as tmp:
        path = Path(tmp) / name
        path.write_bytes(data)
        try:
            return load(path, known())
        except ScenarioError as err:
            assert err.path == str(path), (err.path, path)
            assert name in str(err), str(err)
            if err.line is not None:
                assert 1 <= err.line <= data.count(b"\n") + 1, (err.line, str(err))
                assert f"{name}:{err.line}:" in str(err), str(err)
            assert err.msg and str(err).strip(), repr(err)
            return None
        except BaseException as exc:  # noqa: BLE001 - the property: nothing else escapes
            raise AssertionError(f"{type(exc).__name__} escaped the loader: {exc}") from exc


# -- strategies ---------------------------------------------------------------------------------

YAML_BITS = st.sampled_from(
    ["id", "title", "tiers", "systems", "timeline", "oracle", "predicted", "invariants", "seeds",
     ":", " ", "\n", "  ", "- ", "[", "]", "{", "}", ",", "&a ", "*a", "!!str ", "!!int ",
     "!!binary ", "? ", "|", ">", "'", '"', "#", "---", "...", "~", "null", "1e999", "-0",
     "0x1F", ".nan", ".inf", "S01", "runtime", "\t", "%YAML 1.1\n", "<<: ", "\\u0000"]
)  # fmt: skip
HOSTILE_SCALARS = st.one_of(
    st.none(), st.booleans(), st.integers(), st.integers(min_value=10**30, max_value=10**60),
    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=40),
    st.sampled_from(["", "$nowhere", "$point", "S01", "runtime", "effect_after_send", "\x00",
                     "\udcff".encode("utf-8", "surrogatepass").decode("utf-8", "replace")]),
)  # fmt: skip
HOSTILE = st.recursive(
    HOSTILE_SCALARS,
    lambda inner: st.one_of(st.lists(inner, max_size=4),
                            st.dictionaries(st.text(max_size=8), inner, max_size=4)),
    max_leaves=12,
)  # fmt: skip


def paths(obj: Any, prefix: tuple = ()) -> list[tuple]:
    """Every path (keys and indexes) into a parsed scenario, the root included."""
    out = [prefix]
    if isinstance(obj, dict):
        for k, v in obj.items():
            out += paths(v, prefix + (k,))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            out += paths(v, prefix + (i,))
    return out


@st.composite
def mutated_scenario(draw: st.DrawFn) -> tuple[str, bytes]:
    """A shipped scenario with one to three mutations: a value replaced by a hostile one, a key
    deleted, an unknown key added, a list emptied."""
    sid = draw(st.sampled_from(sorted(SHIPPED)))
    doc = yaml.safe_load(yaml.safe_dump(SHIPPED[sid]))  # a private deep copy
    for _ in range(draw(st.integers(1, 3))):
        where = draw(st.sampled_from(paths(doc)))
        parent, last = doc, None
        for part in where[:-1]:
            parent = parent[part]
        last = where[-1] if where else None
        op = draw(st.sampled_from(["replace", "delete", "unknown_key", "empty"]))
        if last is None:
            if op == "unknown_key":
                doc[draw(st.text(min_size=1, max_size=10))] = draw(HOSTILE)
            continue
        if op == "replace":
            parent[last] = draw(HOSTILE)
        elif op == "delete":
            del parent[last]
        elif op == "unknown_key" and isinstance(parent[last], dict):
            parent[last][draw(st.text(min_size=1, max_size=10))] = draw(HOSTILE)
        elif op == "empty" and isinstance(parent[last], (list, dict)):
            parent[last] = type(parent[last])()
    text = yaml.safe_dump(doc, allow_unicode=True, default_flow_style=draw(st.booleans()))
    return f"{sid}.yaml", text.encode("utf-8", "surrogatepass")


def nested(depth: int, kind: str) -> bytes:
    if kind == "flow-list":
        return b"tiers: " + b"[" * depth + b"1" + b"]" * depth + b"\n"
    if kind == "flow-map":
        return b"oracle: " + b"{a: " * depth + b"1" + b"}" * depth + b"\n"
    lines = [b"  " * i + b"k:" for i in range(depth)]  # block mappings
    return b"params:\n" + b"\n".join(b"  " + line for line in lines) + b" 1\n"


def alias_bomb(levels: int, width: int, at: str) -> bytes:
    """A small 'billion laughs': each level aliases the previous one `width` times."""
    out = [f"x0: &a0 [{', '.join(['lol'] * width)}]"]
    out += [f"x{i}: &a{i} [{', '.join([f'*a{i - 1}'] * width)}]" for i in range(1, levels + 1)]
    return ("bombs:\n" + "".join(f"  {line}\n" for line in out) + f"{at}: *a{levels}\n").encode()


# -- the properties -------------------------------------------------------------------------------


@FUZZ
@given(st.binary(max_size=600))
def test_random_bytes(data: bytes) -> None:
    check(data)


@FUZZ
@given(st.lists(YAML_BITS, max_size=60).map("".join))
def test_random_yaml_looking_text(text: str) -> None:
    check(text.encode("utf-8", "surrogatepass"))


@FUZZ
@given(mutated_scenario())
def test_mutated_shipped_scenarios(named: tuple[str, bytes]) -> None:
    name, data = named
    check(data, name)


@FUZZ
@given(st.sampled_from(sorted(SHIPPED)), st.integers(0, 10_000), st.binary(min_size=1, max_size=4))
def test_non_utf8_and_control_bytes_spliced_into_a_shipped_file(sid: str, at: int,
                                                                junk: bytes) -> None:  # fmt: skip
    data = (SCENARIOS / f"{sid}.yaml").read_bytes()
    at %= len(data)
    check(data[:at] + junk + data[at:], f"{sid}.yaml")


@FUZZ
@given(st.integers(1, 120), st.sampled_from(["flow-list", "flow-map", "block"]))
def test_moderate_nesting(depth: int, kind: str) -> None:
    check(nested(depth, kind))


@FUZZ
@given(st.integers(1, 3), st.integers(1, 4),
       st.sampled_from(["params", "invariants", "tiers", "emulated", "title", "timeline"]))  # fmt: skip
def test_small_alias_bombs_and_aliases(levels: int, width: int, at: str) -> None:
    check(alias_bomb(levels, width, at))


@FUZZ
@given(st.sampled_from(sorted(SHIPPED)),
       st.sampled_from(["tiers", "seeds", "timing", "predicted"]),
       st.one_of(st.integers(20, 400).map(lambda n: "9" * n), st.sampled_from(
           ["1e999", "-1e999", ".nan", ".inf", "-.inf", "0x" + "f" * 300, "0o777", "1_000",
            "-0", "2.5", "1e-400"])))  # fmt: skip
def test_huge_and_odd_numbers(sid: str, field: str, number: str) -> None:
    doc = dict(SHIPPED[sid])
    text = yaml.safe_dump({k: v for k, v in doc.items() if k != field}, default_flow_style=False)
    values = {"tiers": f"[{number}]", "seeds": f"{{quick: {number}, full: 1}}",
              "timing": f"{{lease_ttl: {number}}}",
              "predicted": f"[{{system: runtime, tier: {number}, total_cents: {number}}}]"}  # fmt: skip
    check(f"{text}{field}: {values[field]}\n".encode(), f"{sid}.yaml")


def test_the_shipped_scenarios_still_load() -> None:
    # The harness above is not vacuous: good files load through the same check().
    for sid in SHIPPED:
        scn = check((SCENARIOS / f"{sid}.yaml").read_bytes(), f"{sid}.yaml")
        assert scn is not None and scn.id == sid


def test_the_check_itself_catches_an_escape(monkeypatch) -> None:
    def boom(path: Any, known_invariants: Any = None) -> None:
        raise KeyError("not a ScenarioError")

    monkeypatch.setitem(globals(), "load", boom)
    with pytest.raises(AssertionError, match="KeyError escaped"):
        check(b"id: S99\n")


def test_wrong_types_name_the_field_and_line() -> None:
    data = (SCENARIOS / "S01.yaml").read_text().replace("tiers: [1, 2, 3]", "tiers: three", 1)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "S01.yaml"
        path.write_text(data)
        with pytest.raises(ScenarioError) as e:
            load(path, known())
    assert e.value.where == "tiers" and e.value.line == 7, str(e.value)
    assert "S01.yaml:7: tiers:" in str(e.value)


# -- the loader bugs found (fix in prove/scenario.py; see each reason) ---------------------------


def strict_load(data: bytes, name: str = "S99.yaml") -> ScenarioError:
    """Load and return the ScenarioError; any other exception fails the test."""
    with tempfile.TemporaryDirectory(prefix="scn-bug-") as tmp:
        path = Path(tmp) / name
        path.write_bytes(data)
        with pytest.raises(ScenarioError) as e:
            load(path, known())
        assert name in str(e.value)
        return e.value


def test_refused_non_utf8_file() -> None:
    err = strict_load(b"id: S99\ntitle: caf\xe9\n")
    assert err.line == 2 and "not UTF-8" in err.msg, str(err)


def test_refused_deep_nesting() -> None:
    assert "nested too deeply" in strict_load(nested(3000, "flow-list")).msg


def test_refused_huge_integer_literal() -> None:
    err = strict_load(b"id: S99\ntiers: [" + b"9" * 5000 + b"]\n")
    assert isinstance(err, ScenarioError)


def test_refused_unhashable_key() -> None:
    strict_load(b"? [a, b]\n: 1\n")


def test_refused_unknown_tag() -> None:
    err = strict_load(b"id: !!python/object:os.system x\n")
    assert err.line == 1 and "not valid YAML" in err.msg, str(err)


def test_refused_bad_merge_key() -> None:
    strict_load(b"<<: 5\n")


def test_refused_empty_tagged_int() -> None:
    strict_load(b"id: !!int \n")


def test_refused_mixed_key_types() -> None:
    data = (SCENARIOS / "S01.yaml").read_text() + "timing: {1: x, lease_ttl: y}\n"
    strict_load(data.encode(), "S01.yaml")


def test_refused_collection_alias() -> None:
    # A one-level alias stands for a 'billion laughs' (nine levels of nine took 440 s of
    # validation): collection aliases are refused outright, and the message says so.
    base = (SCENARIOS / "S01.yaml").read_text().split("invariants:")[0]
    data = base + "invariants: &inv [AtMostOneCommit]\nemulated: *inv\n"
    err = strict_load(data.encode(), "S01.yaml")
    assert "alias" in err.msg, str(err)
