"""Is each published result still about the code it measures? results/INDEX.md and .json.

Every result under results/ is declared in prove/results_sources.yaml: its files, the command
that makes it, where it records the commit it was made at, and the code paths it measures
(docs/results.md#current). For each result this module reads the recorded commit(s) and
counts the commits since then that touched the declared paths (results/ never counts, so
committing a result or the index does not make anything stale). Status:

- current: its declared files are at HEAD what they were at the commit it records (commits
  since then may have touched them and been undone);
- stale: some differ (the reason names how many commits touched which paths, and how many
  files now differ);
- dirty: made from a tree with uncommitted code, so no commit names what it measured;
- unknown commit: it records no commit, or one not in this repository's history.

    python -m prove.freshness              # writes results/INDEX.md, .json and the banners
    python -m prove.freshness --no-banners # the index alone
    python -m prove.freshness --check      # writes nothing; exit 1 when the index differs

The index is a function of the repository's history and the result files alone: no
wall-clock time. It is dated by the newest commit that touched any declared path ("as of"),
not by HEAD, so that committing the index (or a result, or unrelated prose) leaves it
up to date.

Banners. Each stale, dirty or unknown-commit result's Markdown gets a banner right after its
first heading line, between `<!-- freshness -->` and `<!-- /freshness -->`; a current one has
it removed. Nothing outside the markers is touched. A generator that compares a re-rendered
Markdown with the committed one byte for byte (a `--verify` step) calls `strip_banner(text)`
on the committed text first: it returns the text without the banner block, exactly as the
generator wrote it.
"""

from __future__ import annotations

import argparse
import glob
import json
import re
import subprocess
import sys
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from world.verify_common import BANNER, BEGIN, END, strip_banner

__all__ = ["BEGIN", "END", "strip_banner"]  # re-exported: verifiers call strip_banner

REPO = Path(__file__).resolve().parents[1]
SOURCES = "prove/results_sources.yaml"
INDEX_MD = "results/INDEX.md"
INDEX_JSON = "results/INDEX.json"
TOP_PATHS = 3

RULE = (
    "A change to the code a result measures regenerates that result (its command, or "
    "`make refresh STALE_ONLY=1`) before the change is called done. A result is *current* "
    "when its declared paths are at HEAD what they were at the commit it records, *stale* "
    "when they differ, *dirty* when it was made from a tree with uncommitted code, *unknown commit* "
    "when the commit it records is not in this repository's history (or it records none)."
)

_HEADING_RE = re.compile(r"^#{1,6} .*\n?", flags=re.MULTILINE)


class SourcesError(ValueError):
    """prove/results_sources.yaml is malformed; the message names the entry and the field."""


@dataclass(frozen=True)
class Source:
    """One published result, as declared in prove/results_sources.yaml."""

    name: str
    files: list[str]
    command: str
    paths: list[str]
    commits: list[dict[str, str]] = field(default_factory=list)
    markdown: str | None = None
    refresh: bool = True


# ---------------------------------------------------------------------------------------------
# The declarations


def load_sources(root: Path = REPO) -> list[Source]:
    """The declared results, in file order; SourcesError when the file is malformed."""
    path = root / SOURCES
    try:
        doc = yaml.safe_load(path.read_text())
    except FileNotFoundError as e:
        raise SourcesError(f"{SOURCES}: missing; declare every result there") from e
    except yaml.YAMLError as e:
        raise SourcesError(f"{SOURCES}: not valid YAML: {e}") from e
    entries = doc.get("results") if isinstance(doc, dict) else None
    if not isinstance(entries, list):
        raise SourcesError(f"{SOURCES}: expected a mapping with a list `results:`")
    sources: list[Source] = []
    for i, entry in enumerate(entries):
        sources.append(_source(entry, i))
    names = Counter(s.name for s in sources)
    twice = sorted(n for n, k in names.items() if k > 1)
    if twice:
        raise SourcesError(f"{SOURCES}: result names must be unique: {', '.join(twice)}")
    return sources


