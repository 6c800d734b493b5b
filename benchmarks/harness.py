"""What every benchmark in ``benchmarks/`` shares: running a command in its own process and measuring
it, the bench graphs, and the summaries and prints of repeated timings.

Processes
  :func:`run_measured` runs a command under :file:`launcher.py`, a tiny process that reaps it with
  ``os.wait4`` and reports its own peak RSS (Linux carries a parent's peak RSS into a forked child's
  ``ru_maxrss`` across fork + exec, so a child of the large benchmark process would report at least
  the parent's peak); :func:`run_json` adds the JSON the command printed last. :func:`run_tree`
  samples a whole process tree (torchrun and its ranks). :func:`child` is the command line of one of
  the child programs in this folder (``child_*.py``), :func:`gnnprep_cmd` of ``python -m gnnprep``.
  :func:`copy_bandwidth` is the memory-copy roofline (:file:`child_bandwidth.py`).

Bench graphs (written as graph stores with ``gnnprep.graph.ingest.ingest``)
  :func:`ensure_graph`: the power-law graph with community structure of ``bench_precompute.py``,
  ``bench_distributed.py`` and ``bench_udf.py`` (Pareto node weights, communities of contiguous ids,
  degree-weighted endpoints, permuted ids), cached in ``<workdir>/<graph_tag(args)>/graph.h5``; its
  options (:func:`add_size_args`, :func:`add_generator_args`) and sizes (:func:`quick_defaults`).
  :func:`uniform_destination_edges`: the power-law sources / uniform destinations of
  ``bench_uniform.py``. :func:`uniform_random_store`: uniformly random edges (``bench_hdg.py``,
  ``sigterm_hdg.py``). The pieces under them: :func:`stored_nnz`, :func:`write_normal_features`,
  :func:`ingest_arrays`.

Figures
  :func:`median`, :func:`span` (``lo..hi``), :func:`med_span`, :func:`best`; :func:`load_avg`,
  :func:`cpu_idle` (how busy the shared machine was); :func:`verdict`, :func:`target`, :func:`gib`;
  the hop datasets of a features artifact (:func:`read_hop`, :func:`max_rel_error`,
  :func:`row_rel_error`, :func:`same_hops`); :func:`clear_output`.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent   # benchmarks/
ROOT = HERE.parent                       # the repository (gnnprep/ beside benchmarks/)
CORA = ROOT.parent / "shared" / "data" / "cora"
MiB, GiB = 1024**2, 1024**3

if str(ROOT) not in sys.path:            # the checkout's gnnprep, as the child programs import it
    sys.path.insert(0, str(ROOT))


# -- processes -------------------------------------------------------------------------------------
def child(name: str, *args) -> list[str]:
    """The command line of the child program ``benchmarks/<name>.py`` with ``args``."""
    return [sys.executable, str(HERE / f"{name}.py"), *[str(a) for a in args]]


def gnnprep_cmd(*args) -> list[str]:
    """``python -m gnnprep ARGS...`` with this interpreter."""
    return [sys.executable, "-m", "gnnprep", *[str(a) for a in args]]


def patched_child(child) -> bool:
    """A benchmark's child mode (``script --child MODE ARGS``): ``child(MODE)`` applies that mode's
    patches, then ``gnnprep ARGS`` runs in this process. Whether this process was one."""
    if len(sys.argv) < 3 or sys.argv[1] != "--child":
        return False
    mode, argv = sys.argv[2], sys.argv[3:]
    child(mode)
    from gnnprep.__main__ import main

    sys.argv = ["gnnprep", *argv]
    main()
    return True


def run_measured(cmd: list, log: Path | None = None) -> dict:
    """Run ``cmd`` under :file:`launcher.py`: {"seconds" (wall), "peak_rss" (the command's own, bytes),
    "read_bytes" (what it read from the disk), "stdout"}; its stderr goes to ``log`` when given. Exits
    with the command's stderr if it fails."""
    cmd = [str(c) for c in cmd]
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, str(HERE / "launcher.py"), *cmd], capture_output=True)
    wall = time.perf_counter() - t0
    err = proc.stderr.decode()
    body, _, tail = err.rpartition("__peak_rss=")
    if log is not None:
        log.write_text(body)
    if proc.returncode != 0 or not tail:
        where = f"; stderr in {log}" if log is not None else ""
        sys.exit(f"command failed ({proc.returncode}){where}: {' '.join(cmd)}\n{err[-3000:]}")
    fields = dict(f.split("=", 1) for f in ("__peak_rss=" + tail).split() if f.startswith("__"))
    return {"seconds": wall, "peak_rss": int(fields["__peak_rss"]), "read_bytes": int(fields["__read_bytes"]),
            "stdout": proc.stdout.decode().strip()}


