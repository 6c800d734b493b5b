#!/usr/bin/env bash
# Cora: SIGN with and without a random-walk HDG channel (PinSage top-16 visits), 5 seeds each.
# Same SIGN settings as benchmarks/cora_table.py chose on validation (hops 4, lr 0.01, wd 5e-4,
# dropout 0.5, hidden 64, 1 layer, input dropout 0.8, row-normalised features).
#   bash benchmarks/cora_hdg.sh [CORA_DIR] [WORK_DIR]
set -euo pipefail
BIN=${BIN:-.venv/bin}
CORA=${1:-../shared/data/cora}
W=${2:-out/cora-hdg}
mkdir -p "$W"
$BIN/gnnprep ingest "$CORA" -o "$W/cora.h5" -q
$BIN/gnnprep hdg "$W/cora.h5" --select random-walk:walks=50,length=3,topk=16,restart=0.3 --seed 0 -o "$W/rw.h5"
$BIN/gnnprep precompute "$W/cora.h5" --hops 4 --hdg "$W/rw.h5" -o "$W/f.h5" -q
COMMON=(--hops 4 --lr 0.01 --weight-decay 5e-4 --dropout 0.5 --hidden 64 --layers 1 --input-dropout 0.8
        --normalize-features row --epochs 1000 --patience 100 --runs 5 --seed 100 --threads 1)
rm -rf "$W/without" "$W/with"
echo "SIGN without the HDG channel (operator sym):"
$BIN/gnnprep train sign "$W/f.h5" -o "$W/without" --operator sym "${COMMON[@]}"
echo "SIGN with the HDG channel (operators sym, topk):"
$BIN/gnnprep train sign "$W/f.h5" -o "$W/with" --operator sym,topk "${COMMON[@]}"
