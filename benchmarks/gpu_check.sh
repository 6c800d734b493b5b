#!/usr/bin/env bash
# One-shot check of the CUDA paths on a machine with a GPU, run from the repository root:
#   bash benchmarks/gpu_check.sh [LOG_DIR]
# 1. the tests that take a CUDA parameter; 2. the sample pipeline with --device cuda (precompute, train);
# 3. benchmarks/bench_precompute_gpu.py (torch.sparse.mm vs precompute on the GPU, same run);
# 4. the whole suite where --device auto now means cuda. Logs go to LOG_DIR (default: out/gpu-check).
set -u
LOG=${1:-out/gpu-check}
mkdir -p "$LOG"
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
PY=${PYTHON:-python3}
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
$PY -c "import torch, numpy, numba, h5py, scipy; print('torch', torch.__version__, 'cuda', torch.cuda.is_available(), 'numpy', numpy.__version__, 'numba', numba.__version__, 'h5py', h5py.__version__)"
step() { echo "== $1 ($(date +%T))"; }
step "1. CUDA tests"
timeout 240 $PY -m pytest -q -p no:cacheprovider -rfE tests/precompute/test_hag_torch.py tests/precompute/test_propagate.py \
    tests/precompute/test_faults_round4_sizing.py -k cuda 2>&1 | tee "$LOG/cuda_tests.log" | tail -25
step "2. sample pipeline on cuda"
W=${TMPDIR:-/tmp}/gnnprep-gpu-sample; rm -rf "$W"; mkdir -p "$W"
{ $PY -m gnnprep ingest sample -o "$W/g.h5" --json \
  && $PY -m gnnprep precompute "$W/g.h5" --hops 3 --device cuda --memory-budget 2GiB -o "$W/f.h5" --json \
  && $PY -m gnnprep precompute "$W/g.h5" --hops 3 --device cpu -o "$W/fc.h5" --json \
  && $PY -c "
import h5py, numpy as np, sys
a, b = h5py.File(sys.argv[1]), h5py.File(sys.argv[2])
ks = sorted(k for k in a['hops'])
print('hops', ks, 'max |cuda-cpu|/max|cpu|', max(float(np.abs(a['hops'][k][:] - b['hops'][k][:]).max() / max(np.abs(b['hops'][k][:]).max(), 1e-30)) for k in ks))
" "$W/f.h5" "$W/fc.h5" \
  && $PY -m gnnprep train lc-gprgnn "$W/f.h5" -o "$W/run" --device cuda --epochs 60 --patience 30 --hidden 64 \
       --normalize-features row --json; } 2>&1 | tail -c 4000 | tee "$LOG/sample.log"
step "3. bench_precompute_gpu"
timeout 300 $PY benchmarks/bench_precompute_gpu.py --nodes "${GPU_BENCH_NODES:-2000000}" --workdir /tmp/gnnprep-gpu 2>&1 \
    | tee "$LOG/bench_gpu.log"
step "4. the whole suite (device auto = cuda here)"
timeout "${SUITE_TIMEOUT:-240}" $PY -m pytest -q -p no:cacheprovider -n "${SUITE_WORKERS:-16}" -rfE tests > "$LOG/suite.log" 2>&1
echo "suite rc $?"; tail -40 "$LOG/suite.log"
step done
