"""Issue 16: user-defined operators (``--operator-file ops.py:name``) compiled to the fused kernels,
against a naive reference that materialises per-edge messages and scatters them (float64), on
random graphs with isolated nodes, self-loops and duplicates in the input, directed and symmetric,
weighted and unweighted; the planner's factor classification; and bad operator files."""

import json

import h5py
import numpy as np
import pytest
from fixtures import assert_close, make_store, run, run_json

from gnnprep.core.errors import GnnprepError
from gnnprep.precompute import user_operators as udf
from gnnprep.precompute.config import PrecomputeConfig
from gnnprep.precompute.features import FeatureStore
from gnnprep.precompute.run import precompute

OPS = '''
import numpy as np

def gcn(src_deg, dst_deg, w):
    """source x destination x edge: w / sqrt(d_u d_v)"""
    return w / np.sqrt(src_deg * dst_deg)
gcn.loop = 1.0

def harmonic(src_deg, dst_deg, w):
    """not a product of factors: computed per entry"""
    return 2.0 / (src_deg + dst_deg)

def similar_loop(src_deg, dst_deg, w):
    """not a product of factors, with a self-loop: the loop's coefficient in the column scaling"""
    return w * np.exp(-np.abs(np.log(src_deg) - np.log(dst_deg))) + 0.1
similar_loop.loop = 1.5

def mean_src(src_deg, dst_deg, w):
    return np.log1p(src_deg) * w
mean_src.reduce = "mean"
mean_src.loop = 2.0

def log_weight(src_deg, dst_deg, w):
    return np.log1p(w) / dst_deg

def constant(src_deg, dst_deg, w):
    return np.full(len(w), 0.5)

def max_gcn(src_deg, dst_deg, w):
    return w / np.sqrt(src_deg * dst_deg)
max_gcn.reduce = "max"
max_gcn.loop = 1.0

def max_negative_loop(src_deg, dst_deg, w):
    """max, a negative destination factor and a self-loop: per entry, the loop in the column scaling"""
    return -(dst_deg ** -0.5) * src_deg * w
max_negative_loop.reduce = "max"
max_negative_loop.loop = 1.0

def max_negative(src_deg, dst_deg, w):
    """a negative destination factor cannot leave the max: per entry"""
    return -(dst_deg ** -0.5) * src_deg
max_negative.reduce = "max"
'''


def write_ops(tmp_path, text=OPS, name="ops.py"):
    p = tmp_path / name
    p.write_text(text)
    return p


def add_weights(store_path, rng):
    """Symmetric positive weights w(u, v) = w(v, u) on an ingested store."""
    with h5py.File(store_path, "r+") as f:
        indptr, indices = f["adj/indptr"][:], f["adj/indices"][:].astype(np.int64)
        dst = np.repeat(np.arange(len(indptr) - 1), np.diff(indptr))
        lo, hi = np.minimum(dst, indices), np.maximum(dst, indices)
        w = (0.25 + ((lo * 7919 + hi * 104729) % 17) / 4.0).astype(np.float32)
        f.create_dataset("adj/weights", data=w)


def message_reference(store_path, fn, loop, reduce, hops):
    """Hops the way a UDF runs: per edge u -> v (and the self-loop of weight ``loop``) the message
    c(d̃_u, d̃_v, w) x_u (an |E| x d array), then a scatter-sum, -mean or -max into v (float64)."""
    with h5py.File(store_path) as f:
        indptr, indices = f["adj/indptr"][:], f["adj/indices"][:].astype(np.int64)
        x = f["nodes/features"][:].astype(np.float64)
        w = f["adj/weights"][:].astype(np.float64) if "adj/weights" in f else np.ones(len(indices))
    n = len(indptr) - 1
    dst, src = np.repeat(np.arange(n), np.diff(indptr)), indices
    din = np.bincount(dst, weights=w, minlength=n) + loop
    dout = np.bincount(src, weights=w, minlength=n) + loop
    if loop:
        src, dst = np.concatenate([src, np.arange(n)]), np.concatenate([dst, np.arange(n)])
        w = np.concatenate([w, np.full(n, loop)])
    coef = fn(dout[src], din[dst], w)
    out = [x]
    for _ in range(hops):
        messages = out[-1][src] * coef[:, None]
        if reduce == "max":
            h = np.full_like(x, -np.inf)
            np.maximum.at(h, dst, messages)
            h[np.isinf(h)] = 0.0
        else:
            h = np.zeros_like(x)
            np.add.at(h, dst, messages)
            if reduce == "mean":
                h /= np.maximum(np.bincount(dst, minlength=n), 1)[:, None]
        out.append(h)
    return out


