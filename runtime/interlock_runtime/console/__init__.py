"""The operator console: a small server-rendered web app over one Interlock database.

    interlock console [--dsn DSN] [--port 8470]

Pages: workflows, the approvals inbox, effects with receipts, grants (see app.py). Needs the
`console` extra (starlette, jinja2, uvicorn, python-multipart).
"""

from __future__ import annotations

from .server import main

__all__ = ["main"]
