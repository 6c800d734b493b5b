"""User-defined propagation operators, compiled to the fused row kernels (Graphiler's idea).

A user operator is a Python function in a file, named on the command line as ``--operator-file
ops.py:name``::

    import numpy as np

    def weighted_gcn(src_deg, dst_deg, w):
        "the coefficient of edge u -> v: w / sqrt(d̃_u d̃_v)"
        return w / np.sqrt(src_deg * dst_deg)

    weighted_gcn.loop = 1.0      # optional: propagate over A + loop·I (default 0: no self-loop)
    weighted_gcn.reduce = "sum"  # optional: sum | mean | max over a node's in-edges (default sum)

The contract: the function is pure and vectorised. It receives three float64 arrays of one length
m (a batch of edges u → v: the source's degree, the destination's degree, the edge's weight) and
returns m finite coefficients; it never sees features. Degrees count the self-loop: d̃ = deg + loop,
where deg is the (weighted) number of edges into v (``dst_deg``) or out of u (``src_deg``; the same
number on a symmetric store); w is the stored edge weight, 1 on an unweighted store, and ``loop``
for the self-loop. Hop k+1 of the channel ``name`` is then

    sum, mean:  H'[v] = agg_{u ∈ N(v) ∪ {v if loop}} c(d̃_u, d̃_v, w_uv) H[u]     (mean: / count)
    max:        H'[v, j] = max_{u ∈ N(v) ∪ {v if loop}} c(d̃_u, d̃_v, w_uv) H[u, j]   (0 without in-edges)

Executed as written (DGL's or PyG's message and reduce functions), every hop materialises an
|E| × d message tensor before the scatter. Xie et al. ("Graphiler: Optimizing Graph Neural Networks
with Message Passing Data Flow Graph", MLSys 2022) compile the user's functions instead: a factor
that depends only on the source or only on the destination is broadcast per node, not per edge,
and message creation is fused into the aggregation. Here the planner (:func:`classify`) finds the
factors by evaluating the function on probes — every distinct degree value (a quantile sample of
1,024 when there are more) against each other and against a sample of the stored weights — and
checks that the function is the product of them:

    c(s, d, w) = c(s, d0, w0) · c(s0, d, w0) · c(s0, d0, w) / c(s0, d0, w0)²

When it is (within 1e-5 relative), the destination factor becomes the row scaling l, the source
factor the column scaling r, and the edge factor e(w), when the function reads w at all, the CSR
values: the stored weights themselves when e(w) = κ·w (κ goes into l), else e(w) computed once per
stored entry (on every core: the function is pure). S = diag(l) (E ∘ A + λ I) diag(r), the form
every kernel of :mod:`gnnprep.sparse.kernels` runs. When it is not, the whole coefficient is the CSR value
of each entry (l = r = 1), computed once per run (resident S) or per edge block as it is read
(streamed S). With a self-loop then r[v] = c(d̃_v, d̃_v, loop) and λ = 1, so the kernels' loop term
l[v] λ r[v] is the loop's coefficient, and the entries' values are c / r[u] (refused only where
some r[v] is 0). ``mean`` divides l by the number
of in-entries (with the loop); ``max`` runs its own kernel, with the destination factor hoisted
out of the max only where it is non-negative (else the whole coefficient is per entry). No
per-edge message tensor exists at any point.
"""

from __future__ import annotations

import dis
import hashlib
import inspect
import json
import math
import os
import re
import sys
import threading
import traceback
import types
from contextlib import contextmanager, nullcontext, redirect_stdout
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

import numpy as np

from gnnprep.core.errors import GnnprepError, Interrupted, OptionError
from gnnprep.core.files import NotRegularFile, TooLarge, read_regular

REDUCES = ("sum", "mean", "max")
NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_\-]*\Z")
PROBES = 1024          # distinct degree values probed per side (a quantile sample beyond)
WEIGHT_PROBES = 64     # distinct weights probed
RTOL = 1e-5            # separability tolerance (relative to the largest coefficient compared)
CHUNK = 1 << 20        # entries (or nodes) per call of the user's function
WAKE_S = 0.05          # the longest the main thread waits on the worker threads between looks at signals
MAX_FILE_BYTES = 16 << 20   # an operator file is a short Python file; a device or a huge file is refused unread


EDGE_ARGS = ("src_deg", "dst_deg", "w")        # --operator-file's function
HDG_ARGS = ("member_deg", "root_deg", "w")     # --hdg-weight's