def user_function(tmp_path, name):
    return udf.load(f"{write_ops(tmp_path)}:{name}")


NAMES = ["gcn", "harmonic", "similar_loop", "mean_src", "log_weight", "constant", "max_gcn", "max_negative",
         "max_negative_loop"]


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("directed,weighted", [(False, False), (False, True), (True, False), (True, True)])
@pytest.mark.parametrize("blocks", [(1, 1, 1), (2, 3, 2)])
def test_user_operators_match_the_per_edge_message_reference(tmp_path, rng, name, directed, weighted, blocks):
    store = make_store(tmp_path, rng, n=70, d=5, directed=directed)[0]
    if weighted:
        add_weights(store, rng)
    fn = user_function(tmp_path, name)
    out = tmp_path / "f.h5"
    precompute(store, out, PrecomputeConfig(hops=3, operators=(), operator_files=(f"{fn.path}:{name}",),
                                            blocks=blocks, device="cpu"))
    ref = message_reference(store, fn.fn, fn.loop, fn.reduce, 3)
    with FeatureStore(out) as fs:
        assert fs.operators() == [name]
        for k in range(4):
            assert_close(fs.hop(k, name)[:], ref[k], rtol=2e-5)


def test_rows_labeled_and_a_builtin_beside_a_user_operator(tmp_path, rng):
    store = make_store(tmp_path, rng, n=80, d=4)[0]
    fn = user_function(tmp_path, "gcn")
    full, lab = tmp_path / "all.h5", tmp_path / "lab.h5"
    cfg = dict(hops=3, operators=("sym",), operator_files=(f"{fn.path}:gcn",), device="cpu")
    precompute(store, full, PrecomputeConfig(**cfg))
    precompute(store, lab, PrecomputeConfig(rows="labeled", **cfg))
    with FeatureStore(full) as a, FeatureStore(lab) as b:
        assert a.operators() == ["sym", "gcn"]
        rows = b.f["rows"][:]
        for k in range(4):
            # the user function w / sqrt(d̃_u d̃_v) with loop 1 is sym: the same numbers
            np.testing.assert_allclose(a.hop(k, "gcn")[:], a.hop(k, "sym")[:], rtol=1e-5, atol=1e-6)
            np.testing.assert_array_equal(b.hop(k, "gcn")[:], a.hop(k, "gcn")[:][rows])


def _classify(tmp_path, store, name):
    from gnnprep.graph.store import GraphStore

    fn = user_function(tmp_path, name)
    with GraphStore(store) as s:
        return udf.classify(fn, udf.degrees(s, fn.loop), udf.weight_sample(s))


@pytest.mark.parametrize("weighted", [False, True])
def test_classification(tmp_path, rng, weighted):
    store = make_store(tmp_path, rng, n=60)[0]
    if weighted:
        add_weights(store, rng)
    f = _classify(tmp_path, store, "gcn")
    assert (f.source, f.destination, f.separable) == (True, True, True)
    # w / sqrt(d̃_u d̃_v): the edge factor is the stored weight itself
    assert f.edge == weighted and f.values == ("stored" if weighted else "none")
    f = _classify(tmp_path, store, "harmonic")
    assert not f.separable and f.values == "entry"
    f = _classify(tmp_path, store, "mean_src")
    assert (f.source, f.destination, f.separable) == (True, False, True)
    f = _classify(tmp_path, store, "log_weight")
    assert f.values == ("weight" if weighted else "none")   # e(w) = log(1 + w): CSR values of its own
    f = _classify(tmp_path, store, "constant")
    assert (f.source, f.destination, f.edge, f.values) == (False, False, False, "none")


