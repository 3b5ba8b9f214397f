"""No path of this machine in a committed result: one scrubber for every report writer.

The checkout becomes `<repo>`, the Python installation `<python>`, the home directory `~` and
temporary directories `<tmp>` (stack traces from worker processes carry all of them)."""

from __future__ import annotations

import re
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def scrub(text: str) -> str:
    """The text with this machine's paths replaced by their names (longest first)."""
    for path, name in ((REPO, "<repo>"), (Path(sys.base_prefix), "<python>"),
                       (Path(sys.prefix), "<python>"), (Path.home(), "~")):  # fmt: skip
        if str(path) not in ("/", ""):
            text = text.replace(str(path), name)
    text = text.replace(tempfile.gettempdir(), "<tmp>")
    return re.sub(r"/tmp/[^\s\"',;)]*", "<tmp>", text)