@dataclass(frozen=True)
class UserFunction:
    """A loaded ``--operator-file`` function and what the artifact records about it."""

    spec: str            # "path:name" as given
    path: str            # the file's absolute path
    name: str            # the function, and the channel's name
    source: str          # the file's text
    sha256: str          # the code's: the file's, combined with the local modules it uses (a run key part)
    reduce: str
    loop: float
    fn: object = field(compare=False, repr=False)
    file_sha256: str = ""                          # the file's own
    imports: tuple[tuple[str, str], ...] = ()      # (path, sha256) of the local modules it uses
    args: tuple[str, str, str] = EDGE_ARGS         # its arguments' names in messages (--hdg-weight: HDG_ARGS)

    @property
    def call(self) -> str:
        """``name(a, b, w)`` as messages name it."""
        return f"{self.name}({', '.join(self.args)})"

    def provenance(self) -> dict:
        """The file (path, sha256, whole text) and the function's own lines, with its reduce and loop."""
        try:
            own = inspect.getsource(self.fn)
        except (OSError, TypeError):
            own = self.source
        return {"file": self.path, "function": self.name, "sha256": self.file_sha256 or self.sha256,
                "reduce": self.reduce, "loop": self.loop, "source": self.source, "function_source": own,
                **({"imports": dict(self.imports)} if self.imports else {})}

    def __call__(self, src, dst, w, finite: bool = True) -> np.ndarray:
        """The coefficients for one batch of edges, checked: one line naming the file and the
        problem on an exception, a wrong shape or (``finite``) a value that is not finite."""
        m = len(w)
        where = f"{self.path}: {self.call}"
        with user_code(where, self.path), np.errstate(all="ignore"):  # not finite: reported below, once
            out = self.fn(src, dst, w)
        try:
            out = np.asarray(out)
        except Exception:  # noqa: BLE001 - the user's return value: anything numpy cannot read is one line
            raise GnnprepError(f"{where} returned a {type(out).__name__}; expected a numpy array of {m} numbers") \
                from None
        if out.dtype.kind not in "fiub":
            raise GnnprepError(f"{where} returned dtype {out.dtype}; expected {m} real numbers")
        if out.shape != (m,):
            raise GnnprepError(f"{where} returned shape {out.shape} for {m} edges; expected ({m},)")
        out = out.astype(np.float64, copy=False)
        bad = ~np.isfinite(out)
        if finite and bad.any():
            i = int(np.flatnonzero(bad)[0])
            a, b, c = self.args
            raise GnnprepError(f"{where} returned {out[i]} for {a}={src[i]:g}, {b}={dst[i]:g}, {c}={w[i]:g}; "
                               "expected finite coefficients")
        return out


@contextmanager
def user_code(where: str, path: str) -> Iterator[None]:
    """Run the user's code under the command contract: what it prints goes to stderr (stdout carries
    only the result; on the main thread, where ``sys.stdout`` may be swapped safely; worker threads
    run inside the caller's :func:`stdout_to_stderr`), and every way it can leave other than
    returning (an exception, ``sys.exit``, ``os._exit``, ``GeneratorExit``) becomes one GnnprepError
    naming ``where`` and the line of ``path``. An interrupt (Ctrl-C, SIGTERM) stays an interrupt."""
    try:
        with stdout_to_stderr() if threading.current_thread() is threading.main_thread() else nullcontext():
            yield
    except (KeyboardInterrupt, Interrupted) as e:
        if not _raised_by_user(e):
            raise  # a signal: an interrupt
        raise GnnprepError(f"{where} raised {type(e).__name__}{': ' + str(e) if str(e) else ''}"
                           f"{_user_line(e, path)}; expected it to return (an operator's exception is its "
                           "error, not an interrupt)") from None
    except GnnprepError:
        raise
    except SystemExit as e:
        raise GnnprepError(f"{where} called sys.exit({e.code!r}){_user_line(e, path)}; expected it to return "
                           "(an operator file must not end the process)") from None
    except UserExit as e:
        raise GnnprepError(f"{where} called os._exit({e.code!r}){_user_line(e, path)}; expected it to return "
                           "(an operator file must not end the process)") from None
    except BaseException as e:  # noqa: BLE001 - the user's code: any failure becomes one line
        raise GnnprepError(f"{where} raised {type(e).__name__}: {e}{_user_line(e, path)}") from None


_RAISE = dis.opmap["RAISE_VARARGS"]


def _raised_by_user(e: BaseException) -> bool:
    """Whether ``e`` (KeyboardInterrupt or Interrupted) was raised by the user's code (issue 32, line
    18) rather than by a signal. Signal handlers run on the main thread only, so in another thread it
    is always the user's. On the main thread: a signal's exception comes from the handler (its frame
    is the innermost, when it is a Python function: gnnprep's own, which raises) or appears where
    Python checks for signals (a call, a loop's jump, a blocking call: Python's C handler), never at
    a ``raise`` statement of another function; the user's ``raise KeyboardInterrupt`` is one."""
    if threading.current_thread() is not threading.main_thread():
        return True
    tb = e.__traceback__
    if tb is None:
        return False
    while tb.tb_next is not None:
        tb = tb.tb_next
    code = tb.tb_frame.f_code
    import signal

    handlers = {getattr(signal.getsignal(s), "__code__", None) for s in (signal.SIGINT, signal.SIGTERM)}
    if code in handlers:
        return False
    raw = code.co_code
    return 0 <= tb.tb_lasti < len(raw) and raw[tb.tb_lasti] == _RAISE