def test_provenance_records_the_source_and_info_prints_it(tmp_path, rng):
    store = make_store(tmp_path, rng, n=40)[0]
    ops = write_ops(tmp_path)
    out = tmp_path / "f.h5"
    r = run(["precompute", str(store), "-o", str(out), "--hops", "1", "--operator", "sym",
             "--operator-file", f"{ops}:gcn", "--operator-file", f"{ops}:harmonic"])
    assert r.exit_code == 0, r.output
    with h5py.File(out) as f:
        src = json.loads(f.attrs["operator_sources"])
    assert set(src) == {"gcn", "harmonic"}
    import hashlib

    assert src["gcn"]["sha256"] == hashlib.sha256(ops.read_bytes()).hexdigest()
    assert src["gcn"]["source"] == OPS and src["gcn"]["loop"] == 1.0
    assert src["harmonic"]["factors"]["values"] == "entry"
    info = run(["info", str(out)])
    assert info.exit_code == 0 and "gcn" in info.output and "sha256" in info.output
    assert "return w / np.sqrt(src_deg * dst_deg)" in info.output
    d = run_json(["info", str(out), "--json"])
    assert "gcn" in d["operator_sources"]


BAD = [
    ("def f(s, d, w)\n    return w\n", "f", "ops.py:1: syntax error"),
    ("def g(s, d, w):\n    return w\n", "f", "no function 'f'"),
    ("def f(s, d):\n    return d\n", "f", "expected a function of three arguments"),
    ("import numpy as np\ndef f(s, d, w):\n    return np.log(s - s)\n", "f", "returned -inf"),
    ("import numpy as np\ndef f(s, d, w):\n    return w * np.nan\n", "f", "returned nan"),
    ("import numpy as np\ndef f(s, d, w):\n    return np.ones((len(w), 2))\n", "f", "returned shape"),
    ("def f(s, d, w):\n    return 1.0\n", "f", "returned shape ()"),
    ("def f(s, d, w):\n    raise ValueError('no')\n", "f", "raised ValueError: no (line 2)"),
    ("def f(s, d, w):\n    return w\nf.reduce = 'min'\n", "f", "f.reduce = 'min'; expected one of sum, mean, max"),
    ("def f(s, d, w):\n    return w\nf.loop = -1\n", "f", "expected a finite number >= 0"),
    ("x = 1 / 0\n", "f", "running the operator file raised ZeroDivisionError"),
    ("def sym(s, d, w):\n    return w\n", "sym", "built-in operator's name"),
    ("import numpy as np\ndef f(s, d, w):\n    return (w != 2) / (s + d)\nf.loop = 2.0\n", "f",
     "is 0 for some node's self-loop"),
]


@pytest.mark.parametrize("text,name,message", BAD)
def test_a_bad_operator_file_is_one_error_line_and_no_output(tmp_path, rng, text, name, message):
    store = make_store(tmp_path, rng, n=30)[0]
    ops = write_ops(tmp_path, text)
    out = tmp_path / "f.h5"
    r = run(["precompute", str(store), "-o", str(out), "--operator-file", f"{ops}:{name}"])
    assert r.exit_code == 1, r.output
    lines = r.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: ") and message in lines[0], r.output
    assert "ops.py" in lines[0]
    assert "Traceback" not in r.output
    assert not list(tmp_path.glob("f.h5*"))


def test_missing_file_and_bad_spec(tmp_path, rng):
    store = make_store(tmp_path, rng, n=30)[0]
    # a file that cannot be read: exit 1; a value that is not PATH:NAME is a usage error, refused
    # before any work (exit 2), for --hdg-weight too, each naming its own option
    for option, spec, code, message in [("--operator-file", f"{tmp_path}/nope.py:f", 1, "cannot read the operator file"),
                                        ("--operator-file", "ops.py", 2, "'--operator-file': 'ops.py': expected PATH:NAME"),
                                        ("--hdg-weight", "w.py", 2, "'--hdg-weight': 'w.py': expected PATH:NAME")]:
        r = run(["precompute", str(store), "-o", str(tmp_path / "f.h5"), option, spec])
        assert r.exit_code == code and message in r.output, r.output
    with pytest.raises(GnnprepError, match="not a function name"):
        udf.load("ops.py:1x")


def test_a_changed_operator_file_does_not_resume_the_old_partial_output(tmp_path, rng):
    from gnnprep.precompute.run import run_key as _run_key  # noqa: F401 (the key includes the file's hash)

    store = make_store(tmp_path, rng, n=30)[0]
    ops = write_ops(tmp_path)
    out = tmp_path / "f.h5"
    a = run_json(["precompute", str(store), "-o", str(out), "--operator-file", f"{ops}:gcn", "--hops", "1", "--json"])
    with FeatureStore(out) as fs:
        first = fs.hop(1, "gcn")[:]
    ops.write_text(OPS.replace("return w / np.sqrt(src_deg * dst_deg)", "return 2 * w / np.sqrt(src_deg * dst_deg)", 1))
    run_json(["precompute", str(store), "-o", str(out), "--operator-file", f"{ops}:gcn", "--hops", "1", "--json"])
    with FeatureStore(out) as fs:
        np.testing.assert_allclose(fs.hop(1, "gcn")[:], 2 * first, rtol=1e-6)
    assert a["operators"] == ["gcn"]


