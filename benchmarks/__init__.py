"""gnnprep's benchmarks and tools (run from the checkout, not installed): one script per
measurement (``bench_*.py``), the child programs they start (``child_*.py``, ``launcher.py``,
``probe_distributed.py``, ``udf_ops.py``) and what they share (``harness.py``)."""