class UserExit(BaseException):
    """Raised in place of ``os._exit`` called from an operator file's code (see :func:`_guard_exits`)."""

    def __init__(self, code):
        super().__init__(code)
        self.code = code


_USER_FILES: set[str] = set()     # the operator files run in this process (their code's file name)
_REAL_EXIT = os._exit


def _guarded_exit(status):
    """``os._exit`` while operator files are loaded: from a call whose stack holds a frame of one of
    them (the file itself, its function, or a helper it called), UserExit instead of the end of the
    process; from anywhere else (gnnprep, a forked child) the real ``os._exit``."""
    frame = sys._getframe(1)
    while frame is not None:
        if frame.f_code.co_filename in _USER_FILES:
            raise UserExit(status)
        frame = frame.f_back
    _REAL_EXIT(status)


def _guard_exits(where: str) -> None:
    """Make ``os._exit`` (and ``posix._exit``, the same function) called from the operator file
    ``where`` raise :class:`UserExit` rather than end the process with its status and no output.

    Why a guard on the function and not a child process: ``os._exit`` skips every handler, so only
    a process watching from outside could see it, and probing the file in a child first would run it
    (and its side effects) twice and still miss a later call with other arguments; running every
    call in a child would cost a process start and a copy of the arrays per batch. The file is the
    user's own code, so the guard covers the ways careless code leaves (``sys.exit``, ``os._exit``),
    not a deliberate one (``ctypes``' ``_exit``, ``os.kill``, ``os.exec*``)."""
    _USER_FILES.add(where)
    if os._exit is not _guarded_exit:
        os._exit = _guarded_exit
        posix = sys.modules.get("posix")
        if posix is not None and getattr(posix, "_exit", None) is _REAL_EXIT:
            posix._exit = _guarded_exit


def run_parts(work, parts, threads: int) -> None:
    """``work(part)`` for every part, on ``threads`` daemon threads (the user's function is pure and
    numpy releases the GIL); the first exception a part raises is raised here as soon as it is
    raised (the other threads take no new part).

    The main thread waits on an event in steps of ``WAKE_S`` seconds: a signal that the kernel hands
    to another thread (a process-directed signal may go to any thread that does not block it, the
    workers and numpy's and numba's included) sets Python's flag but does not interrupt this
    thread's wait, and an unbounded wait swallowed it (issue 32, line 13). So SIGTERM/SIGINT
    (Interrupted, KeyboardInterrupt) leave at once, the threads take no new part, and one still inside a hanging
    user function is not waited for: daemon threads never hold up the exit. (A ThreadPoolExecutor's
    threads are joined by its ``with`` and again at interpreter exit: a hanging function swallowed
    the first signal that way.)"""
    parts = list(parts)
    lock = threading.Lock()
    errors: list[BaseException] = []
    todo = iter(parts)
    stop, finished = threading.Event(), threading.Event()
    n = max(1, min(threads, len(parts)))
    running = [n]

    def worker():
        try:
            while not stop.is_set():
                with lock:
                    part = next(todo, None)
                if part is None:
                    return
                work(part)
        except BaseException as e:  # noqa: BLE001 - handed to the caller's thread below
            errors.append(e)
            stop.set()
            finished.set()
        finally:
            with lock:
                running[0] -= 1
                if running[0] == 0:
                    finished.set()

    try:
        for i in range(n):
            threading.Thread(target=worker, daemon=True, name=f"gnnprep-values-{i}").start()
        while not finished.wait(WAKE_S):
            pass  # (a signal delivered to another thread is only seen once this thread runs Python again)
    finally:
        stop.set()  # an interrupt or an error: nothing more starts; a part under way ends on its own
    if errors:
        raise next((e for e in errors if isinstance(e, GnnprepError)), errors[0])


_RUN: dict[tuple[str, str], dict] = {}   # (path, sha256) -> the file's namespace, run once per process


def _run_file(code, where: str, sha256: str, path: Path) -> dict:
    """The namespace of the operator file, run once per process however many of its functions
    (``--operator-file``, ``--hdg-weight``) are used; the working folder is restored after it (a
    ``chdir`` in it must not move a relative ``-o``)."""
    key = (where, sha256)
    if key not in _RUN:
        module: dict = {"__name__": f"gnnprep_operator_{Path(where).stem}", "__file__": where}
        cwd = os.getcwd()
        _guard_exits(where)
        try:
            with user_code(f"{path}: running the operator file", where):
                exec(code, module)  # the user's own file, as a config file is read
        finally:
            if os.getcwd() != cwd:
                os.chdir(cwd)
        _RUN[key] = module
    return _RUN[key]


