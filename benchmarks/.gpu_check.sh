set -x
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-deps --no-build-isolation -e . 2>&1 | tail -2
python3 -c "import torch; print(torch.__version__, torch.cuda.get_device_name())"
python3 -m pytest -q tests/precompute/test_propagate.py tests/sparse/test_csr_builder.py 2>&1 | tail -5
python3 benchmarks/bench_precompute_gpu.py 2>&1 | tail -30
