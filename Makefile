# Set-up: `make demo` runs the pipeline on the embedded sample (ingest, hag, precompute, train, and a
# metapath HDG on its typed twin);
# `make test` runs the tests.
# Both create .venv and install what they need. GPU users: make TORCH="torch==2.13.0 --index-url ..." test
PYTHON ?= python3
VENV ?= .venv
TORCH ?= torch==2.13.0
# test workers (pytest-xdist): one per core; TEST_JOBS=0 runs the suite in this process alone
TEST_JOBS ?= auto
BIN := $(VENV)/bin
OUT ?= out

.PHONY: demo test install clean sample-data docs

install: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q $(TORCH)
	$(BIN)/pip install -q -e ".[test]"
	touch $@

demo: install
	@mkdir -p $(OUT)
	$(BIN)/gnnprep ingest sample -o $(OUT)/sample.h5
	$(BIN)/gnnprep info $(OUT)/sample.h5
	$(BIN)/gnnprep hag $(OUT)/sample.h5 -o $(OUT)/sample-hag.h5
	$(BIN)/gnnprep precompute $(OUT)/sample.h5 --hops 3 --blocks auto --hag $(OUT)/sample-hag.h5 -o $(OUT)/sample-features.h5
	$(BIN)/gnnprep info $(OUT)/sample-features.h5
	rm -rf $(OUT)/sample-run
	$(BIN)/gnnprep train lc-gprgnn $(OUT)/sample-features.h5 -o $(OUT)/sample-run --epochs 100 --patience 30 \
		--hidden 64 --normalize-features row
	@echo "== your own operators (examples/operators.py) and ppr beside sym, then sign over the four channels =="
	$(BIN)/gnnprep precompute $(OUT)/sample.h5 --hops 2 --operator sym,ppr:alpha=0.1,k=10 \
		--operator-file examples/operators.py:degree_similarity --operator-file examples/operators.py:max_pool \
		-o $(OUT)/sample-operators.h5
	$(BIN)/gnnprep info $(OUT)/sample-operators.h5
	rm -rf $(OUT)/sample-operators-run
	$(BIN)/gnnprep train sign $(OUT)/sample-operators.h5 -o $(OUT)/sample-operators-run \
		--operator sym,ppr:alpha=0.1,k=10,degree_similarity,max_pool --epochs 100 --patience 30 --hidden 64 \
		--normalize-features row
	@echo "== the same sample typed (authors, papers): a metapath HDG channel, precomputed and trained on =="
	$(BIN)/gnnprep ingest sample_data/hetero -o $(OUT)/hetero.h5
	$(BIN)/gnnprep hdg $(OUT)/hetero.h5 --select metapath:APA=author-paper-author,cap=32 -o $(OUT)/hetero-apa.h5
	$(BIN)/gnnprep info $(OUT)/hetero-apa.h5
	$(BIN)/gnnprep precompute $(OUT)/hetero.h5 --hops 2 --hdg $(OUT)/hetero-apa.h5 -o $(OUT)/hetero-features.h5
	rm -rf $(OUT)/hetero-run
	$(BIN)/gnnprep train sign $(OUT)/hetero-features.h5 -o $(OUT)/hetero-run --operator sym,APA --epochs 100 \
		--patience 30 --hidden 64 --normalize-features row

test: install
	$(BIN)/python -m pytest -q -n $(TEST_JOBS) --durations=15

docs: install
	$(BIN)/python -m gnnprep.cli.reference

sample-data: install
	$(BIN)/python benchmarks/make_sample_data.py --out sample_data

clean:
	rm -rf $(VENV) $(OUT) .pytest_cache