def stdout_to_stderr():
    """``print`` goes to stderr while user code runs (called from the main thread only)."""
    return redirect_stdout(sys.stderr)


def _user_line(e: BaseException, path: str) -> str:
    frames = [f for f in traceback.extract_tb(e.__traceback__) if f.filename == path]
    return f" (line {frames[-1].lineno})" if frames else ""


def check_spec(spec: str, option: str = "--operator-file") -> tuple[str, str]:
    """(path, name) of a "PATH:NAME" ``spec``; OptionError naming ``option`` otherwise (the command
    line checks it before any work: exit 2)."""
    path_text, sep, name = spec.rpartition(":")
    if not sep or not path_text or not name:
        raise OptionError(option, f"{spec!r}: expected PATH:NAME (a Python file and a function in it)")
    if not NAME.match(name):
        raise OptionError(option, f"{spec!r}: {name!r} is not a function name")
    return path_text, name


def load(spec: str, builtin: tuple[str, ...] = (), option: str = "--operator-file",
         args: tuple[str, str, str] = EDGE_ARGS) -> UserFunction:
    """The function ``name`` of the file in ``spec`` ("path:name"), with its ``reduce`` and ``loop``
    attributes checked; GnnprepError (one line naming the file and the problem) otherwise.
    ``builtin``: names the channel may not take; ``option`` and ``args``: the option and the argument
    names its messages use (``--hdg-weight``: :data:`HDG_ARGS`)."""
    path_text, name = check_spec(spec, option)
    if name in builtin or name.startswith("norm"):
        raise OptionError(option, f"{spec!r}: {name!r} is a built-in operator's name; rename the function")
    path = Path(path_text)
    try:
        raw = read_regular(path, MAX_FILE_BYTES)
    except NotRegularFile:
        raise GnnprepError(f"{path}: the operator file is not a regular file (a device, pipe or folder); expected "
                           "a Python file") from None
    except TooLarge as e:
        raise GnnprepError(f"{path}: the operator file has {e.size} bytes; expected a Python file of at most "
                           f"{MAX_FILE_BYTES // 2**20} MiB") from None
    except OSError as e:
        raise GnnprepError(f"{path}: cannot read the operator file ({e.strerror or e})") from None
    try:
        source = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise GnnprepError(f"{path}: the operator file is not UTF-8 text") from None
    where = str(path.absolute())
    try:
        code = compile(source, where, "exec")
    except SyntaxError as e:
        raise GnnprepError(f"{path}:{e.lineno}: syntax error in the operator file: {e.msg}") from None
    module = _run_file(code, where, hashlib.sha256(raw).hexdigest(), path)
    fn = module.get(name)
    if fn is None:
        found = sorted(k for k, v in module.items() if inspect.isfunction(v) and not k.startswith("_"))
        raise GnnprepError(f"{path}: no function {name!r} in the " + ("operator file" if option == "--operator-file"
                                                                      else f"{option} file")
                           + (f" (it defines {', '.join(found)})" if found else ""))
    if not callable(fn):
        raise GnnprepError(f"{path}: {name} is a {type(fn).__name__}; expected a function ({', '.join(args)})")
    try:
        sig = inspect.signature(fn)
        sig.bind(0.0, 0.0, 0.0)
    except TypeError:
        raise GnnprepError(f"{path}: {name}{sig}: expected a function of three arguments ({', '.join(args)})") \
            from None
    except ValueError:
        pass  # no signature to read (a builtin): the probes will tell
    reduce = getattr(fn, "reduce", "sum")
    if reduce not in REDUCES:
        raise GnnprepError(f"{path}: {name}.reduce = {reduce!r}; expected one of {', '.join(REDUCES)}")
    loop = getattr(fn, "loop", 0.0)
    try:
        loop = float(loop)
    except (TypeError, ValueError):
        raise GnnprepError(f"{path}: {name}.loop = {loop!r}; expected a number >= 0") from None
    if not math.isfinite(loop) or loop < 0:
        raise GnnprepError(f"{path}: {name}.loop = {loop!r}; expected a finite number >= 0")
    file_sha = hashlib.sha256(raw).hexdigest()
    imports = local_imports(module, where)
    code_sha = file_sha if not imports else \
        hashlib.sha256(json.dumps([file_sha, list(imports)]).encode()).hexdigest()
    return UserFunction(spec, where, name, source, code_sha, reduce, loop, fn, file_sha, imports, args)