BUILTINS = {  # built-in operator: (its coefficient c(d̃_u, d̃_v, w), loop)
    "sym": (lambda s, d, w: w / np.sqrt(s * d), 1.0),
    "rw": (lambda s, d, w: w / d, 1.0),
    "sym-noloop": (lambda s, d, w: w / np.sqrt(s * d), 0.0),
    "norm:a=0.3,b=0.9,loop=2": (lambda s, d, w: w * d ** -0.3 * s ** -0.9, 2.0),
}


@pytest.mark.parametrize("name", list(BUILTINS) + ["ppr:alpha=0.2,k=4"])
@pytest.mark.parametrize("weighted", [False, True])
def test_builtin_operators_match_the_per_edge_message_reference(tmp_path, rng, name, weighted):
    store = make_store(tmp_path, rng, n=70, d=5)[0]
    if weighted:
        add_weights(store, rng)
    out = tmp_path / "f.h5"
    precompute(store, out, PrecomputeConfig(hops=3, operators=(name,), blocks=(1, 2, 2), device="cpu"))
    if name.startswith("ppr"):
        # z <- (1 - α) Σ_messages + α h, K times per hop, the messages those of sym
        def diffuse(h):
            z = h
            for _ in range(4):
                z = 0.8 * _scatter(store, BUILTINS["sym"][0], 1.0, z) + 0.2 * h
            return z
        ref = message_reference(store, BUILTINS["sym"][0], 1.0, "sum", 0)
        for _ in range(3):
            ref.append(diffuse(ref[-1]))
    else:
        fn, loop = BUILTINS[name]
        ref = message_reference(store, fn, loop, "sum", 3)
    with FeatureStore(out) as fs:
        for k in range(4):
            assert_close(fs.hop(k, name)[:], ref[k], rtol=2e-5)


def _scatter(store_path, fn, loop, h):
    """One sum-reduce message pass over ``h`` (float64), as message_reference does per hop."""
    with h5py.File(store_path) as f:
        indptr, indices = f["adj/indptr"][:], f["adj/indices"][:].astype(np.int64)
        w = f["adj/weights"][:].astype(np.float64) if "adj/weights" in f else np.ones(len(indices))
    n = len(indptr) - 1
    dst, src = np.repeat(np.arange(n), np.diff(indptr)), indices
    din = np.bincount(dst, weights=w, minlength=n) + loop
    dout = np.bincount(src, weights=w, minlength=n) + loop
    src, dst = np.concatenate([src, np.arange(n)]), np.concatenate([dst, np.arange(n)])
    w = np.concatenate([w, np.full(n, loop)])
    out = np.zeros_like(h)
    np.add.at(out, dst, h[src] * fn(dout[src], din[dst], w)[:, None])
    return out


AFFINITY = "import numpy as np\ndef affinity(member_deg, root_deg, w):\n    return w * np.exp(-np.abs(member_deg - root_deg) / 4)\n"


def _affinity(m, r, w):
    return w * np.exp(-np.abs(m - r) / 4)


