"""What every result verifier shares (docs/results.md): a published report is checked by
rendering it again, in memory, from the committed raw data and comparing the text byte for byte.
It lives in world/ because both harness layers use it (conformance may not import prove).

A verifier never runs the measurement; it reads files. Its outcome is one of:

- verified: the committed Markdown (and the aggregates in the JSON) are what the raw data gives;
- unverifiable: the result was made before its raw data was kept; regenerating it fixes that;
- DIFFERS: the committed text is not what the raw data gives. The report names the numbers
  that differ; when none does (the generator's prose or layout changed since the run),
  `--render` rewrites the Markdown from the committed raw data without running anything.
"""

from __future__ import annotations

import difflib
import gzip
import hashlib
import io
import json
import re
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# The freshness banner prove/freshness.py writes under a stale report's heading: no part of
# the rendering. The markers live here, so that every verifier (conformance included, which
# may not import prove) strips the same block.
BEGIN = "<!-- freshness -->"
END = "<!-- /freshness -->"
BANNER = re.compile(rf"^{re.escape(BEGIN)}\n.*?^{re.escape(END)}\n", flags=re.MULTILINE | re.DOTALL)
NUMBER = re.compile(r"(?<![\w.])-?\d[\d,]*(?:\.\d+)?(?:e[+-]?\d+)?%?")
DIFF_LINES = 30

VERIFIED, UNVERIFIABLE, DIFFERS = "verified", "unverifiable", "DIFFERS"


def strip_banner(text: str) -> str:
    """The text without the freshness banner (its markers, what is between, the newline after)."""
    return BANNER.sub("", text)


def compare(name: str, expected_text: str, actual_text: str) -> list[str]:
    """A unified diff of the first differences (at most DIFF_LINES lines), after the banner is
    taken out of both; empty when the two are the same. `expected_text` is the committed one."""
    a, b = strip_banner(expected_text), strip_banner(actual_text)
    if a == b:
        return []
    lines = list(
        difflib.unified_diff(
            a.splitlines(),
            b.splitlines(),
            f"{name} (committed)",
            f"{name} (from raw data)",
            lineterm="",
            n=0,
        )
    )
    if not lines:  # only a trailing newline differs
        return [
            f"--- {name} (committed)",
            f"+++ {name} (from raw data)",
            "@@ end of file @@",
            "(the texts differ only in their final newline)",
        ]
    return [line[:300] for line in lines[:DIFF_LINES]] + (
        [f"... {len(lines) - DIFF_LINES} more diff lines"] if len(lines) > DIFF_LINES else []
    )


def numbers_that_differ(expected_text: str, actual_text: str) -> tuple[list[str], list[str]]:
    """The numbers of the changed lines found only in the committed text, and only in the
    re-rendered one (each as often as it is missing). Both empty: only prose or layout changed."""
    a = strip_banner(expected_text).splitlines()
    b = strip_banner(actual_text).splitlines()
    old: list[str] = []
    new: list[str] = []
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes():
        if tag != "equal":
            old += [n for line in a[i1:i2] for n in NUMBER.findall(line)]
            new += [n for line in b[j1:j2] for n in NUMBER.findall(line)]
    return _only_in(old, new), _only_in(new, old)


def _only_in(xs: list[str], ys: list[str]) -> list[str]:
    """The items of xs not matched one for one in ys, in xs's order."""
    left = Counter(ys)
    out = []
    for x in xs:
        if left[x]:
            left[x] -= 1
        else:
            out.append(x)
    return out


def diff_json(expected: Any, actual: Any, path: str = "") -> list[str]:
    """Where two JSON values differ, as `path: committed -> recomputed` lines (floats compare
    exactly: a value recomputed from the same floats is the same float)."""
    if isinstance(expected, dict) and isinstance(actual, dict):
        out = []
        for k in list(expected) + [k for k in actual if k not in expected]:
            p = f"{path}.{k}" if path else str(k)
            if k not in actual:
                out.append(f"{p}: {_short(expected[k])} -> (missing)")
            elif k not in expected:
                # A field the generator added after the run: only a value is a difference; an
                # empty one (no sample of it was kept) is what the old run's data gives.
                if not holds_no_data(actual[k]):
                    out.append(f"{p}: (missing) -> {_short(actual[k])}")
            else:
                out += diff_json(expected[k], actual[k], p)
        return out
    if isinstance(expected, list) and isinstance(actual, list) and len(expected) == len(actual):
        return [
            d
            for i, (x, y) in enumerate(zip(expected, actual, strict=True))
            for d in diff_json(x, y, f"{path}[{i}]")
        ]
    if expected == actual and (type(expected) is type(actual) or _same_number(expected, actual)):
        return []
    return [f"{path}: {_short(expected)} -> {_short(actual)}"]


