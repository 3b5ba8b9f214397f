"""`python -m interlock_runtime.cli`: the `interlock` command."""

import sys

from . import main

sys.exit(main())