@pytest.mark.parametrize("kind", ["walks", "anchors"])
@pytest.mark.parametrize("reduce", ["mean", "sum", "max"])
def test_hdg_weight_re_weights_the_members_of_every_vertex_level(tmp_path, rng, kind, reduce):
    """precompute --hdg H --hdg-weight ops.py:affinity: each member's weight becomes
    c(d_member, d_root, w); checked by a plain loop over the nodes (walks: members of node v;
    anchors: members of anchor set i of node i // S, then the reduce over the S sets)."""
    from gnnprep.graph.store import GraphStore
    from gnnprep.hdg.file import read_hdg, write_hdg
    from gnnprep.hdg.select import AnchorsSelect, RandomWalkSelect, select, select_spec

    store = make_store(tmp_path, rng, n=50, d=3)[0]
    ops = write_ops(tmp_path, AFFINITY)
    sel = RandomWalkSelect(6, 3, 4) if kind == "walks" else AnchorsSelect(3, 4)
    with GraphStore(store) as g:
        h = select(g.indptr(), g.indices(), sel, seed=5)
        write_hdg(h, tmp_path / "h.h5", {"command": "test"}, sel.name, select_spec(sel), 5, g.fingerprint, 0, 0)
        deg = np.diff(g.indptr()).astype(np.float64)
    out = tmp_path / "f.h5"
    r = run(["precompute", str(store), "-o", str(out), "--hops", "1", "--hdg", str(tmp_path / "h.h5"),
             "--hdg-reduce", reduce, "--hdg-weight", f"{ops}:affinity"])
    assert r.exit_code == 0, r.output
    h, _ = read_hdg(tmp_path / "h.h5")
    lvl = h.roots[0]
    with FeatureStore(out) as fs:
        x = fs.hop(1)[:].astype(np.float64)
        got = fs.hop(1, lvl.name)[:]
        assert json.loads(fs.f.attrs["operator_sources"])["hdg-weight:affinity"]["function"] == "affinity"

    def combine(ids, w, root):
        w2 = _affinity(deg[ids], deg[root], w)
        if not len(ids):
            return np.zeros(x.shape[1])
        if reduce == "max":
            return (w2[:, None] * x[ids]).max(0)
        s = (w2[:, None] * x[ids]).sum(0)
        return s / (w2.sum() if w2.sum() else 1) if reduce == "mean" else s

    ref = np.zeros_like(x)
    for v in range(h.num_nodes):
        if kind == "walks":
            a, b = lvl.offsets[v], lvl.offsets[v + 1]
            w = lvl.weights[a:b].astype(np.float64) if lvl.weights is not None else np.ones(b - a)
            ref[v] = combine(lvl.ids[a:b], w, v)
        else:
            members = lvl.child
            sets = []
            for i in range(v * lvl.fanout, (v + 1) * lvl.fanout):
                a, b = members.offsets[i], members.offsets[i + 1]
                w = members.weights[a:b].astype(np.float64) if members.weights is not None else np.ones(b - a)
                if b > a or reduce != "max":   # (an empty set takes no part in a max)
                    sets.append(combine(members.ids[a:b], w, v))
            sets = np.array(sets)
            ref[v] = (sets.max(0) if len(sets) else 0.0) if reduce == "max" else \
                sets.mean(0) if reduce == "mean" else sets.sum(0)
    assert_close(got, ref, rtol=1e-5)


def test_hdg_weight_needs_an_hdg_and_no_reduce_or_loop(tmp_path, rng):
    store = make_store(tmp_path, rng, n=30)[0]
    ops = write_ops(tmp_path)
    r = run(["precompute", str(store), "-o", str(tmp_path / "f.h5"), "--hdg-weight", f"{ops}:gcn"])
    assert r.exit_code == 1 and "give --hdg too" in r.output


def test_train_reads_a_user_operators_channel(tmp_path):
    assert run(["ingest", "sample", "-o", str(tmp_path / "s.h5")]).exit_code == 0
    ops = write_ops(tmp_path)
    r = run(["precompute", str(tmp_path / "s.h5"), "-o", str(tmp_path / "f.h5"), "--hops", "2", "--operator",
             "sym,ppr:alpha=0.1,k=3", "--operator-file", f"{ops}:max_gcn"])
    assert r.exit_code == 0, r.output
    d = run_json(["train", "sign", str(tmp_path / "f.h5"), "-o", str(tmp_path / "run"), "--operator",
                  "sym,max_gcn,ppr:alpha=0.1,k=3", "--epochs", "3", "--json"])
    assert d["epochs_run"] == 3 and 0 <= d["test_acc"] <= 1
    with open(tmp_path / "run" / "metrics.json") as f:
        assert json.load(f)["config"]["operators"] == ["sym", "max_gcn", "ppr:alpha=0.1,k=3"]


def test_changed_weights_change_the_run_key_and_info_says_weighted(tmp_path, rng):
    from gnnprep.graph.store import GraphStore
    from gnnprep.precompute.run import prepare_job as _prepare
    from gnnprep.precompute.run import run_key as _run_key

    store = make_store(tmp_path, rng, n=40)[0]
    add_weights(store, rng)
    cfg = PrecomputeConfig(hops=1, device="cpu")

    def key():
        with GraphStore(store) as s:
            return _run_key(s, _prepare(s, cfg, "cpu", "numba"))

    before = key()
    with h5py.File(store, "r+") as f:
        f["adj/weights"][0] *= 2
    assert key() != before
    assert "weighted" in run(["info", str(store)]).output