def last_json(stdout: str):
    """The JSON a command printed on its last stdout line (None when it printed nothing)."""
    lines = stdout.strip().splitlines()
    return json.loads(lines[-1]) if lines else None


def run_json(cmd: list, log: Path | None = None) -> dict:
    """:func:`run_measured`, with "report": the JSON the command printed last."""
    r = run_measured(cmd, log)
    r["report"] = last_json(r.pop("stdout"))
    return r


def run_tree(cmd: list[str], env: dict, out_path: Path, err_path: Path, interval: float = 0.1) -> dict:
    """Run ``cmd`` (stdout, stderr to files; cwd: the output's folder); wall seconds, exit status, and
    the memory of its process tree sampled every ``interval`` s: the largest summed RSS, and each
    process's last seen VmHWM (the peak of a process that exits between samples may be missed by a
    few MB at most), summed over the workers and over torchrun's agent."""
    import psutil

    from gnnprep.core.memory import peak_rss

    with open(out_path, "wb") as out, open(err_path, "wb") as err:
        epoch0 = time.time()
        t0 = time.perf_counter()
        proc = subprocess.Popen(cmd, env=env, stdout=out, stderr=err, cwd=out_path.parent)
        root = psutil.Process(proc.pid)
        peak_sum, hwm, kind = 0, {}, {}
        while proc.poll() is None:
            try:
                procs = [root] + root.children(recursive=True)
            except psutil.NoSuchProcess:
                procs = []
            total = 0
            for p in procs:
                try:
                    total += p.memory_info().rss
                    if p.pid not in kind:
                        line = " ".join(p.cmdline())
                        kind[p.pid] = "agent" if "torch.distributed.run" in line or "torchrun" in line else "worker"
                except (psutil.NoSuchProcess, psutil.AccessDenied):
                    continue
                h = peak_rss(p.pid)
                if h is not None:
                    hwm[p.pid] = max(hwm.get(p.pid, 0), h)
            peak_sum = max(peak_sum, total)
            time.sleep(interval)
        wall = time.perf_counter() - t0
        epoch1 = time.time()
    workers = [h for pid, h in hwm.items() if kind.get(pid) == "worker"]
    return {"wall": wall, "epoch0": epoch0, "epoch1": epoch1, "rc": proc.returncode, "peak_tree_rss": peak_sum,
            "workers_hwm_sum": sum(workers), "workers": len(workers),
            "agent_hwm": sum(h for pid, h in hwm.items() if kind.get(pid) == "agent")}


def copy_bandwidth() -> float:
    """Bytes/s (read + written) of numpy copying a 1 GiB float32 array, best of 3, in a fresh process
    (:file:`child_bandwidth.py`): the roofline a hop's achieved bytes/s is compared with."""
    return float(run_json(child("child_bandwidth"))["report"]["bytes_per_s"])


def parse_size(text: str, what: str | None = None) -> int:
    """gnnprep's size parser ("2GiB", "512MiB", bytes)."""
    from gnnprep.core.sizes import parse_size as parse

    return parse(text) if what is None else parse(text, what)