def _source(entry: Any, i: int) -> Source:
    where = f"{SOURCES}: results[{i}]"
    if not isinstance(entry, dict):
        raise SourcesError(f"{where}: expected a mapping")
    name = entry.get("name")
    if not isinstance(name, str) or not name:
        raise SourcesError(f"{where}: `name` must be a non-empty string")
    where = f"{SOURCES}: result {name!r}"
    for key in ("files", "paths"):
        value = entry.get(key)
        if not isinstance(value, list) or not value or not all(isinstance(v, str) for v in value):
            raise SourcesError(f"{where}: `{key}` must be a non-empty list of paths")
    if any(p.lstrip("!").startswith("results/") for p in entry["paths"]):
        raise SourcesError(f"{where}: `paths` names results/; declare the code it measures")
    if not isinstance(entry.get("command"), str) or not entry["command"].strip():
        raise SourcesError(f"{where}: `command` must say how to make the result")
    commits = entry.get("commits") or []
    if not isinstance(commits, list):
        raise SourcesError(f"{where}: `commits` must be a list")
    for c in commits:
        ok_json = isinstance(c, dict) and isinstance(c.get("json"), str) and "commit" in c
        ok_md = isinstance(c, dict) and isinstance(c.get("markdown"), str) and "pattern" in c
        if not (ok_json or ok_md):
            raise SourcesError(
                f"{where}: each of `commits` is {{json: FILE, commit: KEY, dirty: KEY}} "
                f"or {{markdown: FILE, pattern: REGEX}}, got {c!r}"
            )
    markdown = entry.get("markdown")
    if markdown is not None and not isinstance(markdown, str):
        raise SourcesError(f"{where}: `markdown` must be a path")
    return Source(
        name=name,
        files=list(entry["files"]),
        command=entry["command"].strip(),
        paths=list(entry["paths"]),
        commits=list(commits),
        markdown=markdown,
        refresh=bool(entry.get("refresh", True)),
    )


# ---------------------------------------------------------------------------------------------
# Git


def _git(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["git", *args], cwd=root, capture_output=True, text=True)


def pathspecs(paths: list[str]) -> list[str]:
    """Declared paths as git pathspecs: "!p" leaves p out."""
    return [f":(exclude){p[1:]}" if p.startswith("!") else p for p in paths]


def resolve(root: Path, commit: str) -> str | None:
    """The full hash of a recorded commit when HEAD's history holds it, else None."""
    if not re.fullmatch(r"[0-9a-fA-F]{4,40}", commit):
        return None
    out = _git(root, "rev-parse", "--verify", "--quiet", f"{commit}^{{commit}}")
    full = out.stdout.strip()
    if out.returncode != 0 or not full:
        return None
    if _git(root, "merge-base", "--is-ancestor", full, "HEAD").returncode != 0:
        return None
    return full


@dataclass(frozen=True)
class Touched:
    """The commits since a result's commit that touched its declared paths."""

    count: int
    last_commit: str | None
    last_date: str | None
    top: list[tuple[str, int]]  # declared path, commits touching it; most touched first


def touched(root: Path, since: str, paths: list[str]) -> Touched:
    """Commits in since..HEAD touching the declared paths, and which paths they touched."""
    out = _git(
        root,
        "log",
        "--format=%x00%H %cI",
        "--name-only",
        f"{since}..HEAD",
        "--",
        *pathspecs(paths),
    )
    if out.returncode != 0:
        raise RuntimeError(f"git log {since}..HEAD failed: {out.stderr.strip()}")
    includes = [p for p in paths if not p.startswith("!")]
    per_path: Counter[str] = Counter()
    commits: list[tuple[str, str]] = []
    for chunk in out.stdout.split("\x00")[1:]:
        lines = [ln for ln in chunk.splitlines() if ln.strip()]
        sha, date = lines[0].split(" ", 1)
        commits.append((sha, date))
        hit = {p for p in includes for f in lines[1:] if _under(f, p)}
        per_path.update(hit)
    top = sorted(per_path.items(), key=lambda kv: (-kv[1], kv[0]))[:TOP_PATHS]
    last = commits[0] if commits else (None, None)
    return Touched(len(commits), last[0], last[1], top)