@pytest.mark.parametrize("weighted", [False, True])
def test_a_node_order_moves_the_weights_and_values_with_their_entries_bitwise(tmp_path, rng, weighted):
    """--reorder community on a weighted store (the weights permuted with their entries) and for user
    operators with CSR values: the same bits as the stored order (each row sums the same terms in the
    same order)."""
    store = make_store(tmp_path, rng, n=90, d=5)[0]
    if weighted:
        add_weights(store, rng)
    ops = write_ops(tmp_path)
    files = tuple(f"{ops}:{name}" for name in ("harmonic", "log_weight", "max_gcn"))
    outs = {}
    for order in ("none", "community"):
        outs[order] = tmp_path / f"{order}.h5"
        r = precompute(store, outs[order], PrecomputeConfig(hops=3, operators=("sym", "rw"), operator_files=files,
                                                            reorder=order, device="cpu"))
        assert (r.reorder is not None and r.reorder["used"]) == (order == "community")
    with FeatureStore(outs["none"]) as a, FeatureStore(outs["community"]) as b:
        for name in ("sym", "rw", "harmonic", "log_weight", "max_gcn"):
            for k in range(4):
                assert a.hop(k, name)[:].tobytes() == b.hop(k, name)[:].tobytes(), (name, k)


@pytest.mark.parametrize("weighted", [False, True])
def test_the_torch_path_runs_user_operators_like_the_cpu_kernel(tmp_path, rng, weighted):
    """The torch backend (the CUDA path, here on the CPU) reads the same CSR values: the stored
    weights, none, or a user operator's (per entry, with a self-loop in the column scaling)."""
    store = make_store(tmp_path, rng, n=70, d=4)[0]
    if weighted:
        add_weights(store, rng)
    ops = write_ops(tmp_path)
    files = tuple(f"{ops}:{name}" for name in ("gcn", "harmonic", "similar_loop", "log_weight", "constant"))
    a, b = tmp_path / "numba.h5", tmp_path / "torch.h5"
    precompute(store, a, PrecomputeConfig(hops=2, operators=(), operator_files=files, device="cpu"))
    precompute(store, b, PrecomputeConfig(hops=2, operators=(), operator_files=files, device="cpu", backend="torch"))
    with FeatureStore(a) as fa_, FeatureStore(b) as fb:
        for name in ("gcn", "harmonic", "similar_loop", "log_weight", "constant"):
            for k in range(3):
                assert_close(fb.hop(k, name)[:], fa_.hop(k, name)[:], rtol=1e-5)
    ops_max = write_ops(tmp_path, "def m(s, d, w):\n    return w\nm.reduce = 'max'\n", "max.py")
    with pytest.raises(GnnprepError, match="runs on the CPU kernel"):
        precompute(store, tmp_path / "c.h5", PrecomputeConfig(hops=1, operators=(), operator_files=(f"{ops_max}:m",),
                                                              device="cpu", backend="torch"))


def test_device_auto_runs_a_max_operator_on_the_cpu_where_a_gpu_is_found(tmp_path, rng, monkeypatch):
    """--device auto on a machine with a GPU: a ``reduce = 'max'`` operator (CPU kernel only) runs the
    whole job on the CPU, with a warning, instead of refusing what the user did not pin (seen on the
    lent GPU machine); an explicit --device cuda is still refused with the one line."""
    from gnnprep.core import device as devices

    store = make_store(tmp_path, rng, n=50, d=3)[0]
    ops_max = write_ops(tmp_path, "def m(s, d, w):\n    return w\nm.reduce = 'max'\n", "max.py")
    files = (f"{ops_max}:m",)
    plain = precompute(store, tmp_path / "cpu.h5", PrecomputeConfig(hops=2, operator_files=files, device="cpu"))
    monkeypatch.setattr(devices, "resolve", lambda name: "cuda" if name in ("auto", "cuda") else name)
    said = []
    auto = precompute(store, tmp_path / "auto.h5", PrecomputeConfig(hops=2, operator_files=files,
                                                                    memory_budget=1 << 30), warn=said.append)
    assert auto.plan.device == "cpu" and said == ["--device auto runs this on the CPU: "
                                                  f"{ops_max}: m.reduce = 'max' runs on the CPU kernel"]
    with FeatureStore(tmp_path / "cpu.h5") as a, FeatureStore(tmp_path / "auto.h5") as b:
        for name in plain.operators:
            for k in range(3):
                assert a.hop(k, name)[:].tobytes() == b.hop(k, name)[:].tobytes()
    with pytest.raises(GnnprepError, match="runs on the CPU kernel; use --device cpu"):
        precompute(store, tmp_path / "c.h5", PrecomputeConfig(hops=1, operator_files=files, device="cuda",
                                                              memory_budget=1 << 30))
    assert not (tmp_path / "c.h5").exists()


