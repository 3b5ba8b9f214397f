"""A workflow's declared input type, described and checked at the door (docs/typed.md#checked-at-the-door).

`describe(hint)` turns the annotation of a workflow's input parameter (a dataclass or a
pydantic v2 model, and what codec.py records inside them) into a description: a subset of
JSON Schema that a worker stores with its deployment, so that a client without the class
(`interlock start`, a start by name) can check a document against it. `check(description,
document)` is that check, written here for the subset `describe` makes and the keywords a
pydantic model's `model_json_schema()` uses; any other keyword is not checked. A refusal is
InvalidInput with one line naming the offending field: `topic.tags[2]: expected str, got int`.

`check_local(hint, value)` is the check of a client that has the class: the same description
check (so both kinds of start refuse the same documents with the same words), then, when the
input type is a pydantic model, the model's own validation (its validators run there too).

Pure: no database access; pydantic is never imported (a model's own methods are called).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import enum
import functools
import json
import operator
import re
import types
import typing
import uuid
from collections.abc import Callable
from decimal import Decimal, InvalidOperation
from typing import Any

from .codec import TYPE_KEY, VALUE_KEY, is_model_class
from .errors import InvalidInput
from .stored import MAX_JSON_DEPTH
from .validate import shown

Description = dict[str, Any]

_REF = "#/$defs/"
_LONGEST_NAME = 80  # a field name shown as it is; a longer one is quoted and cut
_MAX_REF_HOPS = 64  # a stored description is data: a $ref cycle must end, not hang a start
_JSON_NAMES = {
    "string": "str",
    "integer": "int",
    "number": "float",
    "boolean": "bool",
    "null": "None",
    "array": "list",
    "object": "object",
}
_FORMATS: dict[Any, str] = {
    dt.datetime: "date-time",
    dt.date: "date",
    dt.time: "time",
    uuid.UUID: "uuid",
    Decimal: "decimal",
}


# -- describing a type ---------------------------------------------------------------------


def describe(hint: Any) -> Description | None:
    """The description of a declared input type, or None when nothing is checked at the door:
    no annotation, or one that is not a dataclass or a pydantic model (Optional of one too).
    Made once per type (a start with the function describes it each time)."""
    try:
        return _described(hint)
    except TypeError:  # an unhashable annotation: described each time
        return _described.__wrapped__(hint)


@functools.lru_cache(maxsize=1024)
def _described(hint: Any) -> Description | None:
    core = [a for a in _union_args(hint) if a is not type(None)]
    if len(core) != 1 or not (_is_dataclass(core[0]) or is_model_class(core[0])):
        return None
    defs: dict[str, Description] = {}
    root = _Describer(defs).of(hint)
    try:  # as it comes back from jsonb, so that a registration compares like with like
        described: Description = json.loads(json.dumps({**root, "$defs": defs} if defs else root))
    except (TypeError, ValueError):  # a model's schema holding a non-JSON default
        return None
    return described


def _union_args(hint: Any) -> tuple[Any, ...]:
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        return typing.get_args(hint)
    return (hint,)


def _is_dataclass(cls: Any) -> bool:
    return isinstance(cls, type) and dataclasses.is_dataclass(cls)


def _key(cls: type) -> str:
    return f"{cls.__module__}:{cls.__qualname__}"


class _Describer:
    def __init__(self, defs: dict[str, Description]) -> None:
        self.defs = defs

    def of(self, hint: Any) -> Description:
        if hint is Any or hint is object:
            return {}
        if hint is None or hint is type(None):
            return {"type": "null"}
        origin, args = typing.get_origin(hint), typing.get_args(hint)
        if origin in (typing.Union, types.UnionType):
            return {"anyOf": [self.of(a) for a in args]}
        if origin is typing.Literal:
            return {"enum": list(args)} if all(_json_scalar(a) for a in args) else {}
        if origin is typing.Annotated:
            return self.of(args[0])
        if origin in (list, tuple) or hint in (list, tuple):
            return self._sequence(origin or hint, args)
        if origin is dict or hint is dict:
            value = self.of(args[1]) if len(args) == 2 else {}
            return {"type": "object", "additionalProperties": value}
        if not isinstance(hint, type):
            return {}  # a TypeVar, a Protocol, a string that did not resolve: not checked
        return self._class(hint)

    def _sequence(self, origin: Any, args: tuple[Any, ...]) -> Description:
        if origin is tuple and args and not (len(args) == 2 and args[1] is Ellipsis):
            if args == ((),):
                return {"type": "array", "maxItems": 0}
            return {
                "type": "array",
                "prefixItems": [self.of(a) for a in args],
                "minItems": len(args),
                "maxItems": len(args),
            }
        return {"type": "array", "items": self.of(args[0])} if args else {"type": "array"}

    def _class(self, cls: type) -> Description:
        if cls is bool:  # before int: a bool is an int in Python, not in JSON
            return {"type": "boolean"}
        for plain, name in ((str, "string"), (int, "integer"), (float, "number")):
            if cls is plain:
                return {"type": name}
        for typ, fmt in _FORMATS.items():
            if cls is typ:
                return {"type": "string", "format": fmt}
        if issubclass(cls, enum.Enum):
            values = [member.value for member in cls]
            ok = all(_json_scalar(v) for v in values)
            return {"enum": values, "title": cls.__qualname__} if ok else {}
        if _is_dataclass(cls):
            return self._dataclass(cls)
        if is_model_class(cls):
            return self._model(cls)
        return {}  # another class: recorded as it comes, not checked here

    def _dataclass(self, cls: type) -> Description:
        key = _key(cls)
        if key not in self.defs:
            self.defs[key] = {}  # placed first: a class that holds itself refers to itself
            try:
                hints = typing.get_type_hints(cls)
            except Exception:  # annotations that do not resolve: its fields are not checked
                hints = {}
            fields = [f for f in dataclasses.fields(cls) if f.init]
            required = [
                f.name
                for f in fields
                if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
            ]
            self.defs[key].update(
                {
                    "type": "object",
                    "title": cls.__qualname__,
                    "properties": {f.name: self.of(hints.get(f.name, Any)) for f in fields},
                    "required": required,
                    "additionalProperties": False,
                }
            )
        return {"$ref": _REF + key}

    def _model(self, cls: Any) -> Description:
        key = _key(cls)
        if key not in self.defs:
            prefix = key + "."  # the model's own $defs, kept apart from every other class's
            try:
                schema = cls.model_json_schema(ref_template=_REF + prefix + "{model}")
            except Exception:  # a field pydantic cannot describe: the model is not checked
                return {}
            for name, sub in schema.pop("$defs", {}).items():
                self.defs[prefix + name] = sub
            self.defs[key] = schema
        return {"$ref": _REF + key}


def _json_scalar(value: Any) -> bool:
    return value is None or isinstance(value, (str, int, float, bool))


# -- the plain document a value is -----------------------------------------------------------


def plain(encoded: Any) -> Any:
    """The plain JSON document an encoded value (codec.encode) stands for: each typed part as
    the document `interlock start --input` would give for it (a dataclass's fields, a model's
    dump, a datetime's ISO text, an Enum's value)."""
    if isinstance(encoded, (list, tuple)):  # a tuple is a JSON array, as it is recorded
        return [plain(v) for v in encoded]
    if not isinstance(encoded, dict):
        return encoded
    if set(encoded) == {TYPE_KEY, VALUE_KEY}:
        return plain(encoded[VALUE_KEY])
    return {k: plain(v) for k, v in encoded.items()}


# -- checking a document -------------------------------------------------------------------


class Refused(Exception):
    """Where a document does not fit its description, and why (made an InvalidInput)."""

    def __init__(self, path: str, problem: str) -> None:
        super().__init__(f"{path or 'the input'}: {problem}")


def check(description: Any, document: Any, what: str) -> None:
    """InvalidInput, one line, when `document` does not fit `description` (a stored one: any
    JSON; what is not a description it knows is not checked). `what` names the start."""
    if not isinstance(description, dict):
        return
    try:
        _Checker(description).fits(description, document, "", 0)
    except Refused as exc:
        raise InvalidInput(
            f"{what}: the input does not fit the workflow's input type: {exc}; "
            "nothing was started (docs/typed.md#checked-at-the-door)"
        ) from None


def check_local(hint: Any, encoded: Any, what: str) -> None:
    """The check of a client that has the class: the description's, then a pydantic model's
    own validation (its validators too) when the input type is a model."""
    description = describe(hint)
    if description is None:
        return
    document = plain(encoded)
    check(description, document, what)
    model = [a for a in _union_args(hint) if is_model_class(a)]
    if model and document is not None:
        try:
            model[0].model_validate(document)
        except Exception as exc:  # pydantic's ValidationError, or a validator's own error
            raise InvalidInput(
                f"{what}: the input does not fit the workflow's input type: "
                f"{_pydantic_problem(exc)}; nothing was started "
                "(docs/typed.md#checked-at-the-door)"
            ) from None


def _pydantic_problem(exc: Exception) -> str:
    errors = getattr(exc, "errors", None)
    try:
        first = errors()[0] if callable(errors) else None
    except Exception:
        first = None
    if not isinstance(first, dict):
        return f"{type(exc).__name__}: {' '.join(str(exc).split())[:300]}"
    path = ""
    for part in first.get("loc", ()):
        path += f"[{part}]" if isinstance(part, int) else (f".{part}" if path else str(part))
    return f"{path or 'the input'}: {' '.join(str(first.get('msg', '')).split())[:300]}"


def _got(value: Any) -> str:
    if value is None:
        return "None"
    return type(value).__name__


class _Checker:
    def __init__(self, root: Description) -> None:
        defs = root.get("$defs")
        self.defs: dict[str, Any] = defs if isinstance(defs, dict) else {}

    def _resolve(self, schema: Description, path: str) -> Description:
        hops = 0
        while isinstance(schema.get("$ref"), str):
            ref: str = schema["$ref"]
            target = self.defs.get(ref[len(_REF) :]) if ref.startswith(_REF) else None
            hops += 1
            if not isinstance(target, dict) or hops > _MAX_REF_HOPS:
                raise Refused(
                    path,
                    f"the stored input description is malformed ($ref {ref!r}); "
                    "restart a worker that serves the workflow to store it again",
                )
            schema = target
        return schema

    def fits(self, schema: Any, value: Any, path: str, depth: int) -> None:
        if not isinstance(schema, dict):
            return
        if depth > MAX_JSON_DEPTH:  # a stored input is never this deep (stored.json_text)
            raise Refused(path, f"nested more than {MAX_JSON_DEPTH} levels deep; flatten it")
        schema = self._resolve(schema, path)
        for key in ("anyOf", "oneOf"):
            options = schema.get(key)
            if isinstance(options, list) and options:
                self._any(options, value, path, depth)
        all_of = schema.get("allOf")
        if isinstance(all_of, list):
            for sub in all_of:
                self.fits(sub, value, path, depth)
        if "const" in schema and not _same(value, schema["const"]):
            raise Refused(path, f"expected {shown(schema['const'])}, got {shown(value)}")
        choices = schema.get("enum")
        if isinstance(choices, list) and not any(_same(value, c) for c in choices):
            listed = ", ".join(shown(c) for c in choices[:10])
            raise Refused(path, f"expected one of {listed}, got {shown(value)}")
        wanted = schema.get("type")
        if wanted is not None:
            self._type(schema, wanted, value, path)
        if isinstance(value, str):
            self._string(schema, value, path)
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            self._number(schema, value, path)
        elif isinstance(value, list):
            self._array(schema, value, path, depth)
        elif isinstance(value, dict):
            self._object(schema, value, path, depth)

    def _any(self, options: list[Any], value: Any, path: str, depth: int) -> None:
        refusals: list[Refused] = []
        for option in options:
            try:
                self.fits(option, value, path, depth)
                return
            except Refused as exc:
                if self._kind_fits(option, value):
                    refusals.append(exc)
        if len(refusals) == 1:  # one option is of the value's kind: say what is wrong inside
            raise refusals[0]
        names = " or ".join(sorted({self._name(o) for o in options}))
        raise Refused(path, f"expected {names}, got {_got(value)}")

    def _kind_fits(self, option: Any, value: Any) -> bool:
        """Whether an option asks for the value's JSON kind (an object for a dict, ...)."""
        try:
            resolved = self._resolve(option, "") if isinstance(option, dict) else {}
        except Refused:
            return False
        wanted = resolved.get("type")
        names = wanted if isinstance(wanted, list) else [wanted]
        return wanted is None or any(_is_type(value, n) for n in names)

    def _name(self, schema: Any) -> str:
        """How a message names what a description asks for: `str`, `Line`, `list`."""
        if not isinstance(schema, dict):
            return "anything"
        try:
            schema = self._resolve(schema, "")
        except Refused:
            return "anything"
        if isinstance(schema.get("title"), str) and schema.get("type") == "object":
            return str(schema["title"])
        if "const" in schema:
            return shown(schema["const"])
        wanted = schema.get("type")
        if isinstance(wanted, str):
            return _JSON_NAMES.get(wanted, wanted)
        if isinstance(schema.get("enum"), list):
            return "one of " + ", ".join(shown(c) for c in schema["enum"][:10])
        return "anything"

    def _type(self, schema: Description, wanted: Any, value: Any, path: str) -> None:
        names = wanted if isinstance(wanted, list) else [wanted]
        if any(_is_type(value, n) for n in names):
            return
        title = schema.get("title") if "object" in names else None
        shown_names = (
            [title] if isinstance(title, str) else [_JSON_NAMES.get(str(n), str(n)) for n in names]
        )
        raise Refused(path, f"expected {' or '.join(shown_names)}, got {_got(value)}")

    def _string(self, schema: Description, value: str, path: str) -> None:
        fmt = schema.get("format")
        if isinstance(fmt, str) and not _format_ok(fmt, value):
            raise Refused(path, f"{shown(value)} is not a {_FORMAT_NAMES.get(fmt, fmt)}")
        low, high = schema.get("minLength"), schema.get("maxLength")
        if isinstance(low, int) and len(value) < low:
            raise Refused(path, f"at least {low} characters expected, got {len(value)}")
        if isinstance(high, int) and len(value) > high:
            raise Refused(path, f"at most {high} characters expected, got {len(value)}")
        pattern = schema.get("pattern")
        if isinstance(pattern, str):
            try:
                matched = re.search(pattern, value) is not None
            except re.error:
                matched = True  # a pattern Python cannot read is not checked here
            if not matched:
                raise Refused(path, f"{shown(value)} does not match {shown(pattern)}")

    def _number(self, schema: Description, value: float, path: str) -> None:
        for key, (holds, sign) in _BOUNDS.items():
            bound = schema.get(key)
            if isinstance(bound, (int, float)) and not isinstance(bound, bool):
                if not holds(value, bound):
                    raise Refused(path, f"expected a number {sign} {bound}, got {shown(value)}")

    def _array(self, schema: Description, value: list[Any], path: str, depth: int) -> None:
        low, high = schema.get("minItems"), schema.get("maxItems")
        if isinstance(low, int) and len(value) < low:
            raise Refused(path, f"at least {low} items expected, got {len(value)}")
        if isinstance(high, int) and len(value) > high:
            raise Refused(path, f"at most {high} items expected, got {len(value)}")
        prefix = schema.get("prefixItems")
        prefix = prefix if isinstance(prefix, list) else []
        items = schema.get("items")
        for i, item in enumerate(value):
            sub = prefix[i] if i < len(prefix) else items
            if sub is not None:
                self.fits(sub, item, f"{path}[{i}]", depth + 1)

    def _object(self, schema: Description, value: dict[str, Any], path: str, depth: int) -> None:
        properties = schema.get("properties")
        properties = properties if isinstance(properties, dict) else {}
        required = schema.get("required")
        for name in required if isinstance(required, list) else []:
            if name not in value:
                raise Refused(_field(path, str(name)), "missing (a required field)")
        extra = schema.get("additionalProperties", True)
        for name, item in value.items():
            where = _field(path, name)
            if name in properties:
                self.fits(properties[name], item, where, depth + 1)
            elif extra is False:
                known = ", ".join(sorted(properties)[:20]) or "none"
                raise Refused(where, f"unknown field (the type has {known})")
            elif isinstance(extra, dict):
                self.fits(extra, item, where, depth + 1)


