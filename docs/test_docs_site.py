"""The documentation site's own checks (run by `make docs`, and so by `make test`).

- docs/cli.md is exactly what docs/gen_cli.py writes from the parsers today;
- no page points outside the repository (no URL, no absolute path);
- every "spec x.y" / "DESIGN Bn" citation name the code uses has a row in the table at the top
  of docs/design.md, so a reader can find the section it means.
"""

from __future__ import annotations

import difflib
import importlib.util
import re
from pathlib import Path

import pytest

DOCS = Path(__file__).resolve().parent
ROOT = DOCS.parent
CITING_TREES = ("runtime", "prove", "conformance", "models", "world", "baselines")


def _gen_cli():
    spec = importlib.util.spec_from_file_location("docs_gen_cli", DOCS / "gen_cli.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_cli_reference_is_generated_from_the_current_parsers():
    expected = _gen_cli().render()
    current = (DOCS / "cli.md").read_text()
    diff = "".join(
        difflib.unified_diff(
            current.splitlines(True), expected.splitlines(True), "docs/cli.md", "generated"
        )
    )
    if diff:
        pytest.fail(f"docs/cli.md is out of date: run `python docs/gen_cli.py`\n{diff}", False)


def test_cli_reference_covers_every_verb():
    gen = _gen_cli()
    text = (DOCS / "cli.md").read_text()
    for verb, _ in gen._subcommands(gen.cli.build_parser()):
        assert f"## `interlock {verb}`" in text
        assert f"usage: interlock {verb}" in text, f"no --help text for `interlock {verb}`"


def test_api_reference_is_current_and_every_public_name_documented():
    """docs/gen_api.py --check (also in `make lint`): the reference blocks in the pages are
    what the docstrings say today, and every name of interlock_runtime.__all__ has one."""
    spec = importlib.util.spec_from_file_location("docs_gen_api", DOCS / "gen_api.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.main(["--check"]) == 0, "run `python docs/gen_api.py` (details above)"


def _pages() -> list[Path]:
    return sorted(DOCS.glob("*.md"))


def test_pages_stay_inside_the_repository():
    # a URL of the reader's own machine (127.0.0.1, localhost) is an example, not a pointer;
    # a scheme alone (`https://`) names no place
    outside = re.compile(
        r"(?:https?|ftp|file)://(?!(?:127\.0\.0\.1|localhost)[:/])[\w\[]|\]\(/"
        r"|(?<![\w.])/(?:work|home|tmp|opt|root)/"
    )
    for page in _pages():
        for n, line in enumerate(page.read_text().splitlines(), 1):
            assert not outside.search(line), f"{page.name}:{n} points outside the repo: {line}"


SOURCE_SUFFIXES = {".py", ".sql", ".tla", ".yaml", ".j2", ".mk", ".cfg", ".md"}


def _sources():
    for tree in CITING_TREES:
        for path in sorted((ROOT / tree).rglob("*")):
            if path.is_file() and path.suffix in SOURCE_SUFFIXES:
                yield path, path.read_text(errors="replace")


def _citation_names() -> set[str]:
    """The old citation names the code uses, normalized: "spec 5.7", "DESIGN B10", "DESIGN C"
    ("Spec 10.6" is "spec 10.6"; "spec B4" is "DESIGN B4")."""
    pattern = re.compile(r"\b(?:([Ss]pec) (\d+(?:\.\d+)?|B\d+)|DESIGN ([A-D]\d*))\b")
    found: set[str] = set()
    for _, text in _sources():
        for m in pattern.finditer(text):
            if m.group(3) is not None:
                found.add(f"DESIGN {m.group(3)}")
            elif m.group(2).startswith("B"):
                found.add(f"DESIGN {m.group(2)}")
            else:
                found.add(f"spec {m.group(2)}")
    return found


def test_every_old_citation_in_the_code_is_mapped_in_design_md():
    design = (DOCS / "design.md").read_text()
    table = design.split("\n## Overview", 1)[0]  # the mapping table sits above the overview
    rows = {m.group(1) for m in re.finditer(r"^\| (spec [\d.]+|DESIGN [A-D]\d*) \|", table, re.M)}
    missing = sorted(_citation_names() - rows)
    assert not missing, f"docs/design.md's citation table lacks rows for: {missing}"


def _anchors(page: Path) -> set[str]:
    """Explicit heading anchors ({#name}) of a page: the stable ones code may cite."""
    return set(re.findall(r"^#+ .*\{#([A-Za-z0-9_-]+)\}\s*$", page.read_text(), re.M))


def test_docs_citations_in_the_code_name_existing_sections():
    cite = re.compile(r"docs/([a-z_]+\.md)#([A-Za-z0-9_-]+)")
    broken = []
    for path, text in _sources():
        for m in cite.finditer(text):
            page = DOCS / m.group(1)
            if not page.exists() or m.group(2) not in _anchors(page):
                broken.append(f"{path.relative_to(ROOT)}: {m.group(0)}")
    assert not broken, "citations of docs pages that have no such section:\n" + "\n".join(broken)
