# A gnnprep pipeline as make drives it: ingest -> hag -> precompute -> train a few models -> results.md.
# Every step writes a real file (gnnprep writes each output atomically), so make reruns only what is
# older than its inputs: touch graph.h5 (or edit the source) and only the steps after it run again.
#
#   make install                                           # once: .venv with gnnprep (or pip install -e .)
#   make -f examples/pipeline.mk -j2                       # the embedded sample into out/pipeline/
#   make -f examples/pipeline.mk -j2 SOURCE=data/ogbn_arxiv OUT=arxiv MODELS="sgc lc-gprgnn" HOPS=5
#   make -f examples/pipeline.mk -j2 SOURCE=ogbn-arxiv SOURCE_FILES=   # a spec with no files to watch
#   make -f examples/pipeline.mk clean
#
# SOURCE is any dataset spec gnnprep ingest accepts (sample, ogbn-<name>, an OGB folder, an edge list).
# SOURCE_FILES are the files whose change reruns ingest: by default every file under the SOURCE folder
# (sample: sample_data/ without its typed twin), the file itself for an edge list.
# make tracks files, not variables: after changing HOPS, MODELS' settings or EPOCHS, add -B (or clean).

HERE := $(patsubst %/,%,$(dir $(lastword $(MAKEFILE_LIST))))
ROOT := $(patsubst %/,%,$(dir $(abspath $(HERE))))
GNNPREP ?= $(if $(wildcard $(ROOT)/.venv/bin/gnnprep),$(ROOT)/.venv/bin/gnnprep,gnnprep)
PYTHON ?= $(if $(wildcard $(ROOT)/.venv/bin/python),$(ROOT)/.venv/bin/python,python3)

SOURCE ?= sample
OUT ?= out/pipeline
HOPS ?= 3
MODELS ?= sgc lc-gcn lc-gprgnn
MEMORY_BUDGET ?= 2GiB
INGEST_ARGS ?=
HAG_ARGS ?=
PRECOMPUTE_ARGS ?= --blocks auto
EPOCHS ?= 100
TRAIN_ARGS ?= --patience 30 --hidden 64 --normalize-features row --threads 1

ifeq ($(SOURCE),sample)
SOURCE_FILES ?= $(filter-out $(ROOT)/sample_data/hetero/%,$(shell find $(ROOT)/sample_data -type f))
else
SOURCE_FILES ?= $(if $(wildcard $(SOURCE)),$(shell find $(SOURCE) -type f))
endif

RUNS := $(MODELS:%=$(OUT)/runs/%.json)

.PHONY: all clean
.DELETE_ON_ERROR:

all: $(OUT)/results.md

$(OUT)/graph.h5: $(SOURCE_FILES)
	@mkdir -p $(OUT)
	$(GNNPREP) ingest $(SOURCE) -o $@ --memory-budget $(MEMORY_BUDGET) --quiet $(INGEST_ARGS)

$(OUT)/hag.h5: $(OUT)/graph.h5
	$(GNNPREP) hag $< -o $@ --memory-budget $(MEMORY_BUDGET) --quiet $(HAG_ARGS)

$(OUT)/feats.h5: $(OUT)/graph.h5 $(OUT)/hag.h5
	$(GNNPREP) precompute $< --hag $(OUT)/hag.h5 --hops $(HOPS) -o $@ --memory-budget $(MEMORY_BUDGET) \
		--quiet $(PRECOMPUTE_ARGS)

# one run folder per model; the target is the --json summary, moved into place only when train succeeded
$(OUT)/runs/%.json: $(OUT)/feats.h5
	@mkdir -p $(OUT)/runs
	rm -rf $(OUT)/runs/$*
	$(GNNPREP) train $* $< -o $(OUT)/runs/$* --epochs $(EPOCHS) --memory-budget $(MEMORY_BUDGET) --json \
		--quiet $(TRAIN_ARGS) > $@.tmp || { rm -f $@.tmp; exit 1; }
	mv $@.tmp $@

$(OUT)/results.md: $(RUNS) $(HERE)/results_table.py
	$(PYTHON) $(HERE)/results_table.py $(RUNS) > $@.tmp || { rm -f $@.tmp; exit 1; }
	mv $@.tmp $@
	@cat $@

clean:
	rm -rf $(OUT)
