# `make tlc` and `make tlc-quick`: the TLC matrix of models/catalog.yaml + models/matrix.yaml.
# Included by the Makefile (-include models/tlc.mk); BIN and setup come from there.
# TLC_JOBS TLC processes run at once (default 2, one per core), TLC_WORKERS workers each,
# TLC_HEAP heap per process (2 x 3g stays under 6 GiB).
TLC_JOBS ?= 2
TLC_WORKERS ?= 1
TLC_HEAP ?= 3g

.PHONY: tlc tlc-quick tlc-gen

# The whole matrix: results/runtime_tlc.md, results/runtime_tlc.json, results/tlc_traces/.
tlc: setup
	$(BIN)/python -m models.tlc --jobs $(TLC_JOBS) --workers $(TLC_WORKERS) --heap $(TLC_HEAP)

# Signals, one interlock tier, two broken configs (under 3 minutes); writes nothing, exits
# non-zero when an outcome disagrees with the catalog or a run errors.
tlc-quick: setup
	$(BIN)/python -m models.tlc --quick --jobs $(TLC_JOBS) --workers $(TLC_WORKERS) --heap $(TLC_HEAP)

# Regenerate models/generated/ only.
tlc-gen: setup
	$(BIN)/python -m models.gen_cfg
