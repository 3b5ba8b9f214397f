"""The Prove sweep's raw data, committed beside its report (docs/results.md#raw-data).

A sweep writes one JSON file per run under .data/prove/runs/, which is not committed. So that a
reader can recompute every number of results/runtime_prove.md without running anything, the
report is never rendered from those files directly: they are first packed here, and the report
is rendered from the pack, the same way `python -m prove.report --verify` renders it again.

    <results dir>/raw/runtime_prove/runs.jsonl.gz   every run file, one JSON line each, sorted
                                                     by run id, scrubbed of machine paths;
                                                     gzip with no timestamp (byte-reproducible)
    <results dir>/raw/runtime_prove/index.json      the sweep (size, argv, wall time, versions),
                                                     the scenario files as they were run, the
                                                     inputs the report reads from elsewhere (TLC
                                                     outcomes, bench medians, activity bodies),
                                                     one row per run, and the pack's sha256

The index's rows let a reader find a run without opening the pack: its cell, seed, n, correct
count, dropped iterations and error, and the sha256 of its line.
"""

from __future__ import annotations

import gzip
import hashlib
import json
from pathlib import Path
from typing import Any

from prove.scrub import scrub

DIRNAME = "raw/runtime_prove"
ARCHIVE = "runs.jsonl.gz"
INDEX = "index.json"
FORMAT = 1


class RawDataError(Exception):
    """The committed raw data is missing, damaged or of another format."""


def _line(run: dict) -> str:
    return scrub(json.dumps(run, sort_keys=True, separators=(",", ":"), default=str))


def _row(run: dict, line: str) -> dict:
    ident, out = run.get("identity") or {}, run.get("outcome") or {}
    return {
        "run_id": ident.get("run_id"),
        "cell": [
            ident.get("api", "local"),
            ident.get("scenario"),
            ident.get("variant"),
            ident.get("system"),
            ident.get("tier"),
        ],  # fmt: skip
        "seed": ident.get("seed"),
        "n": out.get("n", 1),
        "correct_n": out.get("correct_n", int(bool(out.get("correct")))),
        "dropped": len(out.get("dropped_iterations") or []),
        "error": None if not run.get("error") else str(run["error"])[:200],
        "sha256": hashlib.sha256(line.encode()).hexdigest(),
    }


def pack(raw_dir: Path, results: list[dict], meta: dict) -> Path:
    """Write the pack and its index; returns the index's path."""
    raw_dir.mkdir(parents=True, exist_ok=True)
    runs = sorted(results, key=lambda r: str((r.get("identity") or {}).get("run_id")))
    lines = [_line(r) for r in runs]
    body = ("\n".join(lines) + "\n").encode() if lines else b""
    data = gzip.compress(body, compresslevel=9, mtime=0)
    (raw_dir / ARCHIVE).write_bytes(data)
    rows = [_row(json.loads(x), x) for x in lines]
    index = {
        "format": FORMAT,
        "archive": {
            "file": ARCHIVE,
            "bytes": len(data),
            "runs": len(lines),
            "sha256": hashlib.sha256(data).hexdigest(),
        },  # fmt: skip
        **json.loads(scrub(json.dumps(meta, default=str))),
        "runs": rows,
    }
    path = raw_dir / INDEX
    path.write_text(json.dumps(index, indent=1, sort_keys=True) + "\n")
    return path


def load(raw_dir: Path) -> tuple[list[dict], dict]:
    """(the run files, the index) from a committed pack; RawDataError says what is wrong."""
    index_path, archive = raw_dir / INDEX, raw_dir / ARCHIVE
    try:
        index = json.loads(index_path.read_text())
        data = archive.read_bytes()
    except FileNotFoundError as e:
        raise RawDataError(f"no raw data: {e.filename} is missing") from None
    except ValueError as e:
        raise RawDataError(f"{index_path.name} is not JSON: {e}") from None
    if index.get("format") != FORMAT:
        raise RawDataError(f"{index_path.name} has format {index.get('format')!r}, not {FORMAT}")
    digest = hashlib.sha256(data).hexdigest()
    if digest != index["archive"]["sha256"]:
        raise RawDataError(f"{ARCHIVE} does not match the sha256 its index records "
                           f"({digest[:12]} != {index['archive']['sha256'][:12]})")  # fmt: skip
    text = gzip.decompress(data).decode()
    runs = [json.loads(x) for x in text.splitlines() if x]
    if len(runs) != len(index["runs"]):
        raise RawDataError(
            f"{ARCHIVE} holds {len(runs)} runs, its index lists {len(index['runs'])}"
        )
    return runs, index


def scenario_texts(scns: list[Any]) -> dict[str, str]:
    """The scenario files as they were run: {file name: text}."""
    return {Path(s.path).name: Path(s.path).read_text() for s in scns if s.path}
