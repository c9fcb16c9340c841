# Two commands set everything up on a fresh machine (see README):
#   make demo   - create .venv, prepare the embedded generated dataset, train, submit, render
#   make test   - create .venv and run the test suite
# `make bench` runs the full benchmark suite; `make bench-quick` runs every benchmark once (CI).
VENV ?= .venv
PYTHON ?= python3
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
DEMO_STORE := stores/communities.zarr
DEMO_EPOCHS := 20
DEMO_BOARD := runs/demo-board

.PHONY: install peers demo test test-all lint bench bench-quick clean

install: $(STAMP)

# The `partition` extra brings Mt-KaHyPar and pymetis for the `vertex` scheme (else it falls back
# to range partitioning). torch==2.13.0 is pinned first so pip takes the CPU build available here instead of resolving a
# multi-GB CUDA build through another package's requirement.
$(STAMP): pyproject.toml
	$(PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 11))' || { echo "dgbench needs Python >= 3.11"; exit 1; }
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q -e '.[dev,partition]'
	touch $(STAMP)

# PyTorch Geometric Temporal for the peer benchmark. --no-deps: it declares torch-scatter/torch-sparse,
# which PyPI has only as sources for torch 2.13; its EvolveGCNO needs neither (see the benchmark).
PEERS_STAMP := $(VENV)/.peers
peers: $(PEERS_STAMP)

$(PEERS_STAMP): $(STAMP)
	$(BIN)/pip install -q -e '.[dev,partition,peers]'
	$(BIN)/pip install -q --no-deps 'torch-geometric-temporal>=0.54'
	touch $(PEERS_STAMP)

# The main job on the embedded default (generated, no download): prepare -> evaluation sets -> run -> submit
# -> render. The default is `communities` (lasting activity, drifting communities, recurring edges), so
# TM-GCN learns above chance; esdg-random stays ESDG's uniform scaling graph (AP 0.5 by construction).
# The demo board is local scratch under runs/, so records from a modified tree are let in (+dirty); it is
# rebuilt from this run's records only, so a second `make demo` shows each job once.
demo: install
	$(BIN)/dgbench prepare communities --overwrite --out $(DEMO_STORE)
	$(BIN)/dgbench info $(DEMO_STORE)
	$(BIN)/dgbench validate $(DEMO_STORE)
	rm -rf runs/demo $(DEMO_BOARD) $(DEMO_STORE).tasks
	$(BIN)/dgbench tasks $(DEMO_STORE)
	$(BIN)/dgbench run --scheme single --model tmgcn --dataset $(DEMO_STORE) --epochs $(DEMO_EPOCHS) --extra-negatives historical --out runs/demo/single.json
	$(BIN)/dgbench run --scheme snapshot --model tmgcn --dataset $(DEMO_STORE) --nproc 2 --epochs $(DEMO_EPOCHS) --extra-negatives historical --out runs/demo/snapshot.json
	$(BIN)/dgbench run --scheme single --model persistence --dataset $(DEMO_STORE) --epochs 4 --extra-negatives historical --out runs/demo/persistence.json
	$(BIN)/dgbench submit runs/demo/single.json runs/demo/snapshot.json runs/demo/persistence.json --board $(DEMO_BOARD) --allow-dirty
	$(BIN)/dgbench leaderboard --board $(DEMO_BOARD) --update
	$(BIN)/dgbench leaderboard --board $(DEMO_BOARD) --format text
	$(BIN)/dgbench compare runs/demo/single.json runs/demo/snapshot.json
	@echo "leaderboard page: $(DEMO_BOARD)/index.html"

# Two workers (one per CI core), whole files per worker so a module's shared fixtures train once; most tests
# wait on process start-up, sleeps or collectives, so the second worker fills the idle core.
# --no-loadscope-reorder: files in collection order, the longest first (tests/conftest.py's LONGEST_FIRST);
# xdist's own order (most tests first) started the long few-test files last, one worker finishing alone.
test: install
	$(BIN)/python -m pytest -q -m "not slow" -n 2 --dist loadfile --no-loadscope-reorder tests

# ruff over every source tree; mypy over the scheme contract's seams (pyproject's [tool.mypy] files).
lint: install
	$(BIN)/ruff check dgbench trainers loaders generators tests benchmarks scripts
	$(BIN)/mypy

test-all: install
	$(BIN)/python -m pytest -q tests

bench: peers
	$(BIN)/python -m pytest -q benchmarks --benchmark-json=artifacts/bench.json

# Every benchmark once on small sizes; fails if any collected benchmark was not timed. The peer
# libraries are best-effort here: without them the PGT comparison skips with its reason.
bench-quick: install
	@$(MAKE) --no-print-directory peers || echo "warning: peer libraries not installed; the PGT comparison will skip"
	PYTHON=$(BIN)/python scripts/bench_quick.sh artifacts/bench-quick.json

clean:
	rm -rf stores runs artifacts .pytest_cache
