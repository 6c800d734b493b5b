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
#
# Safe to copy: every value is checked before anything runs, and a bad one stops make with one line and
# nothing touched. OUT is one path of letters, digits and . _ - + / (not empty, not /, not your home
# folder, the current folder or a folder above them); MODELS plain model names; HOPS and EPOCHS
# positive integers; the *_ARGS may not set what this file sets itself (-o, --memory-budget, --hops,
# --hag, --epochs: use OUT, MEMORY_BUDGET, HOPS, EPOCHS). The pipeline only writes and deletes its own
# files inside OUT (graph.h5, hag.h5, feats.h5, runs/<model>.json, runs/<model>/, results.md and
# gnnprep's side files of these); `clean` deletes exactly those, never the folder's other contents.
# A make that fails keeps every finished file (no .DELETE_ON_ERROR: gnnprep's outputs are atomic).
# One make at a time per OUT: a run holds OUT/.pipeline.lock (flock; where flock is missing, the
# folder OUT/.pipeline.lock.d) and a second make on the same OUT waits up to LOCK_WAIT seconds for it
# (LOCK_WAIT=0: refuses at once; without flock it always refuses at once), then finds the first one's
# files up to date. -n and -q write nothing and take no lock; -W and -o do not reach the locked run.

THIS := $(abspath $(lastword $(MAKEFILE_LIST)))
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
LOCK_WAIT ?= 3600
LOCKING ?= $(if $(shell command -v flock 2>/dev/null),flock,mkdir)

# ---- checks: they run while make reads this file, before any recipe ---------------------------------
KNOWN_MODELS := sgc lc-gcn lc-jknet lc-gprgnn sign mlp
_digits := 0 1 2 3 4 5 6 7 8 9
_letters := a b c d e f g h i j k l m n o p q r s t u v w x y z A B C D E F G H I J K L M N O P Q R S T U V W X Y Z
_name_chars := $(_letters) $(_digits) _ -
_path_chars := $(_name_chars) . / +
_arg_chars := $(_path_chars) = , : @
_c := ,
_empty :=
_space := $(_empty) $(_empty)
# $(call _drop,TEXT,CHARS): TEXT without any of CHARS, i.e. the characters that are not allowed
_drop = $(if $2,$(call _drop,$(subst $(firstword $2),,$1),$(wordlist 2,$(words $2),$2)),$1)
# $(call _word,TEXT,CHARS): non-empty when TEXT is exactly one word of CHARS that does not start with -
_word = $(and $(filter 1,$(words $1)),$(filter x$(strip $1)x,x$1x),$(filter-out -%,$1),$(if $(call _drop,$1,$2),,y))
_posint = $(and $(call _word,$1,$(_digits)),$(filter-out 0%,$1))
_natural = $(and $(call _word,$1,$(_digits)),$(filter-out 0%,$1)$(filter 0,$1))
# a folder and every folder above it
_ancestors = $(if $(filter-out /,$1),$1 $(call _ancestors,$(patsubst %/,%,$(dir $1))))