def test_a_hag_runs_a_separable_user_operator_and_refuses_per_entry_values(tmp_path, rng):
    store = make_store(tmp_path, rng, n=80, d=4)[0]
    ops = write_ops(tmp_path)
    assert run(["hag", str(store), "-o", str(tmp_path / "hag.h5")]).exit_code == 0
    plain, through = tmp_path / "plain.h5", tmp_path / "hag-out.h5"
    files = (f"{ops}:gcn", f"{ops}:mean_src")
    precompute(store, plain, PrecomputeConfig(hops=2, operators=(), operator_files=files, device="cpu"))
    precompute(store, through, PrecomputeConfig(hops=2, operators=(), operator_files=files, device="cpu",
                                                hag=str(tmp_path / "hag.h5")))
    with FeatureStore(plain) as a, FeatureStore(through) as b:
        for name in ("gcn", "mean_src"):
            for k in range(3):
                assert_close(b.hop(k, name)[:], a.hop(k, name)[:], rtol=1e-5)
    r = run(["precompute", str(store), "-o", str(tmp_path / "x.h5"), "--operator-file", f"{ops}:harmonic",
             "--hag", str(tmp_path / "hag.h5")])
    assert r.exit_code == 1 and "per-entry values or reduce max" in r.output


def test_an_interrupted_run_with_user_operators_and_ppr_resumes_to_the_same_bytes(tmp_path, rng, monkeypatch):
    from fixtures import interrupted_precompute

    store = make_store(tmp_path, rng, n=70, d=5)[0]
    add_weights(store, rng)
    ops = write_ops(tmp_path)
    cfg = dict(hops=3, operators=("ppr:alpha=0.2,k=3",), operator_files=(f"{ops}:harmonic", f"{ops}:max_gcn"),
               blocks=(1, 2, 3), device="cpu")
    whole, resumed = tmp_path / "whole.h5", tmp_path / "resumed.h5"
    precompute(store, whole, PrecomputeConfig(**cfg))
    interrupted_precompute(monkeypatch, store, resumed, **cfg)
    r = precompute(store, resumed, PrecomputeConfig(**cfg))
    assert r.resumed_units >= 1
    with FeatureStore(whole) as a, FeatureStore(resumed) as b:
        for name in ("ppr:alpha=0.2,k=3", "harmonic", "max_gcn"):
            for k in range(4):
                assert a.hop(k, name)[:].tobytes() == b.hop(k, name)[:].tobytes(), (name, k)


def test_hdg_weight_messages_name_its_own_contract(tmp_path, rng):
    """--hdg-weight's function is NAME(member_deg, root_deg, w): its failures say so (they named
    --operator-file's src_deg and dst_deg; dogfood finding)."""
    from gnnprep.graph.store import GraphStore
    from gnnprep.hdg.file import write_hdg
    from gnnprep.hdg.select import RandomWalkSelect, select, select_spec

    store = make_store(tmp_path, rng, n=50, d=3)[0]
    ops = write_ops(tmp_path, "import numpy as np\ndef bad(member_deg, root_deg, w):\n    return w * np.nan\n")
    sel = RandomWalkSelect(6, 3, 4)
    with GraphStore(store) as g:
        h = select(g.indptr(), g.indices(), sel, seed=5)
        write_hdg(h, tmp_path / "h.h5", {"command": "test"}, sel.name, select_spec(sel), 5, g.fingerprint, 0, 0)
    for spec, message in [(f"{ops}:bad", "bad(member_deg, root_deg, w) returned nan for member_deg="),
                          (f"{ops}:nope", "no function 'nope' in the --hdg-weight file")]:
        r = run(["precompute", str(store), "-o", str(tmp_path / "f.h5"), "--hops", "1", "--hdg", str(tmp_path / "h.h5"),
                 "--hdg-weight", spec])
        assert r.exit_code == 1 and message in r.output, r.output