def holds_no_data(x: Any) -> bool:
    """None, an empty container, or a summary of no samples (n 0, every statistic None)."""
    if isinstance(x, dict):
        return all(holds_no_data(v) or (k == "n" and v == 0) for k, v in x.items())
    return x is None or x == [] or x == ""


def _same_number(a: Any, b: Any) -> bool:
    numbers = (int, float)
    return (
        isinstance(a, numbers)
        and isinstance(b, numbers)
        and not isinstance(a, bool)
        and not isinstance(b, bool)
        and a == b
    )


def _short(x: Any) -> str:
    text = json.dumps(x, default=str)
    return text if len(text) <= 80 else text[:77] + "..."


def json_roundtrip(x: Any) -> Any:
    """x as the JSON file holds it (tuples become lists, keys strings, objects str())."""
    return json.loads(json.dumps(x, default=str))


@dataclass
class Outcome:
    """One report's verification."""

    name: str  # the report, e.g. results/bench.md
    status: str  # VERIFIED | UNVERIFIABLE | DIFFERS
    reason: str = ""
    regenerate: str = ""  # the command that makes the result again (runs the measurement)
    render: str = ""  # the command that rewrites the Markdown from the raw data (runs nothing)
    details: list[str] = field(default_factory=list)

    def line(self) -> str:
        """One line for the summary of every verifier."""
        text = f"{self.status:12} {self.name}"
        return text + (f": {self.reason}" if self.reason else "")

    def report(self) -> str:
        """The whole outcome: the line, the differences, the commands that fix them."""
        out = [self.line(), *(f"    {d}" for d in self.details)]
        if self.status == DIFFERS:
            if self.render:
                out.append(f"    if only the template or prose changed: {self.render}")
            if self.regenerate:
                out.append(f"    to measure again: {self.regenerate}")
        return "\n".join(out)


def text_outcome(
    name: str,
    committed: str,
    rendered: str,
    regenerate: str,
    render: str,
    json_diffs: Iterable[str] = (),
) -> Outcome:
    """The outcome of comparing a committed Markdown with its re-rendering (and the JSON's
    aggregates with their recomputation, `json_diffs`)."""
    jd = list(json_diffs)
    diff = compare(name, committed, rendered)
    if not diff and not jd:
        return Outcome(name, VERIFIED, regenerate=regenerate, render=render)
    details: list[str] = []
    reason = []
    if jd:
        reason.append(f"{len(jd)} aggregate(s) in the JSON are not what its raw data gives")
        details += ["aggregates (committed -> recomputed from raw data):", *jd[:DIFF_LINES]]
    if diff:
        old, new = numbers_that_differ(committed, rendered)
        if old:
            reason.append(
                f"numbers differ: committed {', '.join(old[:12])}; "
                f"from raw data {', '.join(new[:12]) or '-'}"
            )
        elif new:
            reason.append(
                f"no published number changes; the template adds {len(new)} "
                "(new prose or columns: re-render it)"
            )
        else:
            reason.append("no number differs; the prose or layout does (re-render it)")
        details += diff
    return Outcome(name, DIFFERS, "; ".join(reason), regenerate, render, details)


def unverifiable(name: str, regenerate: str, why: str = "") -> Outcome:
    return Outcome(
        name,
        UNVERIFIABLE,
        why or f"no raw data (made before raw data was kept); regenerate with {regenerate}",
        regenerate,
    )


# -- raw data files: JSON lines, gzip with no timestamp, so the same rows give the same bytes ---


def write_jsonl_gz(path: Path, rows: Iterable[Any]) -> None:
    buf = io.BytesIO()
    with gzip.GzipFile(filename="", mode="wb", fileobj=buf, mtime=0, compresslevel=9) as gz:
        for row in rows:
            gz.write((json.dumps(row, sort_keys=True, default=str) + "\n").encode())
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(buf.getvalue())


def read_jsonl_gz(path: Path) -> Iterator[Any]:
    with gzip.open(path, "rt", encoding="utf-8") as f:
        for line in f:
            if line.strip():
                yield json.loads(line)


def finish(outcomes: list[Outcome]) -> int:
    """Print each outcome and return the exit status: 1 when any differs."""
    for o in outcomes:
        print(o.report())
    return 1 if any(o.status == DIFFERS for o in outcomes) else 0


def tree_hash(root: Path) -> str:
    """One hash of every file under root, names and bytes: a test that must leave the
    published results/ as they were compares it before and after."""
    h = hashlib.sha256()
    for p in sorted(root.rglob("*")):
        if p.is_file():
            h.update(str(p.relative_to(root)).encode() + b"\0" + p.read_bytes())
    return h.hexdigest()