ifeq ($(strip $(OUT)),)
$(error OUT is empty: name the folder the pipeline writes into, e.g. OUT=out/pipeline)
endif
ifeq ($(call _word,$(OUT),$(_path_chars)),)
$(error OUT='$(strip $(OUT))' refused: one path of letters, digits and . _ - + / only (no spaces, quotes, ~, $$ or other shell characters, not starting with -))
endif
_FORBIDDEN := / $(call _ancestors,$(CURDIR)) $(call _ancestors,$(ROOT)) $(if $(HOME),$(call _ancestors,$(abspath $(HOME))))
ifneq ($(filter $(_FORBIDDEN),$(abspath $(OUT)) $(realpath $(OUT))),)
$(error OUT='$(strip $(OUT))' refused: it is $(firstword $(filter $(_FORBIDDEN),$(abspath $(OUT)) $(realpath $(OUT)))) (the root, your home folder, the current folder or one above them); give the pipeline a folder of its own, e.g. OUT=out/pipeline)
endif
ifeq ($(call _word,$(SOURCE),$(_arg_chars)),)
$(error SOURCE='$(strip $(SOURCE))' refused: one dataset spec or path of letters, digits and . _ - + / = , : @ only)
endif
ifeq ($(strip $(MODELS)),)
$(error MODELS is empty: name at least one model, e.g. MODELS="sgc lc-gcn" (known: $(KNOWN_MODELS)))
endif
$(foreach m,$(MODELS),$(if $(call _word,$m,$(_name_chars)),,$(error MODELS: '$m' refused: a model is a plain name of letters, digits, - and _ (known: $(KNOWN_MODELS)))))
ifneq ($(words $(MODELS)),$(words $(sort $(MODELS))))
$(error MODELS='$(strip $(MODELS))' refused: a model is named twice)
endif
ifeq ($(call _posint,$(HOPS)),)
$(error HOPS='$(strip $(HOPS))' refused: a positive integer, e.g. HOPS=3)
endif
ifeq ($(call _posint,$(EPOCHS)),)
$(error EPOCHS='$(strip $(EPOCHS))' refused: a positive integer, e.g. EPOCHS=100)
endif
ifeq ($(call _natural,$(LOCK_WAIT)),)
$(error LOCK_WAIT='$(strip $(LOCK_WAIT))' refused: whole seconds, 0 or more)
endif
ifeq ($(call _word,$(MEMORY_BUDGET),$(_letters) $(_digits) .),)
$(error MEMORY_BUDGET='$(strip $(MEMORY_BUDGET))' refused: one size such as 2GiB or 512MiB)
endif
ifeq ($(filter flock mkdir,$(LOCKING)),)
$(error LOCKING='$(strip $(LOCKING))' refused: flock or mkdir)
endif
# the *_ARGS are split into words by the shell: option words only, and none of the options set here
_via-o := every output is named under OUT
_via--output := every output is named under OUT
_via--memory-budget := set MEMORY_BUDGET instead
_via--hops := set HOPS instead
_via--hag := precompute always reads OUT/hag.h5
_via--epochs := set EPOCHS instead
# $(call _check_args,VARIABLE,options this file passes to that command)
_check_args = $(if $(call _drop,$(subst $(_space),,$($1)),$(_arg_chars)),$(error $1='$(strip $($1))' refused: option words of letters$(_c) digits and . _ - + / = $(_c) : @ only (no quotes or shell characters)))$(foreach o,$2,$(if $(strip $(filter $o $o=%,$($1)) $(if $(filter -o,$o),$(foreach w,$(filter-out --%,$(filter -%,$($1))),$(findstring o,$w)))),$(error $1='$(strip $($1))' refused: it sets $o$(_c) which this file sets itself ($(_via$o)))))
$(call _check_args,INGEST_ARGS,-o --output --memory-budget)
$(call _check_args,HAG_ARGS,-o --output --memory-budget)
$(call _check_args,PRECOMPUTE_ARGS,-o --output --memory-budget --hops --hag)
$(call _check_args,TRAIN_ARGS,-o --output --memory-budget --epochs)
$(foreach g,$(MAKECMDGOALS),$(if $(call _word,$g,$(_path_chars)),,$(error goal '$g' refused: all$(_c) clean or one output path of letters$(_c) digits and . _ - + /)))

# ---- one make at a time per OUT ----------------------------------------------------------------------
# A make that does not hold the lock yet runs every goal through one sub-make that does (-n and -q
# only read, so they take no lock). Command-line variables reach the sub-make through MAKEFLAGS.
_FLAGS := $(filter-out -%,$(firstword $(MAKEFLAGS)))
_GOALS := $(or $(MAKECMDGOALS),all)
_LOCK := $(OUT)/.pipeline.lock
_SUBMAKE := $(MAKE) --no-print-directory -f '$(THIS)' _PIPELINE_LOCKED=1 $(_GOALS)
_BUSY := another make is running on OUT=$(OUT)

ifeq ($(_PIPELINE_LOCKED)$(findstring n,$(_FLAGS))$(findstring q,$(_FLAGS)),)

.PHONY: $(_GOALS) pipeline-lock
$(_GOALS): pipeline-lock ; @:

ifeq ($(LOCKING),flock)
pipeline-lock:
	+@mkdir -p -- '$(OUT)' || exit 1; \
	$(if $(filter 0,$(LOCK_WAIT)),,flock -n '$(_LOCK)' true || echo "pipeline.mk: $(_BUSY) ($(_LOCK)); waiting up to $(LOCK_WAIT) s" >&2;) \
	flock $(if $(filter 0,$(LOCK_WAIT)),-n,-w $(LOCK_WAIT)) -E 75 '$(_LOCK)' $(_SUBMAKE); rc=$$?; \
	[ $$rc != 75 ] || { echo "Error: $(_BUSY) ($(_LOCK) held$(if $(filter 0,$(LOCK_WAIT)),, for $(LOCK_WAIT) s)); nothing was done" >&2; rc=1; }; \
	exit $$rc
