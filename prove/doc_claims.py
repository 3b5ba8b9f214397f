"""The quantitative claims of README.md and docs/*.md, held to their conditions and evidence.

docs/claims.yaml registers every claim: its file, a short exact quote, the assumptions it rests
on (docs/design.md#assumptions: A1..A5, or `none: true`) and the links to the results that back
it. `check` finds, for one set of pages:

- a registered quote missing from its file, or a claim whose paragraph (a block between blank
  lines, a list item or a table row) does not name each assumption or contain each link (as a
  Markdown link's target or a code span);
- a link that does not resolve: no such file, or no such anchor in it (`<a id=...>`, `{#id}`,
  a heading's slug; for a Prove cell, `#cell-<scenario>-t<tier>-<variant>`, the cell in
  results/runtime_prove.json);
- a sentence that looks quantitative (a percentage, an `N/N` or `N of N` count, "at most once",
  "never applied twice", a number in ms, s, wf/s or workflows) in a paragraph no registered
  quote covers and not exempted by a quote in the registry's `exempt:` list (with a reason).

`python -m prove.doc_claims` prints the problems; prove/tests/test_claims_links.py runs it.
"""

from __future__ import annotations

import json
import re
import sys
import unicodedata
from dataclasses import dataclass
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
REGISTRY = "docs/claims.yaml"
INDEX = "results/INDEX.json"
PROVE_JSON = "results/runtime_prove.json"
# Pages another engineer owns or a generator writes; their claims are not registered here.
SKIPPED_PAGES = {"docs/results.md", "docs/cli.md", "docs/scenarios.md"}
ASSUMPTIONS = ("A1", "A2", "A3", "A4", "A5")

QUANTITATIVE = re.compile(
    r"\d+(?:\.\d+)?\s?%"
    r"|\b\d+\s?/\s?\d+\b"
    r"|\b\d[\d,]* of \d[\d,]*\b"
    r"|\bat most once\b"
    r"|\bnever (?:applied twice|duplicat)|\bno duplicate"
    r"|\b\d[\d,]*(?:\.\d+)?\s?(?:ms|s|min|minutes|wf/s|workflows|runs|iterations)\b",
    re.I,
)
_NAMED = re.compile(r"\bA([1-5])\s?(?:\.\.|-|to)\s?A([1-5])\b|\bA([1-5])\b")
_LINK = re.compile(r"\]\(([^)\s]+)\)|`((?:\.\./)?results/[^`\s]+)`")
_SENTENCE_END = re.compile(r"(?<=[.;!?])\s+(?=[A-Z(`*\[])")


@dataclass(frozen=True)
class Problem:
    kind: str  # missing-quote, assumption, link, unresolved, unregistered, registry, stale
    where: str
    what: str

    def __str__(self) -> str:
        return f"{self.kind}: {self.where}: {self.what}"


def paragraphs(markdown: str) -> list[str]:
    """The units a claim must hold together in: blocks between blank lines, each list item and
    each table row on its own; code blocks, indented blocks and HTML comments left out."""
    text = re.sub(r"<!--.*?-->", "", markdown, flags=re.S)
    text = re.sub(r"^(```|~~~).*?^\1[^\n]*$", "", text, flags=re.S | re.M)
    units: list[list[str]] = []
    current: list[str] = []
    for line in text.splitlines():
        starts_item = re.match(r"\s{0,3}(?:[-*+]|\d+\.)\s", line) or line.lstrip().startswith("|")
        if not line.strip() or (line.startswith("    ") and not current):
            current = []
            continue
        if starts_item or line.startswith("#") or not current:
            current = [line]
            units.append(current)
            if line.lstrip().startswith("|") or line.startswith("#"):
                current = []
        else:
            current.append(line)
    return [" ".join(s.strip() for s in unit) for unit in units]


def sentences(paragraph: str) -> list[str]:
    return _SENTENCE_END.split(paragraph)


def named_assumptions(text: str) -> set[str]:
    found: set[str] = set()
    for m in _NAMED.finditer(text):
        if m.group(3):
            found.add(f"A{m.group(3)}")
        else:
            found.update(f"A{n}" for n in range(int(m.group(1)), int(m.group(2)) + 1))
    return found