def evict(path) -> None:
    """Drop ``path``'s pages from the page cache (its dirty pages written first; clean pages: no
    privileges needed), so that the next read of it is a cold one."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def clear_output(out: Path) -> None:
    """Delete ``out`` and every file beside it whose name starts with its name (``.partial``,
    ``.partial.json``, ``.partial.lock``, ``.tmp-*``, shards): a rerun must neither resume nor reuse them."""
    out = Path(out)
    for p in out.parent.glob(out.name + "*"):
        if p.is_file():
            p.unlink()


def with_without(work: Path, rounds: int, run) -> tuple[dict[str, list[dict]], bool | float]:
    """The runs of an A/B benchmark of a patched child (:func:`patched_child`): ``run(mode, out)``
    (mode "with" or "without") runs once writing ``out`` (in a temporary folder under ``work``) and
    returns its figures; each round runs both, the order reversed every other round. Returns
    ({mode: [figures of each round]}, :func:`same_datasets` of the two last outputs)."""
    import tempfile

    modes = ("with", "without")
    res: dict[str, list[dict]] = {m: [] for m in modes}
    with tempfile.TemporaryDirectory(dir=work) as tmp:
        for i in range(rounds):
            for m in (modes if i % 2 == 0 else modes[::-1]):
                out = Path(tmp) / f"{m}.h5"
                clear_output(out)
                res[m].append(run(m, out))
        return res, same_datasets(Path(tmp) / "with.h5", Path(tmp) / "without.h5")


def same_datasets(a: Path, b: Path, prefixes: tuple[str, ...] | None = None) -> bool | float:
    """Whether every dataset of two HDF5 files (those whose names start with one of ``prefixes``,
    if given) is the same, byte for byte; where one differs, the largest difference over all of
    them relative to the dataset's largest value (False where shapes differ or a dataset is missing)."""
    import h5py

    names: list[str] = []
    with h5py.File(a, "r") as fa, h5py.File(b, "r") as fb:
        fa.visititems(lambda name, obj: names.append(name) if isinstance(obj, h5py.Dataset)
                      and (prefixes is None or name.startswith(prefixes)) else None)
        worst = 0.0
        for name in names:
            if name not in fb or fa[name].shape != fb[name].shape:
                return False
            x, y = fa[name][...], fb[name][...]
            if not np.array_equal(x, y):
                x, y = x.astype(np.float64), y.astype(np.float64)
                worst = max(worst, float(np.abs(x - y).max() / max(np.abs(x).max(), 1e-30)))
        return bool(names) if worst == 0.0 else worst


def with_without_summary(res: dict[str, list[dict]], keys: tuple[str, ...]) -> tuple[dict, dict]:
    """(summary, ratios) of :func:`with_without`'s runs: per mode each key's best and median and the
    largest peak RSS; the ratios without / with of each key's best and median."""
    summary = {m: {**{k: {"best": round(min(r[k] for r in rows), 3), "median": round(median([r[k] for r in rows]), 3)}
                      for k in keys}, "peak_rss": max(r["peak_rss"] for r in rows)} for m, rows in res.items()}
    ratios = {f"{k}_{q}": round(summary["without"][k][q] / max(summary["with"][k][q], 1e-9), 3)
              for k in keys for q in ("best", "median")}
    return summary, ratios


# -- figures ---------------------------------------------------------------------------------------
def median(xs) -> float:
    return statistics.median(list(xs))


def span(xs, fmt: str = "{:.2f}") -> str:
    """``min..max`` of ``xs``."""
    xs = list(xs)
    return f"{fmt.format(min(xs))}..{fmt.format(max(xs))}"


def med_span(xs, fmt: str = "{:.2f}") -> str:
    """``median [min..max]`` of ``xs``."""
    xs = list(xs)
    return f"{fmt.format(median(xs))} [{span(xs, fmt)}]"


def best(runs: list[dict], key: str = "seconds") -> dict:
    """The run with the smallest ``key``."""
    return min(runs, key=lambda r: r[key])


def load_avg() -> str:
    """The load average over 1, 5 and 15 minutes, ``a/b/c`` (other jobs on a shared machine)."""
    try:
        return "/".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        return "n/a"


def cpu_idle(seconds: float = 1.0) -> float | None:
    """Share of all cores' time that was idle over ``seconds`` (from /proc/stat); None off Linux."""
    def read():
        with open("/proc/stat") as f:
            v = [int(t) for t in f.readline().split()[1:]]
        return v[3] + v[4], sum(v)  # idle + iowait, total
    try:
        i0, t0 = read()
        time.sleep(seconds)
        i1, t1 = read()
    except (OSError, ValueError, IndexError):
        return None
    return round((i1 - i0) / max(1, t1 - t0), 3)


def machine_line() -> str:
    """How busy the machine is now: load average, CPUs, idle share over a second."""
    return f"load average (1/5/15 min) {load_avg()}; {os.cpu_count()} CPUs; CPU idle over 1 s: {cpu_idle()}"