def local_imports(namespace: dict, where: str) -> tuple[tuple[str, str], ...]:
    """(path, sha256) of the modules an operator file uses that are the user's own (a ``.py`` file
    outside the Python installation: its helpers), found among the names it defines (``import
    helper``, ``from helper import f``): a change to one changes the run key, so a partial output
    computed with the old helper is never resumed. Modules those helpers import in turn are not
    followed."""
    roots = {os.path.realpath(p) for p in (sys.prefix, sys.base_prefix, sys.exec_prefix)}
    found = {}
    for value in list(namespace.values()):
        module = value if isinstance(value, types.ModuleType) else sys.modules.get(getattr(value, "__module__", "") or "")
        file = getattr(module, "__file__", None)
        if not file or not file.endswith(".py"):
            continue
        real = os.path.realpath(file)
        if real == os.path.realpath(where) or any(real.startswith(r + os.sep) for r in roots):
            continue
        try:
            found[real] = hashlib.sha256(Path(real).read_bytes()).hexdigest()
        except OSError:
            continue
    return tuple(sorted(found.items()))


# -- the graph's side of the contract ---------------------------------------------------------------------
@dataclass(frozen=True)
class Degrees:
    """The degrees a user operator sees (loop counted) and the entry counts, in stored order."""

    dst: np.ndarray        # d̃_in [n] float64: (weighted) edges into v, + loop
    src: np.ndarray        # d̃_out [n] float64: (weighted) edges out of u, + loop
    in_count: np.ndarray   # [n] entries of row v (the mean's denominator, without the loop)
    out_count: np.ndarray  # [n] entries naming u
    loop: float

    def with_loop(self, loop: float) -> Degrees:
        """The same graph's degrees for an operator with self-loop weight ``loop`` (these have none)."""
        if loop == self.loop:
            return self
        dst = self.dst + (loop - self.loop)
        src = dst if self.src is self.dst else self.src + (loop - self.loop)
        return Degrees(dst, src, self.in_count, self.out_count, loop)

    @property
    def dst_used(self) -> np.ndarray:
        """Nodes that are the destination of an entry (or of the self-loop)."""
        return self.in_count > 0 if self.loop == 0 else np.ones(len(self.dst), dtype=bool)

    @property
    def src_used(self) -> np.ndarray:
        return self.out_count > 0 if self.loop == 0 else np.ones(len(self.src), dtype=bool)


def degrees(store, loop: float, a: int = 16) -> Degrees:
    """A user operator's :class:`Degrees`: the (weighted) number of edges into and out of every
    node, plus ``loop`` (this module's contract)."""
    counts = np.diff(store.indptr())
    din = store.in_degree(a)
    if store.symmetric:
        return Degrees(din + loop, din + loop, counts, counts, loop)
    n = store.num_nodes
    dout, cout = np.zeros(n), np.zeros(n, dtype=np.int64)
    for _, _, p0, p1, w in store.weight_blocks(a):
        idx = store.stored_indices(p0, p1)
        dout += np.bincount(idx, weights=w, minlength=n)
        cout += np.bincount(idx, minlength=n)
    return Degrees(din + loop, dout + loop, counts, cout, loop)


def weight_sample(store, slices: int = 64, width: int = 4096) -> np.ndarray | None:
    """Stored edge weights from ``slices`` places across /adj/weights (None: unweighted)."""
    if not store.weighted:
        return None
    m = store.num_edges
    starts = np.unique(np.linspace(0, max(0, m - width), slices).astype(np.int64))
    return np.concatenate([store.stored_weights(int(p), int(p) + width) for p in starts]).astype(np.float64) \
        if m else np.ones(0)


def member_weights(fn: UserFunction, member_deg: np.ndarray, root_deg: np.ndarray, w: np.ndarray) -> np.ndarray:
    """``fn`` on an HDG level's members (``--hdg-weight``): c(d_member, d_root, w) in chunks (each
    within float32's range, the weights' dtype)."""
    return fits_float32(fn, _per_node(fn, member_deg, root_deg, w))


FLOAT32_MAX = float(np.finfo(np.float32).max)


def fits_float32(fn: UserFunction, values: np.ndarray, what: str = "coefficients") -> np.ndarray:
    """``values`` (finite float64 computed from ``fn``), or a GnnprepError naming the function when
    one of them is beyond float32's range (±3.4e38): the kernels compute in float32, where it would
    be inf, and the hops NaN or inf ("the value overflowed"). Checked here, before numpy's cast
    (which would also print a RuntimeWarning)."""
    if len(values):
        with np.errstate(all="ignore"):
            peak = float(np.max(np.abs(values)))
        if peak > FLOAT32_MAX:
            raise GnnprepError(f"{fn.path}: {fn.call} gives {what} up to {peak:g}, beyond "
                               f"float32's range ({FLOAT32_MAX:.3g}), the precision the kernels compute in; scale "
                               "the function down")
    return values