def slugs(heading: str) -> set[str]:
    """A heading's anchors as GitHub writes them and as the docs site (Python-Markdown's toc)
    writes them; an explicit `{#id}` replaces the latter."""
    explicit = re.search(r"\{#([\w-]+)\}\s*$", heading)
    text = re.sub(r"\{#[\w-]+\}\s*$", "", heading)
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text).replace("`", "").strip().lower()
    github = re.sub(r"[^\w\- ]", "", text).replace(" ", "-")
    ascii_ = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode()
    toc = re.sub(r"[-\s]+", "-", re.sub(r"[^\w\s-]", "", ascii_).strip())
    return {github, toc} | ({explicit.group(1)} if explicit else set())


def anchors(markdown: str) -> set[str]:
    found = set(re.findall(r"<a\s+(?:id|name)=\"([^\"]+)\"", markdown))
    seen: dict[str, int] = {}
    for heading in re.findall(r"^#{1,6}\s+(.*)$", markdown, re.M):
        for slug in slugs(heading):
            found.add(slug if slug not in seen else f"{slug}-{seen[slug]}")
            seen[slug] = seen.get(slug, 0) + 1
    return found


def prove_cell_exists(anchor: str, prove_json: Path) -> bool:
    """`cell-s08c-t2-base`: the report's row anchor; the cell itself is in the JSON."""
    m = re.fullmatch(r"cell-([a-z0-9]+)-t(\d)-(.+)", anchor)
    if m is None or not prove_json.exists():
        return False
    scenario, tier, variant = m.group(1), int(m.group(2)), m.group(3)
    return any(
        c.get("scenario", "").lower() == scenario
        and c.get("tier") == tier
        and c.get("variant") == variant
        and c.get("api", "local") == "local"
        for c in json.loads(prove_json.read_text()).get("cells", [])
    )


def link_file(page: str, link: str, root: Path) -> str | None:
    """The repository path a link names: relative to its page, or (a code span in docs/ naming
    `results/...`) to the repository root; None when no such file exists."""
    path = link.split("#", 1)[0]
    if not path:
        return page
    for base in (Path(page).parent, Path()):
        candidate = (root / base / path).resolve()
        if candidate.exists() and candidate.is_relative_to(root.resolve()):
            return candidate.relative_to(root.resolve()).as_posix()
    return None


def resolve(page: str, link: str, root: Path) -> str | None:
    """None when the link resolves, else what is wrong with it."""
    target = link_file(page, link, root)
    if target is None:
        return f"{link}: no such file"
    if "#" not in link:
        return None
    anchor = link.split("#", 1)[1]
    if target.endswith(".md") and anchor in anchors((root / target).read_text()):
        return None
    if target == PROVE_JSON.replace(".json", ".md") and prove_cell_exists(
        anchor, root / PROVE_JSON
    ):
        return None
    return f"{link}: no anchor #{anchor} in {target}"


def index_statuses(index: object) -> dict[str, str]:
    """results/INDEX.json (`python -m prove.freshness`) as {repository path: status}. Entries
    list a result's files and its status; they may sit in a list, under "results" or
    "entries", or in a mapping by name."""
    if isinstance(index, dict):
        entries = index.get("results", index.get("entries", list(index.values())))
    else:
        entries = index
    statuses: dict[str, str] = {}
    for entry in entries if isinstance(entries, list) else []:
        if isinstance(entry, dict):
            for name in entry.get("files", []):
                path = name if str(name).startswith("results/") else f"results/{name}"
                statuses[path] = str(entry.get("status", "unknown"))
    return statuses


def awaiting(registry: dict) -> dict[str, str]:
    """Results declared `awaiting_regeneration` in the registry: {results/ file: why}. Their
    claims are not failed for a stale or unverifiable result; instead a listed result that
    is current and verified fails `awaiting_done`, so the list cannot outlive its reason."""
    return {
        str(e["result"]): str(e.get("reason", ""))
        for e in registry.get("awaiting_regeneration") or []
    }


def awaiting_done(
    registry: dict, statuses: dict[str, str], verified: dict[str, str]
) -> list[Problem]:
    """Listed results that no longer await anything: current in the index and, where a
    verifier covers them, verified."""
    return [
        Problem(
            "awaiting", REGISTRY, f"{f} is current and verified: take it off awaiting_regeneration"
        )
        for f in awaiting(registry)
        if statuses.get(f) == "current" and verified.get(f, "verified") == "verified"
    ]


def _evidence(registry: dict, root: Path) -> list[tuple[str, str, str | None]]:
    """(page, link, the results/ file it names) for every claim's evidence, the results
    declared awaiting regeneration left out."""
    waiting = awaiting(registry)
    out = []
    for claim in registry.get("claims", []):
        for link in claim.get("evidence", []):
            target = link_file(claim["file"], link, root)
            if target not in waiting:
                out.append((claim["file"], link, target))
    return out