def differs(root: Path, since: str, paths: list[str]) -> list[str]:
    """The declared files whose content at HEAD is not what it was at `since`: what makes a
    result stale (a commit that touched a path and a later one that undid it cancel out)."""
    out = _git(root, "diff", "--name-only", since, "HEAD", "--", *pathspecs(paths))
    if out.returncode != 0:
        raise RuntimeError(f"git diff {since} HEAD failed: {out.stderr.strip()}")
    return sorted(ln for ln in out.stdout.splitlines() if ln.strip())


def _under(file: str, declared: str) -> bool:
    return file.startswith(declared) if declared.endswith("/") else file == declared


def as_of(root: Path, sources: list[Source]) -> dict[str, str]:
    """The newest commit that touched a declared path (its exclusions honoured) or the
    declarations: the index's date. Commits touching nothing declared leave the index as is."""
    tips = set()
    for specs in [pathspecs(s.paths) for s in sources] + [[SOURCES]]:
        out = _git(root, "log", "-1", "--format=%H", "HEAD", "--", *specs)
        tips.update(out.stdout.split())
    out = _git(root, "rev-list", "--topo-order", "-n1", *sorted(tips) or ["HEAD"])
    sha = out.stdout.strip()
    date = _git(root, "log", "-1", "--format=%cI", sha).stdout.strip()
    return {"commit": sha, "short": sha[:7], "date": date}


# ---------------------------------------------------------------------------------------------
# What each result records


def _dotted(doc: Any, key: str) -> Any:
    for part in key.split("."):
        if not isinstance(doc, dict) or part not in doc:
            return None
        doc = doc[part]
    return doc


def recorded(root: Path, source: Source) -> tuple[dict[str, bool | None], list[str]]:
    """The commits a result records (commit -> dirty flag, None when not recorded), and problems."""
    commits: dict[str, bool | None] = {}
    problems: list[str] = []

    def add(commit: Any, dirty: Any, where: str) -> None:
        if not isinstance(commit, str) or not commit:
            problems.append(f"{where} records no commit")
            return
        flag = dirty if isinstance(dirty, bool) else None
        commits[commit] = _any_dirty([commits[commit], flag] if commit in commits else [flag])

    for spec in source.commits:
        if "json" in spec:
            matches = sorted(glob.glob(spec["json"], root_dir=root))
            if not matches and not glob.has_magic(spec["json"]):
                problems.append(f"{spec['json']} is missing")
            for rel in matches:
                try:
                    doc = json.loads((root / rel).read_text())
                except (OSError, ValueError):
                    problems.append(f"{rel} is not readable JSON")
                    continue
                dirty = _dotted(doc, spec["dirty"]) if spec.get("dirty") else None
                add(_dotted(doc, spec["commit"]), dirty, rel)
        else:
            try:
                text = (root / spec["markdown"]).read_text()
            except OSError:
                problems.append(f"{spec['markdown']} is missing")
                continue
            m = re.search(spec["pattern"], text)
            add(m.group(1) if m else None, None, spec["markdown"])
    return commits, problems


# ---------------------------------------------------------------------------------------------
# The index


def assess(root: Path, source: Source) -> dict[str, Any]:
    """One result's row of the index."""
    commits, problems = recorded(root, source)
    rows: list[dict[str, Any]] = []
    for commit in sorted(commits):
        full = resolve(root, commit)
        row: dict[str, Any] = {
            "commit": full or commit,
            "short": (full or commit)[:7],
            "dirty": commits[commit],
            "known": full is not None,
        }
        if full:
            t = touched(root, full, source.paths)
            row.update(
                changed=len(differs(root, full, source.paths)),
                since=t.count,
                last_change=t.last_date,
                last_commit=t.last_commit,
                top_paths=[list(kv) for kv in t.top],
            )
            row["date"] = _git(root, "log", "-1", "--format=%cI", full).stdout.strip()
        rows.append(row)
    # The part made earliest speaks for the result: the most commits since.
    rows.sort(key=lambda r: (-(r.get("changed") or 0), -(r.get("since") or 0), r["commit"]))
    known = [r for r in rows if r["known"]]
    worst = known[0] if known else None
    since = worst["since"] if worst else None
    dirty = _any_dirty([r["dirty"] for r in rows]) if rows else None
    status, reason = _status(source, rows, problems, worst)
    return {
        "name": source.name,
        "files": source.files,
        "command": source.command,
        "refresh": source.refresh,
        "markdown": source.markdown,
        "commits": rows,
        "dirty": dirty,
        "since": since,
        "last_change": worst["last_change"] if worst else None,
        "top_paths": worst["top_paths"] if worst else [],
        "status": status,
        "reason": reason,
        "problems": problems,
    }