# -- the plan: which factors, hoisted where -------------------------------------------------------------
@dataclass(frozen=True)
class Factors:
    """What :func:`classify` found: which arguments the coefficient depends on, whether it is the
    product of a source, a destination and an edge factor, and the reference point (s0, d0, w0)
    with c(s0, d0, w0) = g0 ≠ 0 that the factors are taken at."""

    source: bool
    destination: bool
    edge: bool
    separable: bool
    s0: float = 1.0
    d0: float = 1.0
    w0: float = 1.0
    g0: float = 1.0
    scale: float | None = None    # κ when the edge factor is κ·w: the stored weights serve as they are

    @property
    def values(self) -> str:
        """The CSR values the kernel reads: none (scalings only), stored (the store's weights: the
        edge factor is κ·w, κ folded into the row scaling), weight (e(w) per stored weight), or
        entry (the whole coefficient per entry)."""
        if not self.separable:
            return "entry"
        if not self.edge:
            return "none"
        return "stored" if self.scale is not None else "weight"

    def describe(self) -> str:
        if not self.separable:
            return "not a product of source, destination and edge factors: the coefficient is computed per entry"
        parts = [p for p, used in (("destination", self.destination), ("source", self.source), ("edge", self.edge))
                 if used]
        hoist = {"destination": "row scaling", "source": "column scaling",
                 "edge": "the stored weights" if self.scale is not None else "CSR values e(w)"}
        return ("constant" if not parts else
                " × ".join(f"{p} ({hoist[p]})" for p in parts))

    def to_dict(self) -> dict:
        return {"source": self.source, "destination": self.destination, "edge": self.edge,
                "separable": self.separable, "values": self.values, "reference": [self.s0, self.d0, self.w0],
                "weight_scale": self.scale}


def _probe_values(values: np.ndarray, k: int) -> np.ndarray:
    """The distinct values, or a quantile sample of ``k`` of them (min and max included)."""
    u = np.unique(values)
    if len(u) > k:
        u = np.unique(u[np.linspace(0, len(u) - 1, k).round().astype(np.int64)])
    return u.astype(np.float64)


def _close(a: np.ndarray, b: np.ndarray, scale: float) -> bool:
    return bool(np.all(np.abs(a - b) <= RTOL * np.maximum(np.maximum(np.abs(a), np.abs(b)), scale * 1e-6)))


def classify(fn: UserFunction, deg: Degrees, weights: np.ndarray | None, rng_seed: int = 0) -> Factors:
    """Find the factors of ``fn`` on probes of this graph's degrees (of nodes at either end of an
    entry, loop counted) and weights (None: unweighted, w = 1). A probe that gives a value that is
    not finite (a pair of degrees no edge has, say) makes the function count as not separable: it
    is then evaluated on the entries themselves, where such a value is an error."""
    try:
        with np.errstate(all="ignore"):  # (products of huge probes: compared, not reported; see fits_float32)
            return _classify(fn, deg, weights, rng_seed)
    except _NotFinite:
        return Factors(True, True, True, False)


class _NotFinite(Exception):
    pass


