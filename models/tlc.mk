# `make tlc` and `make tlc-quick`: the TLC matrix of models/catalog.yaml + models/matrix.yaml.
# Included by the Makefile (-include models/tlc.mk); BIN and setup come from there.
# TLC_JOBS TLC processes run at once (default 2, one per core), TLC_WORKERS workers each,
# TLC_HEAP heap per process (2 x 3g stays under 6 GiB).
TLC_JOBS ?= 2
TLC_WORKERS ?= 1
TLC_HEAP ?= 3g

.PHONY: tlc tlc-quick tlc-gen tlc-full

# The whole matrix: results/runtime_tlc.md, results/runtime_tlc.json, results/tlc_traces/.
tlc: setup
	$(BIN)/python -m models.tlc --jobs $(TLC_JOBS) --workers $(TLC_WORKERS) --heap $(TLC_HEAP)

# Signals, one interlock tier, two broken configs (under 3 minutes); writes nothing, exits
# non-zero when an outcome disagrees with the catalog or a run errors.
tlc-quick: setup
	$(BIN)/python -m models.tlc --quick --jobs $(TLC_JOBS) --workers $(TLC_WORKERS) --heap $(TLC_HEAP)

# The main configs at the spec's sizes (models/full.yaml): one TLC process at a time, each
# exhaustive run stopped at its budget and resumed from its checkpoint next time, then TLC
# simulation runs; writes results/runtime_tlc_full.{md,json}.  Hours for the whole sweep; not
# part of `make tlc` or `make test`.  TLC_FULL_ARGS e.g. "--only Interlock_t2_G1
# --budget-minutes 2 --sim-minutes 1" for a short look, or "--fresh" to drop checkpoints.
TLC_FULL_ARGS ?=
tlc-full: setup
	$(BIN)/python -m models.tlc --full --workers $(TLC_WORKERS) --heap $(TLC_HEAP) $(TLC_FULL_ARGS)

# Regenerate models/generated/ only.
tlc-gen: setup
	$(BIN)/python -m models.gen_cfg