def verdict(ok: bool) -> str:
    return "PASS" if ok else "MISS"


def target(value: float, limit: float, at_least: bool = True) -> str:
    """``(target >= limit: PASS)`` (or ``<=``) for a ratio ``value``."""
    ok = value >= limit if at_least else value <= limit
    return f"(target {'>=' if at_least else '<='} {limit:g}: {verdict(ok)})"


def gib(x: float | None) -> str:
    return "-" if x is None else f"{x / GiB:.2f} GiB"


# -- features artifacts ----------------------------------------------------------------------------
def read_hop(path: Path, k: int | str) -> np.ndarray:
    """Hop ``k`` of a features artifact (``/hops/<k>``), or the dataset ``k`` when it is a path
    such as ``channels/sym/3``."""
    import h5py

    name = k if isinstance(k, str) else f"hops/{k}"
    with h5py.File(path, "r") as f:
        return f[name][:]


def max_rel_error(got: np.ndarray, ref: np.ndarray, block: int = 1 << 16) -> float:
    """max |got - ref| / max |ref| (float64, in row blocks: no full-size temporary)."""
    diff = 0.0
    for i in range(0, len(ref), block):
        a = np.asarray(got[i:i + block], dtype=np.float64)
        b = np.asarray(ref[i:i + block], dtype=np.float64)
        if a.size:
            diff = max(diff, float(np.abs(a - b).max()))
    scale = float(np.abs(np.asarray(ref)).max()) if len(ref) else 0.0
    return diff / scale if scale > 0 else diff


def row_rel_error(got: np.ndarray, ref: np.ndarray) -> float:
    """max over rows v of ||got_v - ref_v|| / ||ref_v|| (rows with ref_v = 0 left out)."""
    norm_ref = np.linalg.norm(ref, axis=1)
    norm_diff = np.linalg.norm(got - ref, axis=1)
    ok = norm_ref > 0
    return float((norm_diff[ok] / norm_ref[ok]).max()) if ok.any() else 0.0


def same_hops(a_path: Path, b_path: Path, hops: int | None = None, rows_per_read: int = 1 << 17) -> dict:
    """Whether two features artifacts hold the same /rows and hops 0..K bit for bit (same shape, same
    dtype, equal bytes), read in row blocks (virtual datasets too). ``hops``: K (default: every
    /hops/<k> of ``a``). {"equal", "first_difference", "virtual" (b's hops are virtual datasets),
    "virtual_sources" (per hop), "hops" (how many were compared)}."""
    import h5py

    with h5py.File(a_path, "r") as fa, h5py.File(b_path, "r") as fb:
        ks = range(hops + 1) if hops is not None else sorted(int(k) for k in fa["hops"].keys())
        ks = list(ks)
        virtual = all(fb[f"hops/{k}"].is_virtual for k in ks if f"hops/{k}" in fb)
        sources = len(fb["hops/0"].virtual_sources()) if virtual and "hops/0" in fb else 0
        ok = np.array_equal(fa["rows"][:], fb["rows"][:]) if "rows" in fa else "rows" not in fb
        first_bad = None if ok else "/rows"
        for k in ks:
            if first_bad:
                break
            if f"hops/{k}" not in fb:
                ok, first_bad = False, f"hop {k}: missing in {b_path}"
                break
            where = first_difference(fa[f"hops/{k}"], fb[f"hops/{k}"], rows_per_read)
            if where is not None:
                ok, first_bad = False, f"hop {k}: {where}"
    return {"equal": bool(ok), "virtual": virtual, "virtual_sources": sources, "first_difference": first_bad,
            "hops": len(ks)}


def first_difference(da, db, rows_per_read: int = 1 << 17) -> str | None:
    """Where two 2-d datasets (or arrays) first differ bit for bit, read in row blocks: their
    shape/dtype, or "row r, column c"; None when they are equal."""
    if da.shape != db.shape or da.dtype != db.dtype:
        return f"shape/dtype {da.shape} {da.dtype} vs {db.shape} {db.dtype}"
    for r0 in range(0, da.shape[0], rows_per_read):
        xa, xb = da[r0:r0 + rows_per_read], db[r0:r0 + rows_per_read]
        ua, ub = xa.view(f"u{xa.dtype.itemsize}"), xb.view(f"u{xb.dtype.itemsize}")
        if not np.array_equal(ua, ub):
            bad = np.argwhere(ua != ub)[0]
            return f"row {r0 + bad[0]}, column {bad[1]}"
    return None