def _classify(fn: UserFunction, deg: Degrees, weights: np.ndarray | None, rng_seed: int) -> Factors:
    user = fn

    def fn(s, d, w):
        out = user(s, d, w, finite=False)
        if not np.isfinite(out).all():
            raise _NotFinite
        return out

    S = _probe_values(deg.src[deg.src_used], PROBES)
    D = _probe_values(deg.dst[deg.dst_used], PROBES)
    W = _probe_values(weights, WEIGHT_PROBES) if weights is not None and len(weights) else np.ones(1)
    if user.loop > 0:
        W = np.union1d(W, [user.loop])
    if len(S) == 0 or len(D) == 0:  # no entry at all
        return Factors(False, False, False, True)
    # the reference point: medians, moved until the coefficient there is not zero
    g = None
    for s0 in (S[len(S) // 2], *S):
        d0s = fn(np.full(len(D), s0), D, np.full(len(D), W[len(W) // 2]))
        nz = np.flatnonzero(d0s)
        if len(nz):
            d0 = D[nz[len(nz) // 2]]
            w0 = W[len(W) // 2]
            g = fn(np.array([s0]), np.array([d0]), np.array([w0]))[0]
            break
    if g is None or g == 0:
        # zero wherever probed at the median weight: try the other weights before giving up
        for w0 in W:
            sd = _grid(fn, S, D, w0)
            if np.any(sd):
                i, j = np.unravel_index(int(np.flatnonzero(sd)[0]), sd.shape)
                s0, d0, g = S[i], D[j], sd[i, j]
                break
        else:
            return Factors(False, False, False, True, g0=0.0)  # zero everywhere probed
    a = fn(S, np.full(len(S), d0), np.full(len(S), w0))          # c(s, d0, w0)
    b = fn(np.full(len(D), s0), D, np.full(len(D), w0))          # c(s0, d, w0)
    e = fn(np.full(len(W), s0), np.full(len(W), d0), W)          # c(s0, d0, w)
    sd = _grid(fn, S, D, w0)
    scale = float(np.abs(sd).max())
    separable = _close(sd, np.outer(a, b) / g, scale)
    source = bool(np.any(sd != sd[:1, :]))
    destination = bool(np.any(sd != sd[:, :1]))
    # the weight against each degree side, and random triples of all three
    sw = _grid(fn, S, np.full(1, d0), None, W)[:, 0, :]
    dw = _grid(fn, np.full(1, s0), D, None, W)[0]
    edge = bool(np.any(sw != sw[:, :1]) or np.any(dw != dw[:, :1]) or np.any(e != e[0]))
    if separable:
        separable = (_close(sw, np.outer(a, e) / g, scale) and _close(dw, np.outer(b, e) / g, scale))
    if separable:
        rng = np.random.default_rng(rng_seed)
        m = 20000
        ts, td, tw = S[rng.integers(len(S), size=m)], D[rng.integers(len(D), size=m)], W[rng.integers(len(W), size=m)]
        ia, ib, ie = (np.searchsorted(S, ts), np.searchsorted(D, td), np.searchsorted(W, tw))
        separable = _close(fn(ts, td, tw), a[ia] * b[ib] * e[ie] / (g * g), scale)
    scale = None
    if separable and edge and W.min() >= 0:
        # e(w) = κ w (a weighted GCN, say): no new CSR values, the kernel reads the stored weights
        k = float(e @ W / (W @ W))
        if _close(e, k * W, float(np.abs(e).max())):
            scale = k
    return Factors(source, destination, edge, separable, float(s0), float(d0), float(w0), float(g), scale)


def _grid(fn: UserFunction, S: np.ndarray, D: np.ndarray, w0: float | None, W: np.ndarray | None = None):
    """c on the grid S × D at weight w0 (evaluated a few rows of S at a time: no |S|·|D| index
    grids), or S × D × W (small: one side of it has one value)."""
    if W is None:
        out = np.empty((len(S), len(D)))
        rows = max(1, CHUNK // max(1, len(D)))
        for i in range(0, len(S), rows):
            j = min(len(S), i + rows)
            k = (j - i) * len(D)
            out[i:j] = fn(np.repeat(S[i:j], len(D)), np.tile(D, j - i), np.full(k, w0)).reshape(j - i, len(D))
        return out
    ss, dd, ww = np.meshgrid(S, D, W, indexing="ij")
    return fn(ss.ravel(), dd.ravel(), ww.ravel()).reshape(ss.shape)


def _per_node(fn: UserFunction, s, d, w) -> np.ndarray:
    """fn over n nodes in chunks (each argument an array or a scalar)."""
    n = max(np.size(s), np.size(d), np.size(w))
    out = np.empty(n)
    for i in range(0, n, CHUNK):
        j = min(n, i + CHUNK)
        args = [np.asarray(a[i:j], dtype=np.float64) if np.ndim(a) else np.full(j - i, float(a)) for a in (s, d, w)]
        out[i:j] = fn(*args)
    return out


@dataclass(frozen=True)
class EdgeValues:
    """The CSR values of a user operator: e(w) per stored weight, or the whole coefficient per
    entry (degrees in the computation's node order)."""

    fn: UserFunction
    whole: bool                   # True: c(d̃_u, d̃_v, w); False: c(s0, d0, w) (the edge factor)
    s0: float
    d0: float
    src_deg: np.ndarray | None    # [n] float64 (whole only)
    dst_deg: np.ndarray | None
    divisor: np.ndarray | None = None  # [n]: values c / divisor[u] (the column scaling carries the loop's terms)

    def permuted(self, order: np.ndarray) -> EdgeValues:
        if not self.whole:
            return self
        return EdgeValues(self.fn, True, self.s0, self.d0, self.src_deg[order], self.dst_deg[order],
                          None if self.divisor is None else self.divisor[order])

    def values(self, indptr_block: np.ndarray, indices_block: np.ndarray, weights_block: np.ndarray | None,
               r0: int, out: np.ndarray | None = None) -> np.ndarray:
        """float32 values of the entries of rows r0.. (``indptr_block``: global offsets), into ``out``
        when given."""
        m = len(indices_block)
        if out is None:
            out = np.empty(m, dtype=np.float32)
        base = int(indptr_block[0])
        rows = len(indptr_block) - 1
        for i in range(0, m, CHUNK):
            j = min(m, i + CHUNK)
            w = (np.asarray(weights_block[i:j], dtype=np.float64) if weights_block is not None else np.ones(j - i))
            if self.whole:
                # the destination of entries i..j: the row whose range holds them
                dst = r0 + np.searchsorted(indptr_block[1:] - base, np.arange(i, j), side="right")
                dst = np.minimum(dst, r0 + rows - 1)
                src = indices_block[i:j]
                c = self.fn(self.src_deg[src], self.dst_deg[dst], w)
                out[i:j] = fits_float32(self.fn, c if self.divisor is None else c / self.divisor[src])
            else:
                out[i:j] = fits_float32(self.fn, self.fn(np.full(j - i, self.s0), np.full(j - i, self.d0), w))
        return out


def _on(used: np.ndarray, fn: UserFunction, s, d, w) -> np.ndarray:
    """fn over the nodes in ``used`` (an array argument is indexed by them), 0 elsewhere: a node
    at neither end of an entry never meets the coefficient, so it is not asked for one."""
    out = np.zeros(len(used))
    idx = np.flatnonzero(used)
    out[idx] = _per_node(fn, *(a[idx] if np.ndim(a) else a for a in (s, d, w))) if len(idx) else 0.0
    return out


def compile_operator(fn: UserFunction, factors: Factors, deg: Degrees):
    """The :class:`gnnprep.precompute.operators.Operator` of ``fn`` with ``factors`` (from :func:`classify`):
    (left, right, loop, CSR values, reduce). Scalings beyond float32's range are an error naming the
    function (:func:`fits_float32`), never a numpy RuntimeWarning."""
    with np.errstate(all="ignore"):
        return _compile_operator(fn, factors, deg)


def _compile_operator(fn: UserFunction, factors: Factors, deg: Degrees):
    from gnnprep.precompute.operators import Operator

    n = len(deg.dst)
    f = factors
    edge = None
    if f.separable and f.g0 != 0:
        right = _on(deg.src_used, fn, deg.src, f.d0, f.w0) / f.g0
        if f.edge and f.scale is not None:  # c = l r κ w: κ into l, the stored weights as they are
            left = _on(deg.dst_used, fn, f.s0, deg.dst, f.w0) / f.g0 * f.scale
            loop = fn.loop
        elif f.edge:
            left = _on(deg.dst_used, fn, f.s0, deg.dst, f.w0) / f.g0
            loop = float(_per_node(fn, f.s0, f.d0, np.full(1, fn.loop))[0]) if fn.loop > 0 else 0.0
            edge = EdgeValues(fn, False, f.s0, f.d0, None, None)
        else:
            left = _on(deg.dst_used, fn, f.s0, deg.dst, f.w0)
            loop = 1.0 if fn.loop > 0 else 0.0
        if fn.reduce == "max" and (left < 0).any():
            f = Factors(f.source, f.destination, f.edge, False)  # a negative l cannot leave the max
    elif f.separable:  # zero wherever probed: still evaluated on the entries, where it must be finite
        f = Factors(False, False, False, False)
    if not f.separable:
        left, right, loop, divisor = np.ones(n), np.ones(n), 0.0, None
        if fn.loop > 0:
            # the loop term is l[v] λ r[v] x[v]: with l = 1, λ = 1 and r[v] = c(d̃_v, d̃_v, loop) it is the
            # self-loop's coefficient, and the entries' values are c / r[u] (w_p r[u] = c again)
            right = _per_node(fn, deg.src, deg.dst, np.full(n, fn.loop))
            if (right == 0).any():
                raise unsupported_loop(fn)
            loop, divisor = 1.0, right.astype(np.float32).astype(np.float64)
        edge = EdgeValues(fn, True, f.s0, f.d0, deg.src, deg.dst, divisor)
    if fn.reduce == "mean":
        c = deg.in_count + (1 if loop else 0)
        left = np.where(c > 0, left / np.maximum(c, 1), 0.0)
    values = "edge" if edge is not None else ("stored" if f.separable and f.edge and f.scale is not None else "none")
    for part in (left, right, np.array([loop])):
        if not np.isfinite(part).all():   # (a quotient of finite values that overflowed float64)
            raise GnnprepError(f"{fn.path}: {fn.call} gives coefficients whose per-node "
                               "factors are not finite numbers; scale the function down")
        fits_float32(fn, part)
    return Operator(fn.name, left.astype(np.float32), right.astype(np.float32), loop,
                    values=values, edge=edge, reduce=fn.reduce)


def unsupported_loop(fn: UserFunction) -> GnnprepError:
    return GnnprepError(f"{fn.path}: {fn.name}.loop = {fn.loop:g} with a coefficient that is not a product of source, "
                        "destination and edge factors and is 0 for some node's self-loop: unsupported; give the "
                        "self-loop a non-zero coefficient or set loop = 0")
