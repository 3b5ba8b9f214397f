"""codec.py without a database: round trips through JSON text, the plain-JSON format kept as it
was, refusals of what cannot be recorded, and the decoding rule (only dataclasses, pydantic
models and Enums, only from modules already loaded, never a callable the data names)."""

from __future__ import annotations

import dataclasses
import json
import socket
import sys
import uuid
from datetime import date, datetime, time, timedelta, timezone
from decimal import Decimal
from typing import Optional

import pytest
import typed_flows as tf

from interlock_runtime import codec
from interlock_runtime.errors import InvalidInput, NotRecordable, RecordedTypeError


@dataclasses.dataclass
class Node:
    name: str
    children: list[Node] = dataclasses.field(default_factory=list)
    parent: Optional[str] = None  # noqa: UP045 - the old spelling must work too
    by_name: dict[str, Node] = dataclasses.field(default_factory=dict)
    extra: object = None


@dataclasses.dataclass
class Computed:
    a: int
    doubled: int = dataclasses.field(init=False)

    def __post_init__(self) -> None:
        self.doubled = self.a * 2


def _through_json(value):
    """What a journal row gives back: encode, JSON text (as jsonb stores it), decode."""
    return codec.decode(json.loads(json.dumps(codec.encode(value))))


def test_plain_json_is_written_as_before_and_comes_back_as_the_same_object() -> None:
    for plain in (None, True, 3, 2.5, "s", [1, {"a": [None]}], {"k": {"n": [1, 2]}}, (1, 2)):
        assert codec.encode(plain) is plain
        assert codec.decode(plain) is plain
    assert _through_json((1, 2)) == [1, 2]  # a tuple is a JSON array, as it always was


def test_dataclasses_models_and_standard_types_round_trip_nested() -> None:
    order = tf.Order("o", [tf.Line("a", 1)], datetime(2026, 1, 2, 3, 4, 5, 6, tzinfo=timezone.utc),
                     Decimal("0.10"), gift=None)  # fmt: skip
    approval = tf.Approval(by="ann", at=datetime(2026, 1, 1), lines=[tf.Line("b", 2)])
    tree = Node("root", [Node("a"), Node("b", parent="root")], by_name={"c": Node("c")},
                extra={"any": [approval, tf.Stage.WAITING, uuid.UUID(int=7)]})  # fmt: skip
    values = [order, approval, tree, tf.Progress(tf.Stage.LABELLED, (tf.Line("x", 1),), approval),
              [tf.Line("l", 1), None], {"when": date(2026, 5, 1), "t": time(1, 2, 3)},
              timedelta(days=-1, seconds=5, microseconds=7), Decimal("-1e-30")]  # fmt: skip
    for value in values:
        back = _through_json(value)
        assert back == value and type(back) is type(value)
    back = _through_json(tree)
    assert type(back.children[0]) is Node and type(back.by_name["c"]) is Node
    assert type(back.extra["any"][0]) is tf.Approval and back.extra["any"][1] is tf.Stage.WAITING
    progress = _through_json(tf.Progress(tf.Stage.WAITING, (tf.Line("x", 1),)))
    assert isinstance(progress.packed, tuple)  # a tuple field comes back a tuple
    computed = _through_json(Computed(4))
    assert (computed.a, computed.doubled) == (4, 8)


def test_the_envelope_names_the_class_and_a_users_own_type_key_stays_literal() -> None:
    assert codec.encode(tf.Line("a", 1)) == {
        "$ilr_type": "typed_flows:Line", "$ilr_value": {"sku": "a", "qty": 1}}  # fmt: skip
    literal = {"$ilr_type": "os:system", "$ilr_value": "rm -rf /", "other": [1]}
    encoded = codec.encode(literal)
    assert encoded == {"$ilr_type": "dict", "$ilr_value": literal}
    assert _through_json(literal) == literal
    assert _through_json({"deep": [literal]}) == {"deep": [literal]}


class LocalHolder:
    pass


def test_what_cannot_be_recorded_is_refused_with_what_to_do() -> None:
    def make_local():
        @dataclasses.dataclass
        class Local:
            x: int

        return Local(1)

    main_cls = dataclasses.make_dataclass("Script", [("x", int)])
    main_cls.__module__ = "__main__"
    sock = socket.socket()
    try:
        cases = [
            ({"tags": {"a"}}, r"the value\['tags'\]: a value of type set.*sorted list"),
            ([frozenset()], "set"),
            (lambda: 1, "function is not JSON-serializable and cannot be recorded; code"),
            (sock, "type socket is not JSON-serializable"),
            (b"raw", "type bytes is not JSON-serializable"),
            (make_local(), "inside a function; define the class at module level"),
            (main_cls(1), "__main__.*move the class into a module"),
            (tf.Line, "is a class, not a value"),
            (LocalHolder(), "type LocalHolder is not JSON"),
            (Decimal("NaN"), "not finite"),
        ]
        for value, says in cases:
            with pytest.raises(NotRecordable, match=says):
                codec.encode(value)
    finally:
        sock.close()
    with pytest.raises(InvalidInput):  # NotRecordable is InvalidInput and TypeError
        codec.encode({1, 2})
    with pytest.raises(TypeError):
        codec.encode({1, 2})
    cycle: list = []
    cycle.append(cycle)
    with pytest.raises(NotRecordable, match="circular reference"):
        codec.encode([tf.Line("a", 1), cycle])
    deep: list = []
    for _ in range(200):
        deep = [deep]
    with pytest.raises(NotRecordable, match="nests more than 64 levels"):
        codec.encode(deep)


