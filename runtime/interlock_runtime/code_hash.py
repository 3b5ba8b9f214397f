"""The code hash that pins a deployment (docs/operations.md#code-hash).

A workflow's hash covers its own source and, transitively, every top-level definition of its
module that it names: functions, classes, assignments and imports (decorators and annotations
included). Adding or changing another workflow of the same module leaves it unchanged, so a
worker that gains a workflow does not refuse the ones beside it; changing a helper the workflow
calls changes it. What the hash cannot see (the code of other modules, a name reached through
`globals()` or `getattr`) is the author's to version.

Runtimes before 0.2 hashed the whole module file; `module_sha256` is kept so a deployment
recorded that way is recognized and moved to the new hash when its code is the same.
"""

from __future__ import annotations

import ast
import hashlib
import inspect
import sys
from collections.abc import Callable, Iterator
from typing import Any

_DEFS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)


def module_sha256(fn: Callable[..., Any]) -> str:
    """sha256 of the source bytes of the module defining fn: the rule before 0.2."""
    module = sys.modules.get(fn.__module__)
    path = inspect.getsourcefile(module) if module else None
    if path:
        with open(path, "rb") as f:
            return hashlib.sha256(f.read()).hexdigest()
    return hashlib.sha256(inspect.getsource(fn).encode()).hexdigest()


def _bound(node: ast.stmt) -> Iterator[str]:
    """The top-level names a module statement binds."""
    if isinstance(node, _DEFS):
        yield node.name
    elif isinstance(node, (ast.Import, ast.ImportFrom)):
        for alias in node.names:
            yield (alias.asname or alias.name).split(".")[0]
    elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        for target in targets:
            for sub in ast.walk(target):
                if isinstance(sub, ast.Name):
                    yield sub.id


def _used(node: ast.stmt) -> set[str]:
    """The names a statement reads (its decorators, defaults and annotations included)."""
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}


def _first_line(node: ast.stmt) -> int:
    decorators: list[ast.expr] = getattr(node, "decorator_list", [])
    return min([node.lineno, *(d.lineno for d in decorators)])


def workflow_sha256(fn: Callable[..., Any]) -> str:
    """sha256 of the workflow's source and of the module-level definitions it reaches."""
    module = sys.modules.get(fn.__module__)
    try:
        source = inspect.getsource(module) if module else ""
        tree = ast.parse(source)
    except (OSError, TypeError, SyntaxError):
        source, tree = "", ast.Module(body=[], type_ignores=[])
    top = [n for n in tree.body if isinstance(n, _DEFS[:2]) and n.name == fn.__name__]
    if len(top) != 1:  # defined in a function, made at run time: the module is what we have
        return module_sha256(fn)
    binders: dict[str, list[ast.stmt]] = {}
    for node in tree.body:
        for name in _bound(node):
            binders.setdefault(name, []).append(node)
    reached: dict[int, ast.stmt] = {}
    todo: list[ast.stmt] = [top[0]]
    while todo:
        node = todo.pop()
        if id(node) in reached:
            continue
        reached[id(node)] = node
        for name in _used(node):
            todo.extend(binders.get(name, []))
    lines = source.splitlines(keepends=True)
    digest = hashlib.sha256()
    for node in sorted(reached.values(), key=_first_line):
        end = node.end_lineno or node.lineno
        digest.update("".join(lines[_first_line(node) - 1 : end]).encode())
        digest.update(b"\0")
    return digest.hexdigest()