# -- bench graphs ----------------------------------------------------------------------------------
def stored_nnz(src: np.ndarray, dst: np.ndarray, n: int) -> int:
    """Stored entries after symmetrising, deduplicating and dropping self-loops."""
    keep = src != dst
    lo, hi = np.minimum(src[keep], dst[keep]), np.maximum(src[keep], dst[keep])
    return 2 * len(np.unique(lo * n + hi))


def community_edges(n: int, target_nnz: int, *, community: int, p_in: float, alpha: float, seed: int):
    """The power-law graph with community structure: directed edges with >= ``target_nnz`` stored
    entries once symmetrised and deduplicated; (src, dst, stored_nnz), ids permuted.

    Pareto(``alpha``) node weights; communities of ``community`` contiguous ids (before the
    permutation); a share ``p_in`` of the edges inside the source's community; both endpoints drawn
    in proportion to the node weights; finally a random permutation of the ids."""
    rng = np.random.default_rng(seed)
    w = rng.pareto(alpha, n) + 1.0          # node weights: Pareto tail -> power-law degrees
    cum = np.cumsum(w)
    total = cum[-1]

    def draw(m):
        src = np.minimum(np.searchsorted(cum, rng.random(m) * total, side="right"), n - 1)
        lo = (src // community) * community
        hi = np.minimum(lo + community, n)
        base = np.where(lo > 0, cum[np.maximum(lo - 1, 0)], 0.0)
        top = cum[hi - 1]
        inside = np.minimum(np.searchsorted(cum, base + rng.random(m) * (top - base), side="right"), hi - 1)
        outside = np.minimum(np.searchsorted(cum, rng.random(m) * total, side="right"), n - 1)
        dst = np.where(rng.random(m) < p_in, inside, outside)
        return src, dst

    src, dst = draw(int(target_nnz / 2 * 1.1) + 1)
    nnz = stored_nnz(src, dst, n)
    while nnz < target_nnz:
        missing = target_nnz - nnz
        s2, d2 = draw(int(missing / 2 * 1.5) + 1000)
        src, dst = np.concatenate([src, s2]), np.concatenate([dst, d2])
        nnz = stored_nnz(src, dst, n)
    perm = rng.permutation(n)
    return perm[src], perm[dst], nnz


def uniform_destination_edges(n: int, target: int, alpha: float, rng: np.random.Generator):
    """(src, dst, stored nnz): src drawn in proportion to Pareto(``alpha``) + 1 node weights, dst
    uniform over all nodes (no communities, no permutation); edge batches until >= ``target``."""
    cum = np.cumsum(rng.pareto(alpha, n) + 1.0)
    total = cum[-1]

    def batch(k: int):
        u = rng.random(k) * total
        order = np.argsort(u)                      # sorted keys: numpy's binary search is much faster
        src = np.empty(k, np.int64)
        src[order] = np.searchsorted(cum, u[order], side="right")
        return np.minimum(src, n - 1), rng.integers(0, n, k, dtype=np.int64)

    src, dst = batch(int(target / 2 * 1.05) + 1)
    nnz = stored_nnz(src, dst, n)
    while nnz < target:
        s2, d2 = batch(int((target - nnz) / 2 * 1.3) + 1000)
        src, dst = np.concatenate([src, s2]), np.concatenate([dst, d2])
        nnz = stored_nnz(src, dst, n)
        print(f"  stored entries {nnz:,} / {target:,}", file=sys.stderr, flush=True)
    return src, dst, nnz


def write_normal_features(path: Path, n: int, d: int, rng: np.random.Generator, chunk: int = 1 << 18) -> Path:
    """Standard-normal float32 features [n, d] from ``rng`` written to the .npy ``path`` in row chunks
    (the values do not depend on ``chunk``)."""
    x = np.lib.format.open_memmap(path, mode="w+", dtype=np.float32, shape=(n, d))
    for s in range(0, n, chunk):
        x[s:s + chunk] = rng.standard_normal((min(chunk, n - s), d), dtype=np.float32)
    x.flush()
    del x
    return Path(path)


def ingest_arrays(edges: Path, out: Path, n: int, features: Path | None = None, budget: int | None = None):
    """``gnnprep.graph.ingest.ingest`` of an edge_index .npy (and a features .npy) into the graph
    store ``out``, through a temporary file renamed at the end; the ingest report."""
    from gnnprep.graph.ingest import IngestConfig, ingest
    from gnnprep.graph.sources import SourceOptions

    out = Path(out)
    tmp = out.with_name(out.name + ".tmp")
    source = SourceOptions(num_nodes=n, features=None if features is None else str(features))
    config = IngestConfig(source=source) if budget is None else IngestConfig(memory_budget=budget, source=source)
    rep = ingest(str(edges), tmp, config)
    os.replace(tmp, out)
    return rep


def uniform_random_store(path: Path, n: int, degree: int, dim: int | None = None, seed: int = 0) -> Path:
    """A graph store of n * degree / 2 uniformly random edges (symmetrised on ingest), with
    standard-normal features of ``dim`` columns when given; made once (kept when ``path`` exists)."""
    path = Path(path)
    if path.exists():
        return path
    rng = np.random.default_rng(seed)
    edges, feats = path.with_name(path.name + ".e.npy"), path.with_name(path.name + ".x.npy")
    np.save(edges, rng.integers(0, n, (2, n * degree // 2)).astype(np.int32))
    if dim:
        write_normal_features(feats, n, dim, rng)
    ingest_arrays(edges, path, n, feats if dim else None)
    edges.unlink()
    feats.unlink(missing_ok=True)
    return path


def add_size_args(ap, quick_help: str = "100k nodes, 2M entries, 1 round (a smoke run)") -> None:
    """--quick, --nodes, --nnz, --dim: the bench graph's size (filled in by :func:`quick_defaults`)."""
    ap.add_argument("--quick", action="store_true", help=quick_help)
    ap.add_argument("--nodes", type=int, default=None, help="nodes (default 1,000,000; quick 100,000)")
    ap.add_argument("--nnz", type=int, default=None,
                    help="at least this many stored entries (default 20,000,000; quick 2,000,000)")
    ap.add_argument("--dim", type=int, default=128)


def add_generator_args(ap) -> None:
    """The power-law community generator's options (:func:`community_edges`, :func:`ensure_graph`)."""
    ap.add_argument("--community", type=int, default=2000, help="nodes per community")
    ap.add_argument("--p-in", type=float, default=0.85, help="share of edges inside the community")
    ap.add_argument("--alpha", type=float, default=1.5, help="Pareto shape of the node weights")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--ingest-budget", default="2GiB")


def quick_defaults(args) -> None:
    """The 1M-node, 20M-entry bench graph and 3 rounds, or with ``--quick`` a 100k-node, 2M-entry
    smoke run of 1 round; an option given on the command line wins."""
    args.nodes = args.nodes or (100_000 if args.quick else 1_000_000)
    args.nnz = args.nnz or (2_000_000 if args.quick else 20_000_000)
    args.rounds = getattr(args, "rounds", None) or (1 if args.quick else 3)


def graph_tag(args, nodes: int | None = None, nnz: int | None = None) -> str:
    """The cache folder's name of the power-law community graph of these options."""
    n = args.nodes if nodes is None else nodes
    m = args.nnz if nnz is None else nnz
    return f"plaw_n{n}_nnz{m}_d{args.dim}_c{args.community}_p{args.p_in}_a{args.alpha}_s{args.seed}"


def find_graph(args, work: Path, elsewhere=(Path("/tmp/bw"), Path("/tmp/gnnprep-bench-pre"),
                                            Path("/tmp/gnnprep-bench-dist"))) -> Path | None:
    """The power-law community graph of these options cached by an earlier run in ``work`` or one of
    the other benchmarks' work folders; None when there is none."""
    for base in (*elsewhere, Path(work)):
        if (base / graph_tag(args) / "graph.h5").exists():
            return base / graph_tag(args) / "graph.h5"
    return None


def ensure_graph(work: Path, args, nodes: int | None = None, nnz: int | None = None) -> tuple[Path, dict]:
    """The cached graph store of the power-law community graph (``args.dim`` standard-normal float32
    features, seed ``args.seed + 1``), generated and ingested on first use into
    ``work/<graph_tag>/graph.h5``; with its info (sizes, generation and ingest seconds)."""
    n = args.nodes if nodes is None else nodes
    nnz = args.nnz if nnz is None else nnz
    d = args.dim
    folder = Path(work) / graph_tag(args, n, nnz)
    graph = folder / "graph.h5"
    info_path = folder / "info.json"
    if graph.exists() and info_path.exists():
        return graph, json.loads(info_path.read_text())
    folder.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    print(f"generating {folder} ...", file=sys.stderr, flush=True)
    src, dst, stored = community_edges(n, nnz, community=args.community, p_in=args.p_in, alpha=args.alpha,
                                       seed=args.seed)
    dtype = np.int32 if n < 2**31 else np.int64
    np.save(folder / "edges.npy", np.stack([src.astype(dtype), dst.astype(dtype)]))
    m = len(src)
    del src, dst
    write_normal_features(folder / "x.npy", n, d, np.random.default_rng(args.seed + 1))
    gen_s = time.perf_counter() - t0
    print(f"ingesting ({m:,} directed edges) ...", file=sys.stderr, flush=True)
    t0 = time.perf_counter()
    rep = ingest_arrays(folder / "edges.npy", graph, n, folder / "x.npy", parse_size(args.ingest_budget))
    ingest_s = time.perf_counter() - t0
    assert rep.num_edges == stored, (rep.num_edges, stored)
    info = {"nodes": n, "stored_nnz": int(rep.num_edges), "directed_edges": m, "dim": d,
            "generate_seconds": round(gen_s, 2), "ingest_seconds": round(ingest_s, 2)}
    info_path.write_text(json.dumps(info))
    (folder / "edges.npy").unlink()
    (folder / "x.npy").unlink()
    print(f"generated in {gen_s:.1f} s, ingested in {ingest_s:.1f} s", file=sys.stderr, flush=True)
    return graph, info


def degree_summary(graph: Path) -> dict:
    """Max, median, p99 of the stored row lengths and the isolated nodes."""
    import h5py

    with h5py.File(graph, "r") as f:
        deg = np.diff(f["adj/indptr"][:])
    return {"max": int(deg.max()), "median": float(np.median(deg)), "p99": float(np.percentile(deg, 99)),
            "isolated": int((deg == 0).sum())}


# -- R-MAT (Graph500) ------------------------------------------------------------------------------
RMAT_GRAPH500 = (0.57, 0.19, 0.19, 0.05)   # Graph500's Kronecker initiator a, b, c, d


def _rmat_draw(m: int, scale: int, probs, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """``m`` directed R-MAT edges over 2**scale ids (uint32, scale <= 32): at each level one
    uniform r picks the quadrant, (0, 0) below a, (0, 1) below a + b, (1, 0) below a + b + c, else
    (1, 1), and appends that bit to each endpoint. The same distribution as the Graph500 reference
    generator's two draws per level (source bit 1 with probability c + d, then the destination bit
    with d / (c + d) after a 1, b / (a + b) after a 0), in place in a few passes per level."""
    a, b, c, _ = probs
    t1, t2, t3 = np.float32(a), np.float32(a + b), np.float32(a + b + c)
    src = np.zeros(m, np.uint32)
    dst = np.zeros(m, np.uint32)
    r = np.empty(m, np.float32)
    g = np.empty(m, np.bool_)
    h = np.empty(m, np.bool_)
    for _ in range(scale):
        rng.random(out=r, dtype=np.float32)
        np.greater_equal(r, t2, out=g)         # source bit: r >= a + b
        src <<= 1
        src |= g
        np.greater_equal(r, t1, out=h)         # destination bit: [a, a + b) or [a + b + c, 1)
        h ^= g
        np.greater_equal(r, t3, out=g)
        h ^= g
        dst <<= 1
        dst |= h
    return src, dst


def sorted_unique(keys: np.ndarray) -> np.ndarray:
    """The distinct values of an int64 array, ascending (sorted in place, then adjacent repeats
    dropped: several times faster than ``np.unique``'s hash table on tens of millions of keys)."""
    keys.sort()
    if len(keys) < 2:
        return keys
    keep = np.empty(len(keys), np.bool_)
    keep[0] = True
    np.not_equal(keys[1:], keys[:-1], out=keep[1:])
    return keys[keep]


def rmat_edges(n: int, target_nnz: int, seed: int = 0, probs=RMAT_GRAPH500, chunk: int = 1 << 22,
               progress: bool = True) -> tuple[np.ndarray, np.ndarray, int]:
    """A Graph500-style R-MAT graph on ``n`` nodes: the undirected edges (u, v), each once (so
    2 · len(u) stored entries once symmetrised), with at least ``target_nnz`` stored entries; (u, v,
    stored nnz), ids randomly permuted.

    Edges are drawn over 2**ceil(log2 n) ids with the Graph500 initiator (a, b, c, d) =
    (0.57, 0.19, 0.19, 0.05) in chunks of ``chunk`` edges (:func:`_rmat_draw`); edges with an
    endpoint >= n (the sparse corner of the id space) and self-loops are dropped, and duplicates
    (either direction) collapsed: each chunk's keys min·n + max are deduplicated as they come, and
    all of them once per batch. Batches are drawn until the graph has >= ``target_nnz`` stored
    entries; finally the ids go through a random permutation (Graph500 permutes its vertex ids too),
    so ids carry no locality. Memory: ~8 B per unique undirected edge, twice while merging, plus
    ~100 B per chunk edge (a 4M-edge chunk: ~0.4 GiB); 2.8M nodes, 83M stored entries: ~10 s and
    a peak RSS of 1.8 GiB with :func:`symmetric_csr`, on a busy 2-core machine."""
    rng = np.random.default_rng(seed)
    scale = max(1, int(np.ceil(np.log2(max(n, 2)))))
    if n > 3_037_000_499:   # keys min·n + max must fit int64 (and ids uint32)
        raise ValueError(f"R-MAT: {n:,} nodes; at most 3,037,000,499 here")
    keys = np.empty(0, np.int64)

    def batch(edges: int) -> np.ndarray:
        parts = [keys]
        for start in range(0, edges, chunk):
            src, dst = _rmat_draw(min(chunk, edges - start), scale, probs, rng)
            keep = (src < n) & (dst < n) & (src != dst)
            src, dst = src[keep].astype(np.int64), dst[keep].astype(np.int64)
            parts.append(sorted_unique(np.minimum(src, dst) * n + np.maximum(src, dst)))
            del src, dst, keep
        return sorted_unique(np.concatenate(parts))

    keys = batch(int(target_nnz / 2 * 1.25) + 1)
    while 2 * len(keys) < target_nnz:
        missing = target_nnz - 2 * len(keys)
        keys = batch(int(missing / 2 * 1.6) + 1000)
        if progress:
            print(f"  R-MAT stored entries {2 * len(keys):,} / {target_nnz:,}", file=sys.stderr, flush=True)
    perm = rng.permutation(n)
    u, v = perm[keys // n], perm[keys % n]
    return u, v, 2 * len(keys)


def symmetric_csr(u: np.ndarray, v: np.ndarray, n: int, index_dtype=None,
                  chunk: int = 1 << 24) -> tuple[np.ndarray, np.ndarray]:
    """(indptr int64, indices) of the symmetric adjacency with an entry (u, v) and (v, u) for each
    undirected edge (u ≠ v, each pair once): rows sorted, columns ascending in each row. One int64
    key per stored entry is sorted (8 B each); the column ids are taken from it in chunks, as
    ``index_dtype`` (default int32, int64 from 2**31 nodes on, as the graph store keeps them)."""
    if index_dtype is None:
        index_dtype = np.int32 if n < 2**31 else np.int64
    counts = np.bincount(u, minlength=n) + np.bincount(v, minlength=n)
    indptr = np.zeros(n + 1, np.int64)
    np.cumsum(counts, out=indptr[1:])
    m = len(u)
    key = np.empty(2 * m, np.int64)
    np.multiply(u, n, out=key[:m])
    key[:m] += v
    np.multiply(v, n, out=key[m:])
    key[m:] += u
    key.sort()
    indices = np.empty(2 * m, index_dtype)
    for s in range(0, 2 * m, chunk):
        indices[s:s + chunk] = key[s:s + chunk] % n
    return indptr, indices