else
pipeline-lock:
	+@mkdir -p -- '$(OUT)' || exit 1; \
	mkdir -- '$(_LOCK).d' 2>/dev/null || { echo "Error: $(_BUSY) ($(_LOCK).d exists; remove that folder if no make is running); nothing was done" >&2; exit 1; }; \
	trap "rmdir -- '$(_LOCK).d'" EXIT; trap 'exit 130' INT; trap 'exit 143' TERM; \
	$(_SUBMAKE)
endif

else

ifeq ($(SOURCE),sample)
SOURCE_FILES ?= $(filter-out $(ROOT)/sample_data/hetero/%,$(shell find '$(ROOT)/sample_data' -type f))
else
SOURCE_FILES ?= $(if $(wildcard $(SOURCE)),$(shell find '$(SOURCE)' -type f))
endif

RUNS := $(MODELS:%=$(OUT)/runs/%.json)

.PHONY: all clean
# no .DELETE_ON_ERROR: each recipe leaves its target whole or untouched, and make must never delete a
# finished file (another run's, or the one a failed rerun did not replace). .PRECIOUS: not on a signal either.
.PRECIOUS: $(OUT)/graph.h5 $(OUT)/hag.h5 $(OUT)/feats.h5 $(RUNS) $(OUT)/results.md

all: $(OUT)/results.md

$(OUT)/graph.h5: $(SOURCE_FILES)
	@mkdir -p -- '$(OUT)'
	$(GNNPREP) ingest $(SOURCE) -o '$@' --memory-budget $(MEMORY_BUDGET) --quiet $(INGEST_ARGS)

$(OUT)/hag.h5: $(OUT)/graph.h5
	$(GNNPREP) hag '$<' -o '$@' --memory-budget $(MEMORY_BUDGET) --quiet $(HAG_ARGS)

$(OUT)/feats.h5: $(OUT)/graph.h5 $(OUT)/hag.h5
	$(GNNPREP) precompute '$<' --hag '$(OUT)/hag.h5' --hops $(HOPS) -o '$@' --memory-budget $(MEMORY_BUDGET) \
		--quiet $(PRECOMPUTE_ARGS)

# one run folder per model (a static pattern rule: only the models in MODELS); the target is the --json
# summary, moved into place only when train succeeded
$(RUNS): $(OUT)/runs/%.json: $(OUT)/feats.h5
	@mkdir -p -- '$(OUT)/runs'
	rm -rf -- '$(OUT)/runs/$*'
	$(GNNPREP) train $* '$<' -o '$(OUT)/runs/$*' --epochs $(EPOCHS) --memory-budget $(MEMORY_BUDGET) --json \
		--quiet $(TRAIN_ARGS) > '$@.tmp' || { rm -f -- '$@.tmp'; exit 1; }
	mv -- '$@.tmp' '$@'

$(OUT)/results.md: $(RUNS) $(HERE)/results_table.py
	$(PYTHON) '$(HERE)/results_table.py' $(foreach r,$(RUNS),'$r') > '$@.tmp' || { rm -f -- '$@.tmp'; exit 1; }
	mv -- '$@.tmp' '$@'
	@cat -- '$@'

# exactly the files the pipeline writes (for every model train knows and every one in MODELS), with
# gnnprep's side files of them; then the folders if they are empty. The empty lock file stays: deleting
# it while another make waits on it would let a third make run beside that one.
_CLEAN_MODELS := $(sort $(KNOWN_MODELS) $(MODELS))
clean:
	@echo "clean: removing the pipeline's files from OUT=$(OUT) (other files stay)"
	@cd -- '$(OUT)' 2>/dev/null || exit 0; \
	rm -f -- results.md results.md.tmp $(foreach f,graph.h5 hag.h5 feats.h5,$f $f.tmp-* $f.partial $f.partial.json $f.partial.json.tmp-* $f.partial.lock) \
	    hag.order-*.h5 hag.order-*.h5.tmp-* graph.hag-runs.json .graph.hag-runs.json.tmp-*; \
	rm -rf -- $(foreach f,graph.h5 hag.h5 feats.h5,.$f.work-* $f.partial.d); \
	if [ -d runs ]; then cd runs && rm -rf -- $(foreach m,$(_CLEAN_MODELS),$m $m.json $m.json.tmp) && cd ..; fi; \
	rmdir runs 2>/dev/null; true

endif
