"""python -m conformance.matrix: run the fault matrix (models/faults.yaml) and write
results/matrix.md and .json. `--sample` runs the seeded sample `make test` runs; `--only`
names cells (feature/fault/mode, comma-separated); `--exclusive only|skip` runs only the
cells that crash the cluster, or all but them."""

from __future__ import annotations

import sys

from conformance.matrix.run import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
