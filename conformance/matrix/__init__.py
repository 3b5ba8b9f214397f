"""The fault matrix (models/faults.yaml; docs/matrix.md): every feature under every fault, in
both execution modes, judged from ground truth. `python -m conformance.matrix` runs it."""
