#!/usr/bin/env bash
# The checks to run when a CUDA machine is at hand, in one go (about 5 minutes on one H100 with 16
# cores): the CUDA tests, the sample pipeline on cuda against cpu (hops to float tolerance, a training
# run on the GPU), the GPU benchmarks, then the whole suite in parallel (pytest-xdist, if installed).
# Every step has its own time limit, so one that hangs does not eat the rest; each step's log goes to
# OUTDIR.
#
#     benchmarks/gpu_check.sh [OUTDIR]        (PYTHON=python3 by default; gnnprep importable from it;
#                                             BENCH=0 skips the benchmarks; SUITE_SECONDS limits the suite)
#
# The packages the suite needs beyond a CUDA image's usual ones (ogb and its littleutils and outdated,
# ruff) are installed from the wheels in WHEELS (default .whl/, downloaded where a package index can
# be reached with `pip download --no-deps -d .whl ogb littleutils outdated ruff`) into a folder put on
# PYTHONPATH, with the interpreter's own pip ($PY -m pip: a bare `pip` may be another Python's, and
# then the suite fails on the missing modules, as 17 of its tests did on one H100 run). On an
# H100 with 16 cores the whole script took 385 s, its suite (8 workers) 212 s; on a second machine
# the suite had reached 98% at 235 s: SUITE_SECONDS (default 300) leaves room for both.
set -u
PY=${PYTHON:-python3}
OUTDIR=${1:-gpu-check}
mkdir -p "$OUTDIR"
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
T0=$(date +%s)
step() { echo "== [$(( $(date +%s) - T0 )) s] $*"; }

step environment
nvidia-smi -L 2>/dev/null; nproc
WHEELS=${WHEELS:-.whl}
if compgen -G "$WHEELS/*.whl" >/dev/null; then
    SITE=$(mktemp -d)
    # without pip, a wheel is a zip: its packages unpacked as they are, its scripts into bin/ (ruff's
    # binary is looked for there, beside the package)
    if $PY -m pip install -q --no-index --no-deps --target "$SITE" "$WHEELS"/*.whl >/dev/null 2>&1 ||
       $PY -c "import sys, os, glob, zipfile
site = sys.argv[1]
for w in glob.glob(os.path.join(sys.argv[2], '*.whl')):
    with zipfile.ZipFile(w) as z:
        for name in z.namelist():
            parts = name.split('/')
            if len(parts) > 2 and parts[0].endswith('.data') and parts[1] == 'scripts':
                dst = os.path.join(site, 'bin', parts[-1])
                os.makedirs(os.path.dirname(dst), exist_ok=True)
                open(dst, 'wb').write(z.read(name)); os.chmod(dst, 0o755)
            elif not parts[0].endswith('.data'):
                z.extract(name, site)" "$SITE" "$WHEELS"; then
        export PYTHONPATH=$PYTHONPATH:$SITE; echo "installed from $WHEELS: $(ls "$WHEELS" | tr '\n' ' ')"
    else
        echo "(the wheels in $WHEELS did not install: tests needing ogb or ruff will fail)"
    fi
fi
$PY -c "import torch, numba, numpy; print('torch', torch.__version__, 'cuda', torch.cuda.is_available(),
torch.cuda.get_device_name() if torch.cuda.is_available() else '-', 'numba', numba.__version__, 'numpy', numpy.__version__)" || exit 2

step CUDA tests
timeout 150 $PY -m pytest -q -p no:cacheprovider -rfEs -k cuda tests/precompute/test_propagate.py \
    tests/precompute/test_hag_torch.py tests/precompute/test_faults_round4_sizing.py 2>&1 | tee "$OUTDIR/cuda_tests.log" | tail -5

step "the sample pipeline on cuda"
W=$(mktemp -d)
( set -e
  $PY -m gnnprep ingest sample -o "$W/s.h5" --quiet
  $PY -m gnnprep precompute "$W/s.h5" --hops 3 --device cuda --memory-budget 2GiB -o "$W/gpu.h5" --json | tail -c 400; echo
  $PY -m gnnprep precompute "$W/s.h5" --hops 3 --device cpu -o "$W/cpu.h5" --quiet
  $PY -c "import sys, h5py, numpy as np
a, b = h5py.File(sys.argv[1])['channels/sym'], h5py.File(sys.argv[2])['channels/sym']
print('cuda against cpu, max relative difference per hop:',
      [float(np.abs(a[k][:] - b[k][:]).max() / max(1e-30, np.abs(b[k][:]).max())) for k in sorted(a, key=int)])" \
      "$W/gpu.h5" "$W/cpu.h5"
  $PY -m gnnprep train lc-gprgnn "$W/gpu.h5" -o "$W/run" --epochs 60 --hidden 64 --device cuda --json | tail -c 400; echo
) 2>&1 | tee "$OUTDIR/pipeline.log" | tail -8
rm -rf "$W"

if [ "${BENCH:-1}" = 1 ]; then   # BENCH=0: the tests, the pipeline and the suite only (~5 minutes)
step "the disk: 2 GiB written into the page cache (a GPU hop's rows are written at this speed)"
dd if=/dev/zero of="$OUTDIR/dd.tmp" bs=32M count=64 2>&1 | tail -1; rm -f "$OUTDIR/dd.tmp"

step "bench_precompute_gpu (2M nodes)"
timeout 150 $PY benchmarks/bench_precompute_gpu.py --nodes 2000000 2>&1 | grep -v Warning | tee "$OUTDIR/bench_gpu.log" | tail -16

step "bench_hag_torch on cuda"
timeout 100 $PY benchmarks/bench_hag_torch.py --device cuda --reps 2 --kernel-reps 5 2>&1 | tee "$OUTDIR/bench_hag_torch.log" | tail -14
fi

step "the whole suite"
# installed, so that the console script and the package metadata exist (the make pipeline's tests
# and --version's need them); two threads per worker (16 workers of 16 numba threads each did not
# finish in 320 s); SIGINT at the limit, so that pytest still prints its summary of the failures
$PY -m pip install -q --no-deps --no-build-isolation --no-index -e . >/dev/null 2>&1 || echo "(not installed: pip failed)"
if $PY -c "import xdist" 2>/dev/null; then PAR=(-n "$(( $(nproc) / 2 ))"); else PAR=(); fi
NUMBA_NUM_THREADS=2 OMP_NUM_THREADS=2 OPENBLAS_NUM_THREADS=2 \
    timeout -s INT -k 30 "${SUITE_SECONDS:-300}" $PY -m pytest -v -p no:cacheprovider "${PAR[@]}" -rfE > "$OUTDIR/suite.log" 2>&1
grep -E "(FAILED|ERROR) " "$OUTDIR/suite.log" | tail -30; tail -2 "$OUTDIR/suite.log"  # (names even when the limit cut it)
step done
