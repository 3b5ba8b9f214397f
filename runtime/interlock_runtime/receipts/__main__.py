"""`python -m interlock_runtime.receipts FILE ...`: `interlock verify` (receipts/cli.py)."""

import sys

from .cli import main

sys.exit(main())
