"""Typed values: dataclasses, pydantic models and a few standard types written as JSON with
their type recorded, so that a replay (and rt.result, rt.query) returns the same type
(docs/typed.md).

The format. A value made only of JSON types (dict, list, tuple, str, int, float, bool, None)
is written exactly as it always was: old journals replay unchanged and plain values cost
nothing. Every other supported value becomes an envelope, at whatever depth it sits:

    {"$ilr_type": TAG, "$ilr_value": DATA}

TAG is ``module:qualname`` for a dataclass, a pydantic (v2) model or a plain ``Enum``, or
one of the built-in tags: ``datetime``, ``date``, ``time``, ``timedelta``, ``uuid``,
``decimal``, and ``dict`` (a plain dict that itself holds the key ``$ilr_type``, kept literal).
A dataclass's DATA is its fields by name, each encoded the same way; a model's DATA is
``model_dump(mode="json")``; an Enum's is its value.

The rule that keeps decoding safe: nothing is unpickled, no module is imported, and no
callable named by the data is called. A TAG must name a class that is already loaded in this
process (found in ``sys.modules``, reached by its qualified name) and that is a dataclass, a
subclass of pydantic's ``BaseModel`` or an ``Enum``; decoding only calls its constructor (or
``model_validate``). A tag naming anything else (``os:system``, a function, a module that is
not loaded) is refused with RecordedTypeError. Encoding refuses, before anything is written,
what could not be decoded in another process: a class defined in a function or in the script
run as ``__main__``, sets, functions, sockets, any other object.

str and int enums (``class Color(str, Enum)``) are written as their value, as they always
were: JSON holds them, and old journals hold them so.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import functools
import sys
import types
import typing
import uuid
from collections.abc import Callable
from decimal import Decimal
from enum import Enum
from typing import Any

from .errors import NotRecordable, RecordedTypeError
from .stored import MAX_JSON_BYTES, MAX_JSON_DEPTH, too_deep, too_many_items
from .validate import shown

TYPE_KEY = "$ilr_type"
VALUE_KEY = "$ilr_value"
_PLAIN = (str, int, float, bool, type(None))
_SUPPORTED = ("JSON values, a dataclass, a pydantic model, datetime, date, time, timedelta, "
              "UUID, Decimal or an Enum")  # fmt: skip


# -- the classes a tag may name ------------------------------------------------------------


def is_model_class(cls: Any) -> bool:
    """A pydantic BaseModel subclass, recognised by its MRO (pydantic is never imported)."""
    return isinstance(cls, type) and any(
        base.__name__ == "BaseModel" and base.__module__.split(".")[0] == "pydantic"
        for base in cls.__mro__[1:]
    )


def _is_dataclass_type(cls: Any) -> bool:
    return isinstance(cls, type) and dataclasses.is_dataclass(cls)


def _is_plain_enum_type(cls: Any) -> bool:
    return isinstance(cls, type) and issubclass(cls, Enum) and not issubclass(cls, (str, int))


def _allowed(cls: Any) -> bool:
    return _is_dataclass_type(cls) or is_model_class(cls) or _is_plain_enum_type(cls)


def _lookup(tag: str) -> Any:
    """The object a module:qualname tag names, from loaded modules only; None if absent."""
    module_name, _, qualname = tag.partition(":")
    module = sys.modules.get(module_name)
    if module is None or not qualname:
        return None
    obj: Any = module
    for part in qualname.split("."):
        if part.startswith("__") or not part.isidentifier():
            return None  # no dunder walks (__class__, __globals__, ...)
        obj = getattr(obj, part, None)
        if obj is None:
            return None
    return obj


def tag_of(cls: type, path: str) -> str:
    """The tag that names cls, or NotRecordable when another process could not find it."""
    name = f"{cls.__module__}.{cls.__qualname__}"
    if cls.__module__ == "__main__":
        raise NotRecordable(f"{path}: {name} is defined in the script run as __main__, which a "
                            "worker cannot import; move the class into a module both import")  # fmt: skip
    if "<locals>" in cls.__qualname__:
        raise NotRecordable(f"{path}: {name} is defined inside a function; define the class at "
                            "module level so a worker can find it")  # fmt: skip
    tag = f"{cls.__module__}:{cls.__qualname__}"
    if _lookup(tag) is not cls:
        raise NotRecordable(f"{path}: {name} cannot be found again under that name (a "
                            "generic alias, or a class replaced after definition); record a "
                            "class reachable as module.ClassName")  # fmt: skip
    return tag


# -- encoding ------------------------------------------------------------------------------


class _Encoder:
    def __init__(self) -> None:
        self.active: set[int] = set()
        self.items = 0

    def __call__(self, value: Any, path: str, level: int) -> Any:
        self.items += 1
        if self.items > MAX_JSON_BYTES:
            raise NotRecordable(too_many_items(path))
        if isinstance(value, _PLAIN) and not _is_plain_enum_type(type(value)):
            return value  # str and int subclasses (str enums too) are written as JSON does
        if level > MAX_JSON_DEPTH:
            raise NotRecordable(too_deep(path))
        ident = id(value)
        if ident in self.active:
            raise NotRecordable(f"{path}: circular reference")
        self.active.add(ident)
        try:
            return self._container(value, path, level)
        finally:
            self.active.discard(ident)

    def _container(self, value: Any, path: str, level: int) -> Any:
        if isinstance(value, dict):
            out = {k: self(v, f"{path}[{k!r}]", level + 1) for k, v in value.items()}
            same = all(out[k] is value[k] for k in value)
            plain = value if same else out
            return {TYPE_KEY: "dict", VALUE_KEY: plain} if TYPE_KEY in value else plain
        if isinstance(value, (list, tuple)):
            items = [self(v, f"{path}[{i}]", level + 1) for i, v in enumerate(value)]
            if all(a is b for a, b in zip(items, value, strict=True)):
                return value  # unchanged: plain JSON stays the very same object
            return items
        cls = type(value)
        if isinstance(value, type):
            raise NotRecordable(f"{path}: {shown(value)} is a class, not a value; record an "
                                "instance, or the class's name as a string")  # fmt: skip
        if dataclasses.is_dataclass(value):
            fields = {f.name: self(getattr(value, f.name), f"{path}.{f.name}", level + 1)
                      for f in dataclasses.fields(value)}  # fmt: skip
            return {TYPE_KEY: tag_of(cls, path), VALUE_KEY: fields}
        if is_model_class(cls):
            tag = tag_of(cls, path)
            try:
                data = value.model_dump(mode="json")
            except Exception as exc:  # pydantic's own serialisation error, said once
                raise NotRecordable(f"{path}: {tag} cannot be dumped as JSON: {exc}") from None
            return {TYPE_KEY: tag, VALUE_KEY: self(data, path, level + 1)}
        if isinstance(value, Enum):
            return {TYPE_KEY: tag_of(cls, path), VALUE_KEY: self(value.value, path, level + 1)}
        return self._standard(value, path)

    def _standard(self, value: Any, path: str) -> Any:
        if isinstance(value, dt.datetime):
            return {TYPE_KEY: "datetime", VALUE_KEY: value.isoformat()}
        if isinstance(value, dt.date):
            return {TYPE_KEY: "date", VALUE_KEY: value.isoformat()}
        if isinstance(value, dt.time):
            return {TYPE_KEY: "time", VALUE_KEY: value.isoformat()}
        if isinstance(value, dt.timedelta):
            parts = [value.days, value.seconds, value.microseconds]
            return {TYPE_KEY: "timedelta", VALUE_KEY: parts}
        if isinstance(value, uuid.UUID):
            return {TYPE_KEY: "uuid", VALUE_KEY: str(value)}
        if isinstance(value, Decimal):
            if not value.is_finite():
                raise NotRecordable(f"{path}: Decimal {value} is not finite; record a finite one")
            return {TYPE_KEY: "decimal", VALUE_KEY: str(value)}
        name = type(value).__qualname__
        if isinstance(value, (set, frozenset)):
            hint = "JSON has no sets and a set has no stable order: record a sorted list"
        elif callable(value):
            hint = "code cannot be recorded: record the data it works on"
        else:
            hint = f"record {_SUPPORTED} instead"
        raise NotRecordable(f"{path}: a value of type {name} is not JSON-serializable and "
                            f"cannot be recorded; {hint}")  # fmt: skip


def encode(value: Any, what: str = "the value") -> Any:
    """value as JSON-ready data, typed parts in envelopes; plain JSON comes back as it is.

    Raises NotRecordable (an InvalidInput and a TypeError) naming where and what to do."""
    return _Encoder()(value, what, 0)


# -- decoding ------------------------------------------------------------------------------


def _hints(cls: type) -> dict[str, Any]:
    try:
        return typing.get_type_hints(cls)
    except Exception:  # unresolvable forward references: no hints, no conversions
        return {}


def _fit(value: Any, hint: Any) -> Any:
    """A tuple field comes back a tuple (JSON has only lists)."""
    origin = typing.get_origin(hint) or hint
    if origin is tuple and isinstance(value, list):
        return tuple(value)
    return value


def _class(tag: str) -> type:
    found = _lookup(tag)
    if found is None:
        module = tag.partition(":")[0]
        where = ("is not imported in this process; import it first (a worker imports what its "
                 "--module imports)" if module not in sys.modules else "has no such class now")  # fmt: skip
        raise RecordedTypeError(f"the recorded type {tag!r} cannot be found: module {module!r} "
                                f"{where}. If the class was renamed or removed, restore it "
                                "under its recorded name")  # fmt: skip
    if not _allowed(found):
        raise RecordedTypeError(f"the recorded type {tag!r} names {shown(found)}, which is not "
                                "a dataclass, a pydantic model or an Enum; refused (only those "
                                "are ever built from recorded data)")  # fmt: skip
    cls: type = found
    return cls


def _build(tag: str, data: Any) -> Any:
    cls = _class(tag)
    try:
        if _is_dataclass_type(cls):
            return _dataclass(cls, tag, data)
        if is_model_class(cls):
            return cls.model_validate(decode(data))  # type: ignore[attr-defined]
        return cls(decode(data))
    except RecordedTypeError:
        raise
    except Exception as exc:
        raise RecordedTypeError(f"the recorded {tag} no longer fits its class ({type(exc).__name__}: "
                                f"{' '.join(str(exc).split())[:300]}); the class changed since "
                                "it was recorded: make the change compatible (a new field needs "
                                "a default) or deploy it as a new workflow version") from None  # fmt: skip


def _dataclass(cls: type, tag: str, data: Any) -> Any:
    if not isinstance(data, dict):
        raise RecordedTypeError(f"the recorded {tag} holds {type(data).__name__}, not its fields")
    fields = {f.name: f for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - set(fields))
    if unknown:
        raise RecordedTypeError(f"the recorded {tag} has field(s) {', '.join(unknown)} that the "
                                "class no longer has; the class changed since it was recorded: "
                                "restore the field(s) or deploy the change as a new workflow "
                                "version")  # fmt: skip
    hints = _hints(cls)
    values = {k: _fit(decode(v), hints.get(k)) for k, v in data.items()}
    obj = cls(**{k: v for k, v in values.items() if fields[k].init})
    for name, value in values.items():
        if not fields[name].init:  # computed fields come back as recorded
            object.__setattr__(obj, name, value)
    return obj


_STANDARD: dict[str, Any] = {
    "datetime": dt.datetime.fromisoformat,
    "date": dt.date.fromisoformat,
    "time": dt.time.fromisoformat,
    "timedelta": lambda parts: dt.timedelta(
        days=parts[0], seconds=parts[1], microseconds=parts[2]
    ),  # fmt: skip
    "uuid": uuid.UUID,
    "decimal": Decimal,
}


def decode(value: Any) -> Any:
    """The value encode() was given, from its JSON data. Plain JSON comes back as it is.

    Raises RecordedTypeError for a tag it may not or cannot build (see the module's rule)."""
    if isinstance(value, list):
        items = [decode(v) for v in value]
        return value if all(a is b for a, b in zip(items, value, strict=True)) else items
    if not isinstance(value, dict):
        return value
    if TYPE_KEY not in value:
        out = {k: decode(v) for k, v in value.items()}
        return value if all(out[k] is value[k] for k in value) else out
    tag, data = value.get(TYPE_KEY), value.get(VALUE_KEY)
    if set(value) != {TYPE_KEY, VALUE_KEY} or not isinstance(tag, str):
        raise RecordedTypeError(f"a recorded value has the key {TYPE_KEY!r} but is not an "
                                f"envelope {{{TYPE_KEY}, {VALUE_KEY}}}: {shown(value)}")  # fmt: skip
    if tag == "dict":
        if not isinstance(data, dict):
            raise RecordedTypeError(f"a recorded dict envelope holds {type(data).__name__}")
        return {k: decode(v) for k, v in data.items()}
    if tag in _STANDARD:
        try:
            return _STANDARD[tag](data)
        except (TypeError, ValueError, ArithmeticError, IndexError) as exc:
            raise RecordedTypeError(
                f"the recorded {tag} {shown(data)} is malformed: {exc}"
            ) from None
    if ":" not in tag:
        raise RecordedTypeError(f"the recorded type {tag!r} is unknown: a tag is module:qualname "
                                f"or one of {', '.join(['dict', *_STANDARD])}")  # fmt: skip
    return _build(tag, data)


def type_of(value: Any) -> str | None:
    """The tag of a recorded value's outermost envelope (None for plain JSON), for display."""
    if isinstance(value, dict) and set(value) == {TYPE_KEY, VALUE_KEY}:
        tag = value[TYPE_KEY]
        return tag if isinstance(tag, str) and tag != "dict" else None
    return None


def shown_value(value: Any) -> Any:
    """What to show of a recorded value without building it: the outermost envelope's data."""
    return value[VALUE_KEY] if type_of(value) is not None else value


_FROM_TEXT: dict[Any, Any] = {
    dt.datetime: dt.datetime.fromisoformat,
    dt.date: dt.date.fromisoformat,
    dt.time: dt.time.fromisoformat,
    uuid.UUID: uuid.UUID,
    Decimal: Decimal,
}


# -- a plain document read as a declared type (`interlock start --input` to a typed workflow) --


def convert(value: Any, hint: Any, path: str = "the input") -> Any:
    """A plain JSON value read as `hint` (a dataclass, a pydantic model, list/tuple/dict of
    them, Optional); a value that already has the type, or any other hint, is left alone.
    Raises RecordedTypeError when the document does not fit."""
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        rest = [a for a in args if a is not type(None)]
        return convert(value, rest[0], path) if len(rest) == 1 else value
    if origin in (list, tuple) and isinstance(value, (list, tuple)):
        inner = args[0] if args else Any
        items = [convert(v, inner, f"{path}[{i}]") for i, v in enumerate(value)]
        return tuple(items) if origin is tuple else items
    if origin is dict and isinstance(value, dict) and len(args) == 2:
        return {k: convert(v, args[1], f"{path}[{k!r}]") for k, v in value.items()}
    if isinstance(value, str) and hint in _FROM_TEXT:
        try:
            return _FROM_TEXT[hint](value)
        except (ValueError, ArithmeticError) as exc:
            raise RecordedTypeError(
                f"{path}: {shown(value)} is not a {hint.__name__}: {exc}"
            ) from None
    if _is_plain_enum_type(hint) and not isinstance(value, (dict, list)):
        try:
            return hint(value)
        except ValueError as exc:
            raise RecordedTypeError(f"{path}: {exc}") from None
    if not isinstance(value, dict) or not isinstance(hint, type):
        return value
    try:
        if is_model_class(hint):
            return hint.model_validate(value)  # type: ignore[attr-defined]
        if _is_dataclass_type(hint):
            hints = _hints(hint)
            known = {f.name for f in dataclasses.fields(hint) if f.init}
            unknown = sorted(set(value) - known)
            if unknown:
                raise RecordedTypeError(f"{path}: {hint.__qualname__} has no field(s) "
                                        f"{', '.join(unknown)}")  # fmt: skip
            kwargs = {k: convert(v, hints.get(k, Any), f"{path}.{k}") for k, v in value.items()}
            return hint(**kwargs)
    except RecordedTypeError:
        raise
    except Exception as exc:
        raise RecordedTypeError(f"{path} does not fit {hint.__qualname__}: "
                                f"{' '.join(str(exc).split())[:300]}") from None  # fmt: skip
    return value


def input_hint(fn: Any) -> Any:
    """The type a workflow function `fn(ctx, input)` declares for its input, or None (no
    annotation, or one that does not resolve)."""
    resolve: Callable[[Any], Any]
    try:
        hash(fn)
        resolve = _declared_input
    except TypeError:  # a callable object that cannot be a cache key: resolved each time
        resolve = _declared_input.__wrapped__
    try:
        return resolve(fn)
    except Exception:  # unresolvable annotations: the input is used as recorded (not cached:
        return None  # a name defined later may resolve on the next run)


@functools.lru_cache(maxsize=4096)  # once per workflow function, not on every run
def _declared_input(fn: Any) -> Any:
    import inspect

    params = list(inspect.signature(fn).parameters.values())
    hints = typing.get_type_hints(fn)
    return hints.get(params[1].name) if len(params) >= 2 else None
