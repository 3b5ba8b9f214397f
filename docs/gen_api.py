"""Write the API reference into the docs pages from the docstrings, so it reads in the repository.

    python docs/gen_api.py            # rewrite every generated block in docs/*.md
    python docs/gen_api.py --check    # exit 1 when a block is out of date or a public name
                                      # has no docstring (`make lint` runs this)

A page asks for a block with a marker line, and the generated text goes between it and the
closing marker:

    <!-- reference: interlock_runtime.worker.Worker inherited -->
    ...generated...
    <!-- /reference -->

The object is a dotted path (a module, a class or a function). Options after it: `inherited`
(a class also shows the public members it inherits from classes of this package),
`members=A,B` (a module: only these, in this order; default: the public classes and functions
it defines, in source order), `level=N` (heading level of the object, default 3; its members
one deeper). Each heading carries the object's dotted path as its anchor, so pages link to
`api.md#interlock_runtime.worker.Worker`.

The check also holds the facade to its contract: every name in `interlock_runtime.__all__`
appears in some block, and it and every public member shown has a docstring.
"""

from __future__ import annotations

import argparse
import difflib
import importlib
import inspect
import re
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

DOCS = Path(__file__).resolve().parent
PACKAGE = "interlock_runtime"
BLOCK = re.compile(r"^(<!-- reference: (.+?) -->\n)(.*?)^(<!-- /reference -->)$", re.M | re.S)
WIDTH = 96  # a signature longer than this goes one parameter per line


class Found:
    """What rendering saw: the objects shown (by id), and the ones that lack a docstring."""

    def __init__(self) -> None:
        self.shown: set[int] = set()
        self.undocumented: list[str] = []


def resolve(path: str) -> Any:
    """A module, or an attribute of the longest importable module prefix of `path`."""
    parts = path.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj: Any = importlib.import_module(".".join(parts[:cut]))
        except ModuleNotFoundError:
            continue
        for name in parts[cut:]:
            obj = getattr(obj, name)
        return obj
    raise SystemExit(f"gen_api: cannot import {path}")


def own_doc(obj: Any) -> str:
    """The object's own docstring (a class's, not one inherited from its base)."""
    raw = obj.__dict__.get("__doc__") if inspect.isclass(obj) else getattr(obj, "__doc__", None)
    return inspect.cleandoc(raw) if isinstance(raw, str) and raw.strip() else ""


def annotation(a: Any) -> str:
    if a is inspect.Parameter.empty:
        return ""
    text = a if isinstance(a, str) else inspect.formatannotation(a)
    return text.replace("typing.", "").replace("collections.abc.", "")


def signature(name: str, obj: Any) -> str:
    """`name(params) -> returns`, wrapped one parameter per line when long."""
    try:
        sig = inspect.signature(obj)
    except (TypeError, ValueError):
        return name
    params = []
    for p in sig.parameters.values():
        if p.name in ("self", "cls"):
            continue
        text = str(p.replace(annotation=inspect.Parameter.empty, default=inspect.Parameter.empty))
        if p.annotation is not inspect.Parameter.empty:
            text += f": {annotation(p.annotation)}"
        if p.default is not inspect.Parameter.empty:
            text += (
                f" = {p.default!r}"
                if p.annotation is not inspect.Parameter.empty
                else (f"={p.default!r}")
            )
        params.append(text)
    params = _markers(sig, params)
    ret = "" if inspect.isclass(obj) else annotation(sig.return_annotation)
    tail = f" -> {ret}" if ret else ""
    one = f"{name}({', '.join(params)}){tail}"
    if len(one) <= WIDTH:
        return one
    inner = "".join(f"    {p},\n" for p in params)
    return f"{name}(\n{inner}){tail}"


def _markers(sig: inspect.Signature, params: list[str]) -> list[str]:
    """Put back the bare `*` (keyword-only follows) and `/` that str(param) alone loses."""
    out: list[str] = []
    kinds = [p.kind for p in sig.parameters.values() if p.name not in ("self", "cls")]
    star_done = False
    for kind, text in zip(kinds, params, strict=True):
        if kind is inspect.Parameter.KEYWORD_ONLY and not star_done:
            out.append("*")
            star_done = True
        if kind is inspect.Parameter.VAR_POSITIONAL:
            star_done = True
        out.append(text)
    if any(k is inspect.Parameter.POSITIONAL_ONLY for k in kinds):
        last = max(i for i, k in enumerate(kinds) if k is inspect.Parameter.POSITIONAL_ONLY)
        out.insert(last + 1 + (0 if "*" not in out[: last + 1] else 1), "/")
    return out


def _source_line(obj: Any) -> int:
    try:
        return inspect.getsourcelines(obj)[1]
    except (OSError, TypeError):
        return 0