@pytest.mark.parametrize(
    ("tag", "says"),
    [
        ("os:system", "names <built-in function system>, which is not a dataclass"),
        ("builtins:eval", "not a dataclass"),
        ("subprocess:Popen", "not a dataclass"),
        ("builtins:type", "not a dataclass"),
        ("typed_flows:pack", "not a dataclass"),  # a function of a loaded module
        ("typed_flows:Line.__init__", "cannot be found"),  # no dunder walks
        ("typed_flows:os.system", "not a dataclass"),
        ("typed_flows:Vanished", "has no such class now"),
        ("antigravity:Anything", "is not imported in this process"),  # never imported
        ("no_such_module:X", "is not imported in this process"),
        ("nonsense", "a tag is module:qualname"),
    ],
)
def test_a_tag_that_names_anything_but_an_allowed_class_is_refused(tag: str, says: str) -> None:
    with pytest.raises(RecordedTypeError, match=says):
        codec.decode({"$ilr_type": tag, "$ilr_value": {}})
    assert "antigravity" not in sys.modules


def test_a_changed_or_corrupt_record_is_a_clear_error() -> None:
    recorded = {"$ilr_type": "typed_flows:Line", "$ilr_value": {"sku": "a", "qty": 1, "old": 2}}
    with pytest.raises(RecordedTypeError, match="field.*old.*no longer has.*new workflow version"):
        codec.decode(recorded)
    missing = {"$ilr_type": "typed_flows:Line", "$ilr_value": {"sku": "a"}}
    with pytest.raises(RecordedTypeError, match="no longer fits its class.*default"):
        codec.decode(missing)
    model = {"$ilr_type": "typed_flows:Approval", "$ilr_value": {"by": "ann"}}
    with pytest.raises(RecordedTypeError, match="typed_flows:Approval no longer fits"):
        codec.decode(model)
    with pytest.raises(RecordedTypeError, match="not an envelope"):
        codec.decode({"$ilr_type": "typed_flows:Line", "$ilr_value": {}, "x": 1})
    with pytest.raises(RecordedTypeError, match="malformed"):
        codec.decode({"$ilr_type": "datetime", "$ilr_value": "yesterday"})
    with pytest.raises(RecordedTypeError, match="not a member|is not a valid"):
        codec.decode({"$ilr_type": "typed_flows:Stage", "$ilr_value": "gone"})


def test_a_plain_document_is_read_as_the_declared_input_type() -> None:
    assert codec.input_hint(tf.typed_order) is tf.Job
    assert codec.input_hint(tf.typed_input_only) is object
    doc = {"order": {"id": "o", "lines": [{"sku": "a", "qty": 1}], "total": "2.50",
                     "placed": "2026-01-01T00:00:00+00:00", "gift": None}, "log": "/x"}  # fmt: skip
    job = codec.convert(doc, tf.Job)
    assert job == tf.Job(tf.Order("o", [tf.Line("a", 1)],
                                  datetime(2026, 1, 1, tzinfo=timezone.utc), Decimal("2.50")),
                         "/x")  # fmt: skip
    already = tf.Line("a", 1)
    assert codec.convert(already, tf.Line) is already
    assert codec.convert({"by": "ann", "at": "2026-01-01T00:00:00", "lines": []},
                         tf.Approval) == tf.Approval(by="ann", at=datetime(2026, 1, 1), lines=[])  # fmt: skip
    with pytest.raises(RecordedTypeError, match="has no field.*colour"):
        codec.convert({"sku": "a", "qty": 1, "colour": "red"}, tf.Line)
    with pytest.raises(RecordedTypeError, match="does not fit Line"):
        codec.convert({"sku": "a"}, tf.Line)


def test_input_hint_is_resolved_once_per_function_and_again_while_it_does_not_resolve() -> None:
    """The declared input type is looked up once per workflow function (not on every run);
    an annotation that does not resolve yet is not remembered, so it resolves once it can."""
    from interlock_runtime import codec

    ns: dict = {}
    exec("from __future__ import annotations\ndef wf(ctx, inp: Later): pass", ns)
    assert codec.input_hint(ns["wf"]) is None
    exec("class Later: pass", ns)  # the function's globals now define it
    assert codec.input_hint(ns["wf"]) is ns["Later"]
    hits = codec._declared_input.cache_info().hits
    assert codec.input_hint(ns["wf"]) is ns["Later"]
    assert codec._declared_input.cache_info().hits == hits + 1
