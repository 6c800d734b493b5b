"""First-use compilation, said aloud: numba compiles a kernel the first time it runs with new
argument types and keeps it in its on-disk cache, so on a fresh install a command first spends
seconds compiling (``gnnprep hag`` on a 100k-entry graph: 13.9 s against 1.05 s once cached, on this
project's 2-core VM). Inside :func:`compiling`, the first kernel numba actually compiles (its
``numba:compile`` event: a cache miss; a kernel loaded from the cache raises none) reports a stage
through the ``progress`` callback, so the user sees why the command is slow this once.
"""

from __future__ import annotations

import threading
import time
from contextlib import contextmanager
from typing import Iterator

from gnnprep.core.progress import Progress


@contextmanager
def compiling(progress: Progress, what: str) -> Iterator[dict]:
    """``with compiling(progress, "the HAG search's kernels") as jit: ...``: stage ``"compiling <what>
    (first run only)"`` is reported (0 of None) when numba starts compiling its first kernel in the
    body, on any thread, and closed (1 of 1) at the end. Afterwards ``jit["seconds"]`` is the body's
    wall time, ``jit["compiled"]`` the kernels compiled and ``jit["compile_seconds"]`` the time spent
    compiling them (outermost compilations only: a kernel's callees compile inside it)."""
    from numba.core import event

    stage = f"compiling {what} (first run only)"
    info = {"seconds": 0.0, "compiled": 0, "compile_seconds": 0.0}
    lock, local = threading.Lock(), threading.local()

    class Said(event.Listener):
        def on_start(self, ev) -> None:
            local.depth = getattr(local, "depth", 0) + 1
            if local.depth > 1:
                return
            local.t0 = time.perf_counter()
            with lock:
                first = info["compiled"] == 0
                info["compiled"] += 1
            if first:
                progress(stage, 0, None)

        def on_end(self, ev) -> None:
            local.depth -= 1
            if local.depth == 0:
                with lock:
                    info["compile_seconds"] += time.perf_counter() - local.t0

    t0 = time.perf_counter()
    try:
        with event.install_listener("numba:compile", Said()):
            yield info
    finally:
        info["seconds"] = time.perf_counter() - t0
        if info["compiled"]:
            progress(stage, 1, 1)