def stale_evidence(registry: dict, statuses: dict[str, str], root: Path) -> list[Problem]:
    """Every claim whose evidence under results/ is not `current` in the index (results
    declared awaiting regeneration aside)."""
    return [
        Problem("stale", page, f"{link}: {statuses.get(target, 'not in the index')}")
        for page, link, target in _evidence(registry, root)
        if target and target.startswith("results/") and statuses.get(target) != "current"
    ]


def unverified_evidence(registry: dict, verified: dict[str, str], root: Path) -> list[Problem]:
    """Every claim whose evidence is a report that does not recompute from its committed raw
    data ({report path: status} from prove.verify_results; a file no verifier covers, such as
    a report's JSON or a TLC report, is not judged here)."""
    return [
        Problem("unverified", page, f"{link}: {verified[target]}")
        for page, link, target in _evidence(registry, root)
        if target in verified and verified[target] != "verified"
    ]


def _registry_problems(registry: dict) -> list[Problem]:
    problems = []
    for n, claim in enumerate(registry.get("claims", [])):
        where = f"{REGISTRY} claims[{n}]"
        if not all(isinstance(claim.get(k), str) for k in ("file", "quote")):
            problems.append(Problem("registry", where, "needs `file` and `quote`"))
            continue
        listed = claim.get("assumptions") or []
        if bool(listed) == bool(claim.get("none")):
            problems.append(Problem("registry", where, "give `assumptions` or `none: true`"))
        if set(listed) - set(ASSUMPTIONS):
            problems.append(Problem("registry", where, f"unknown assumption in {listed}"))
        if not claim.get("evidence"):
            problems.append(Problem("registry", where, "no `evidence` link"))
    for n, exempt in enumerate(registry.get("exempt", [])):
        if not all(isinstance(exempt.get(k), str) for k in ("file", "quote", "reason")):
            problems.append(Problem("registry", f"{REGISTRY} exempt[{n}]", "needs file, quote, reason"))  # fmt: skip
    return problems


def check(registry: dict, pages: dict[str, str], root: Path = REPO) -> list[Problem]:
    """Every problem of `pages` ({repository path: Markdown}) against `registry`."""
    problems = _registry_problems(registry)
    if problems:
        return problems
    units = {page: paragraphs(text) for page, text in pages.items()}
    claims = [c for c in registry.get("claims", []) if c["file"] in pages]
    for claim in claims:
        page, quote = claim["file"], claim["quote"]
        holding = [p for p in units[page] if quote in p]
        if not holding:
            problems.append(Problem("missing-quote", page, f"{quote!r} is in no paragraph"))
            continue
        paragraph = holding[0]
        absent = set(claim.get("assumptions") or []) - named_assumptions(paragraph)
        if absent:
            problems.append(Problem("assumption", page, f"{quote!r}: names no {sorted(absent)}"))
        for link in claim["evidence"]:
            if not re.search(re.escape(link) + r"[)`]", paragraph):
                problems.append(Problem("link", page, f"{quote!r}: paragraph lacks {link}"))
            elif (wrong := resolve(page, link, root)) is not None:
                problems.append(Problem("unresolved", page, f"{quote!r}: {wrong}"))
    exempt = registry.get("exempt", [])
    for page, paras in units.items():
        quotes = [c["quote"] for c in claims if c["file"] == page]
        waived = [e["quote"] for e in exempt if e["file"] == page]
        for paragraph in paras:
            if any(q in paragraph for q in quotes):
                continue
            for sentence in sentences(paragraph):
                bare = re.sub(r"`[^`]*`", "", sentence)
                if QUANTITATIVE.search(bare) and not any(q in sentence for q in waived):
                    problems.append(Problem("unregistered", page, sentence[:160]))
    return problems


def load_registry(root: Path = REPO) -> dict:
    return yaml.safe_load((root / REGISTRY).read_text()) or {}


def claim_pages(root: Path = REPO) -> dict[str, str]:
    """README.md and docs/*.md but the pages in SKIPPED_PAGES."""
    paths = [root / "README.md", *sorted((root / "docs").glob("*.md"))]
    pages = {p.relative_to(root).as_posix(): p.read_text() for p in paths}
    return {page: text for page, text in pages.items() if page not in SKIPPED_PAGES}


def main() -> int:
    problems = check(load_registry(), claim_pages())
    for problem in problems:
        print(problem)
    print(f"{len(problems)} problem(s)", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