def _any_dirty(flags: list[bool | None]) -> bool | None:
    """True when any part was dirty, False when every part is recorded clean, else None."""
    if any(f is True for f in flags):
        return True
    return None if any(f is None for f in flags) else False


def _status(
    source: Source, rows: list[dict[str, Any]], problems: list[str], worst: dict[str, Any] | None
) -> tuple[str, str]:
    unknown = [r["short"] for r in rows if not r["known"]]
    if not rows:
        why = "; ".join(problems) if problems else "the result records no commit"
        return "unknown commit", why
    if unknown:
        return "unknown commit", f"{', '.join(unknown)} not in this repository's history"
    assert worst is not None
    stale = _stale_reason(worst) if worst.get("changed") else ""
    if any(r["dirty"] for r in rows):
        made = ", ".join(r["short"] for r in rows if r["dirty"])
        return "dirty", f"made from a dirty tree at {made}" + (f"; {stale}" if stale else "")
    if stale:
        return "stale", stale
    return "current", ""


def _stale_reason(row: dict[str, Any]) -> str:
    n, files = row["since"], row["changed"]
    paths = ", ".join(f"{p} ({k})" for p, k in row["top_paths"])
    return (f"{n} commit{'s' if n != 1 else ''} touched {paths} since {row['short']}; "
            f"{files} {'files now differ' if files != 1 else 'file now differs'}")  # fmt: skip


def build_index(root: Path = REPO, sources: list[Source] | None = None) -> dict[str, Any]:
    """The whole index as a JSON-able dict (deterministic for a given history and results)."""
    sources = load_sources(root) if sources is None else sources
    results = [assess(root, s) for s in sources]
    counts = Counter(r["status"] for r in results)
    return {
        "generated_by": "python -m prove.freshness",
        "sources": SOURCES,
        "as_of": as_of(root, sources),
        "rule": RULE,
        "totals": {k: counts.get(k, 0) for k in ("current", "stale", "dirty", "unknown commit")},
        "results": results,
    }


def render_json(index: dict[str, Any]) -> str:
    return json.dumps(index, indent=1) + "\n"