def members(cls: type, inherited: bool) -> list[tuple[str, Any, type]]:
    """(name, member, owner) of the public methods and properties, the class's own first in
    source order, then (with `inherited`) those of its bases from this package."""
    owners = [cls]
    if inherited:
        owners += [b for b in cls.__mro__[1:] if b.__module__.startswith(PACKAGE)]
    seen: set[str] = set()
    out: list[tuple[str, Any, type]] = []
    for owner in owners:
        for name, raw in vars(owner).items():
            if name.startswith("_") or name in seen:
                continue
            member = raw.__func__ if isinstance(raw, (staticmethod, classmethod)) else raw
            if isinstance(member, property) or inspect.isfunction(member):
                seen.add(name)
                out.append((name, member, owner))
    return out


def heading(level: int, title: str, anchor: str) -> str:
    return f"{'#' * level} `{title}` {{#{anchor}}}\n"


def render_callable(
    name: str, obj: Any, anchor: str, level: int, found: Found, prefix: str = ""
) -> str:
    doc = own_doc(obj)
    if not doc:
        found.undocumented.append(anchor)
    found.shown.add(id(obj))
    if isinstance(obj, property):
        sig = f"{name}: {annotation(inspect.signature(obj.fget).return_annotation) or 'Any'}"
        kind = "property "
    else:
        sig = signature(name, obj)
        kind = "class " if inspect.isclass(obj) else "def "
        if inspect.iscoroutinefunction(obj):
            kind = "async def "
    text = heading(level, prefix + name, anchor) + f"\n```python\n{kind}{sig}\n```\n"
    return text + (f"\n{doc}\n" if doc else "")


def render_class(cls: type, path: str, level: int, inherited: bool, found: Found) -> str:
    out = [render_callable(cls.__name__, cls, path, level, found)]
    init = cls.__dict__.get("__init__")
    if inspect.isfunction(init) and own_doc(init):
        out.append(own_doc(init) + "\n")  # the constructor's arguments, as a class's docs
    for name, member, owner in members(cls, inherited):
        note = "" if owner is cls else f"\n*Inherited from `{owner.__name__}`.*\n"
        out.append(render_callable(name, member, f"{path}.{name}", level + 1, found, ".") + note)
    return "\n".join(out)


def module_members(module: ModuleType, names: list[str] | None) -> list[tuple[str, Any]]:
    if names is not None:
        return [(n, getattr(module, n)) for n in names]
    own = [
        (n, o)
        for n, o in vars(module).items()
        if not n.startswith("_")
        and (inspect.isclass(o) or inspect.isfunction(o))
        and o.__module__ == module.__name__
    ]
    return sorted(own, key=lambda item: _source_line(item[1]))


def render(spec: str, found: Found) -> str:
    """The Markdown of one block: `spec` is the marker's text (path and options)."""
    path, *opts = spec.split()
    options = dict(o.split("=", 1) if "=" in o else (o, "") for o in opts)
    unknown = set(options) - {"inherited", "members", "level"}
    if unknown:
        raise SystemExit(f"gen_api: {spec}: unknown options {sorted(unknown)}")
    level = int(options.get("level", 3))
    obj = resolve(path)
    if inspect.ismodule(obj):
        names = options["members"].split(",") if options.get("members") else None
        parts = []
        for name, member in module_members(obj, names):
            anchor = f"{path}.{name}"
            if inspect.isclass(member):
                parts.append(render_class(member, anchor, level, "inherited" in options, found))
            else:
                parts.append(render_callable(name, member, anchor, level, found))
        return "\n".join(parts)
    if inspect.isclass(obj):
        return render_class(obj, path, level, "inherited" in options, found)
    return render_callable(path.rsplit(".", 1)[-1], obj, path, level, found)


def generate(text: str, found: Found) -> str:
    def block(m: re.Match[str]) -> str:
        body = render(m.group(2), found)
        return f"{m.group(1)}\n{body.rstrip()}\n\n{m.group(4)}"

    return BLOCK.sub(block, text)


def facade_problems(found: Found) -> list[str]:
    facade = importlib.import_module(PACKAGE)
    problems = [f"{n}: not in any reference block" for n in facade.__all__
                if id(getattr(facade, n)) not in found.shown]  # fmt: skip
    problems += [f"{a}: no docstring (say what it does and what it promises)"
                 for a in found.undocumented]  # fmt: skip
    return problems


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python docs/gen_api.py", description=__doc__.split("\n")[0])
    ap.add_argument("--check", action="store_true", help="fail when out of date; write nothing")
    args = ap.parse_args(argv)
    found = Found()
    stale = []
    for page in sorted(DOCS.glob("*.md")):
        current = page.read_text()
        if "<!-- reference:" not in current:
            continue
        new = generate(current, found)
        if new == current:
            continue
        if args.check:
            diff = difflib.unified_diff(current.splitlines(True), new.splitlines(True),
                                        f"docs/{page.name}", "generated", n=1)  # fmt: skip
            stale.append("".join(list(diff)[:60]))
        else:
            page.write_text(new)
            print(f"gen_api: wrote docs/{page.name}")
    problems = facade_problems(found)
    for p in problems:
        print(f"gen_api: {p}", file=sys.stderr)
    if stale:
        print("gen_api: the reference is out of date: run `python docs/gen_api.py`\n"
              + "\n".join(stale), file=sys.stderr)  # fmt: skip
    return 1 if problems or stale else 0


if __name__ == "__main__":
    sys.exit(main())
