"""The mutant catalog (models/mutants/*.yaml) against the tree as it is: every mutant still
applies (its text occurs exactly once), names tests that exist in make test's suites and
invariants of the catalog, and every BROKEN model variant has a code mutant with the same bug.
Judging the mutants (running their tests) is `make mutants`, not make test."""

from __future__ import annotations

from pathlib import Path

import pytest

from models import mutant_catalog as mc


def test_every_mutant_applies_and_every_broken_variant_has_one() -> None:
    mutants = mc.load()
    assert mc.problems(mutants) == []
    assert len(mutants) >= 30


def _write(tmp_path: Path, text: str) -> Path:
    d = tmp_path / "mutants"
    d.mkdir(exist_ok=True)
    (d / "area.yaml").write_text(text)
    return d


GOOD = """
- name: FlipIt
  meaning: flips it
  invariants: [LeaseMutex]
  model: not expressible
  patch: [{file: code.py, find: "x = 1", replace: "x = 2"}]
  killed_by: [runtime/tests/test_races.py::test_signal_racing_a_suspend_is_never_lost]
"""


def test_apply_rewrites_exactly_the_one_occurrence(tmp_path: Path) -> None:
    [m] = mc.load(_write(tmp_path, GOOD))
    (tmp_path / "code.py").write_text("x = 1\ny = 1\n")
    m.apply(tmp_path)
    assert (tmp_path / "code.py").read_text() == "x = 2\ny = 1\n"
    with pytest.raises(mc.MutantError, match="0 times"):
        m.apply(tmp_path)  # already applied: the text is gone


@pytest.mark.parametrize(
    ("change", "words"),
    [
        (("model: not expressible", "broken: NoFencing\n  model: both"), "exactly one of"),
        (("  model: not expressible\n", ""), "exactly one of"),
        (("killed_by:", "killers:"), "unknown keys"),
        (("invariants: [LeaseMutex]", "invariants: []"), "`invariants` is required"),
    ],
)
def test_malformed_entries_are_refused(tmp_path: Path, change: tuple[str, str], words: str) -> None:
    with pytest.raises(mc.MutantError, match=words):
        mc.load(_write(tmp_path, GOOD.replace(*change)))


@pytest.mark.parametrize(
    ("change", "words"),
    [
        (("", ""), None),
        (('find: "x = 1"', 'find: "y"'), "occurs 2 times"),
        (('find: "x = 1"', 'find: "zzz"'), "occurs 0 times"),
        (("[LeaseMutex]", "[NoSuchInvariant]"), "unknown invariant NoSuchInvariant"),
        (("model: not expressible", "broken: NoSuchVariant"), "unknown broken variant"),
        (("test_signal_racing_a_suspend_is_never_lost", "test_nothing"), "no test function"),
        (("runtime/tests/test_races.py", "results/x.py"), "not in make test's suites"),
        (("name: FlipIt", "name: flip_it"), "CamelCase"),
    ],
)
def test_problems_name_what_is_wrong(
    tmp_path: Path, change: tuple[str, str], words: str | None
) -> None:
    (tmp_path / "code.py").write_text("x = 1\ny\ny\n")
    tests = tmp_path / "runtime" / "tests"
    tests.mkdir(parents=True)
    (tests / "test_races.py").write_text(
        "def test_signal_racing_a_suspend_is_never_lost():\n    pass\n"
    )
    mutants = mc.load(_write(tmp_path, GOOD.replace(*change)))
    found = mc.problems(mutants, root=tmp_path, coverage=False)
    if words is None:
        assert found == []
    else:
        assert len(found) == 1 and words in found[0], found
