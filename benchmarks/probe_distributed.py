"""The launcher probe of ``bench_distributed.py`` (variant (L)): what torchrun + torch + a gloo
rendezvous + a rank's exit cost with no work. Run by torchrun; each rank joins the group, passes a
barrier, leaves the way a gnnprep rank does (``gnnprep.core.distributed.exit_now``) and writes its
epoch-second stamps to ``STAMPS.rank<RANK>.json``.

    torchrun --standalone --nproc-per-node 2 benchmarks/probe_distributed.py STAMPS
"""
import json
import os
import sys
import time

t_start = time.time()
from gnnprep.core.distributed import Dist, exit_now  # noqa: E402

if __name__ == "__main__":
    d = Dist.from_env()
    import torch.distributed  # noqa: F401

    t_import = time.time()
    d.start()
    d.barrier()
    t_join = time.time()
    d.close()
    with open(f"{sys.argv[1]}.rank{os.environ['RANK']}.json", "w") as f:
        json.dump({"start": t_start, "import": t_import, "join": t_join, "done": time.time()}, f)
    exit_now(0)  # as a gnnprep rank leaves (python -m gnnprep)
