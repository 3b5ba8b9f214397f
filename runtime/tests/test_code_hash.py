"""The code hash of a deployment (docs/operations.md#code-hash): one workflow's source and the
module-level definitions it reaches, not the whole module. Modules are written to a temporary
directory and imported under fresh names, as a worker imports them."""

from __future__ import annotations

import importlib.util
import itertools
import sys
from pathlib import Path

import pytest

from interlock_runtime import CodeChanged, Runtime, Worker, db
from interlock_runtime.code_hash import module_sha256
from interlock_runtime.workflow import definition

BASE = """\
import os

from interlock_runtime import workflow

LIMIT = 3


def helper(x):
    return x * LIMIT


@workflow(name="first", version="1")
def first(ctx, inp):
    return ctx.step("h", helper, inp["x"])


@workflow(name="second", version="1")
def second(ctx, inp):
    return os.sep
"""
_names = itertools.count()


def _load(tmp_path: Path, source: str):
    """The module's two workflows' definitions, imported as a worker would."""
    name = f"hash_flows_{next(_names)}"
    path = tmp_path / f"{name}.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # registered, as an import would, for inspect to find its source
    spec.loader.exec_module(module)
    return definition(module.first), definition(module.second)


def test_a_workflow_added_beside_leaves_the_others_hash_alone(tmp_path) -> None:
    first, second = _load(tmp_path, BASE)
    added = BASE + '\n\n@workflow(name="third", version="1")\ndef third(ctx, inp):\n    return 3\n'
    first_after, second_after = _load(tmp_path, added)
    assert (first_after.code_sha256, second_after.code_sha256) == (
        first.code_sha256,
        second.code_sha256,
    )
    assert first_after.legacy_sha256 != first.legacy_sha256  # the old rule changed both


@pytest.mark.parametrize(
    ("edit", "changes"),
    [
        (("return x * LIMIT", "return x * LIMIT + 1"), {"first"}),  # a helper it calls
        (("LIMIT = 3", "LIMIT = 4"), {"first"}),  # a constant the helper reads
        (("return os.sep", "return os.linesep"), {"second"}),  # its own body
        (('name="first", version="1"', 'name="first", version="2"'), {"first"}),  # decorator
        (("import os\n", "import os\nimport json\n"), set()),  # an import neither uses
    ],
    ids=["helper", "constant", "body", "decorator", "unused_import"],
)
def test_a_change_moves_exactly_the_hashes_of_the_workflows_that_reach_it(
    tmp_path, edit, changes
) -> None:
    before = dict(zip(("first", "second"), _load(tmp_path, BASE), strict=True))
    after = dict(zip(("first", "second"), _load(tmp_path, BASE.replace(*edit)), strict=True))
    moved = {n for n in before if before[n].code_sha256 != after[n].code_sha256}
    assert moved == changes


def test_a_deployment_recorded_by_the_old_rule_moves_to_the_new_hash(dsn, tmp_path) -> None:
    """A row holding the module's hash (a runtime before 0.2) for the same code is taken over
    by the new hash; a row holding another hash is still a code change."""
    first, second = _load(tmp_path, BASE)
    with db.connect(dsn) as conn:
        conn.execute("insert into ilr.deployments (name, version, code_sha256) values "
                     "(%s, %s, %s), (%s, %s, %s)",
                     ("first", "1", module_sha256(first.fn), "second", "1", "f" * 64))  # fmt: skip
    with pytest.raises(CodeChanged):
        Worker(dsn, [first, second]).register()
    Worker(dsn, [first]).register()
    with Runtime(dsn) as rt:
        recorded = {d["name"]: d["code_sha256"] for d in rt.deployments()}
    assert recorded == {"first": first.code_sha256, "second": "f" * 64}