def _field(path: str, name: str) -> str:
    if name.isidentifier() and len(name) <= _LONGEST_NAME:
        return f"{path}.{name}" if path else name
    return f"{path}[{shown(name)}]"  # quoted, and cut when long: the message stays one short line


def _is_type(value: Any, name: Any) -> bool:
    if name == "string":
        return isinstance(value, str)
    if name == "integer":
        return isinstance(value, int) and not isinstance(value, bool)
    if name == "number":
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if name == "boolean":
        return isinstance(value, bool)
    if name == "null":
        return value is None
    if name == "array":
        return isinstance(value, list)
    if name == "object":
        return isinstance(value, dict)
    return True  # a type this check does not know is not checked


def _same(a: Any, b: Any) -> bool:
    """JSON equality: 1 and True differ, 1 and 1.0 do not."""
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return a == b
    return type(a) is type(b) and bool(a == b)


_BOUNDS: dict[str, tuple[Callable[[Any, Any], bool], str]] = {
    "minimum": (operator.ge, ">="),
    "maximum": (operator.le, "<="),
    "exclusiveMinimum": (operator.gt, ">"),
    "exclusiveMaximum": (operator.lt, "<"),
}
_FORMAT_NAMES = {
    "date-time": "datetime (ISO 8601)",
    "date": "date (YYYY-MM-DD)",
    "time": "time (HH:MM[:SS])",
    "uuid": "UUID",
    "decimal": "decimal number",
}


def _format_ok(fmt: str, value: str) -> bool:
    """Whether the text is what codec.convert reads as that type (a format not listed here is
    not checked)."""
    readers: dict[str, Any] = {
        "date-time": dt.datetime.fromisoformat,
        "date": dt.date.fromisoformat,
        "time": dt.time.fromisoformat,
        "uuid": uuid.UUID,
    }
    if fmt == "decimal":
        try:
            return Decimal(value).is_finite()
        except (InvalidOperation, ValueError):
            return False
    reader = readers.get(fmt)
    if reader is None:
        return True
    try:
        reader(value)
    except (ValueError, TypeError, OverflowError):
        return False
    return True