def render_md(index: dict[str, Any]) -> str:
    a = index["as_of"]
    t = index["totals"]
    lines = [
        "# Results index: is each result current?",
        "",
        f"Generated by `python -m prove.freshness` (`make index`) from `{index['sources']}` "
        "and the git history; never edited by hand. It is as of "
        f"{a['short']} ({a['date'][:10]}), the newest commit that touched any declared path. "
        "`python -m prove.freshness --check` says whether this file is up to date; "
        "`make refresh` regenerates every result (docs/results.md#current).",
        "",
        f"**Rule.** {index['rule']}",
        "",
        f"**Now:** {t['current']} current, {t['stale']} stale, {t['dirty']} dirty, "
        f"{t['unknown commit']} unknown commit.",
        "",
        "| result | files | made at | dirty | commits since | last change | status |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in index["results"]:
        made = ", ".join(f"`{c['short']}`" for c in r["commits"]) or "none recorded"
        dirty = {True: "yes", False: "no", None: "not recorded"}[r["dirty"]]
        since = "" if r["since"] is None else str(r["since"])
        last = (r["last_change"] or "")[:10]
        status = f"**{r['status']}**" if r["status"] != "current" else "current"
        if r["reason"]:
            status += f": {r['reason']}"
        files = ", ".join(f"`{f.removeprefix('results/')}`" for f in r["files"])
        lines.append(f"| {r['name']} | {files} | {made} | {dirty} | {since} | {last} | {status} |")
    lines.append("")
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------
# Banners


def set_banner(text: str, banner: str | None) -> str:
    """The Markdown with its banner set to `banner` (None removes it); idempotent.

    An existing block is replaced between its markers; a new one goes right after the first
    heading line (at the top when there is none)."""
    if banner is None:
        return strip_banner(text)
    block = f"{BEGIN}\n{banner}\n{END}\n"
    if BANNER.search(text):
        return BANNER.sub(lambda _m: block, text, count=1)
    m = _HEADING_RE.search(text)
    if m is None:
        return block + text
    head = m.group(0) if m.group(0).endswith("\n") else m.group(0) + "\n"
    return text[: m.start()] + head + block + text[m.end() :]


def banner_for(row: dict[str, Any]) -> str | None:
    """The banner a result's Markdown carries for its status (None when current)."""
    again = (
        f"Regenerate with `make refresh` (this result alone: "
        f"`python -m prove.refresh --only {row['name']}`)."
    )
    if not row["refresh"]:
        again = f"Regenerate with `{row['command']}`."
    made = ", ".join(c["short"] for c in row["commits"])
    if row["status"] == "stale":
        n = row["since"]
        paths = ", ".join(p for p, _k in row["top_paths"])
        return (
            f"> **Stale:** made at {made}; {n} commit{'s have' if n != 1 else ' has'} since "
            f"touched {paths} (see results/INDEX.md). {again}"
        )
    if row["status"] == "dirty":
        return (
            f"> **Dirty:** made at {made} from a tree with uncommitted code, so no commit names "
            f"what it measured (see results/INDEX.md). {again}"
        )
    if row["status"] == "unknown commit":
        return f"> **Unknown commit:** {row['reason']} (see results/INDEX.md). {again}"
    return None


def write_banners(root: Path, index: dict[str, Any]) -> list[str]:
    """Set every declared Markdown's banner from the index; the files it changed."""
    changed = []
    for row in index["results"]:
        md = row["markdown"]
        if not md or not (root / md).is_file():
            continue
        path = root / md
        old = path.read_text()
        new = set_banner(old, banner_for(row))
        if new != old:
            path.write_text(new)
            changed.append(md)
    return changed


# ---------------------------------------------------------------------------------------------
# Command line


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m prove.freshness", description=__doc__.split("\n")[0]
    )
    ap.add_argument(
        "--check",
        action="store_true",
        help="write nothing; exit 1 when results/INDEX.md or .json is out of date",
    )
    ap.add_argument(
        "--no-banners",
        action="store_true",
        help="write the index only, leave the results' Markdown alone",
    )
    ap.add_argument("--root", default=str(REPO), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    root = Path(args.root)
    try:
        index = build_index(root)
    except SourcesError as e:
        print(f"prove.freshness: {e}", file=sys.stderr)
        return 2
    want = {INDEX_MD: render_md(index), INDEX_JSON: render_json(index)}
    if args.check:
        stale = [p for p, text in want.items() if _read(root / p) != text]
        if stale:
            print(
                f"prove.freshness: {', '.join(stale)} out of date; "
                "run `python -m prove.freshness` (make index) and commit",
                file=sys.stderr,
            )
            return 1
        print("prove.freshness: results/INDEX.md and .json are up to date")
        return 0
    for p, text in want.items():
        (root / p).parent.mkdir(parents=True, exist_ok=True)
        (root / p).write_text(text)
    changed = [] if args.no_banners else write_banners(root, index)
    t = index["totals"]
    print(
        f"prove.freshness: wrote {INDEX_MD} and {INDEX_JSON}: {t['current']} current, "
        f"{t['stale']} stale, {t['dirty']} dirty, {t['unknown commit']} unknown commit"
        + (f"; banners changed in {', '.join(changed)}" if changed else "")
    )
    return 0


def _read(path: Path) -> str | None:
    try:
        return path.read_text()
    except OSError:
        return None


if __name__ == "__main__":
    sys.exit(main())
