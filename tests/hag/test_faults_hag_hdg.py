"""Issue 12 (reliability), HAG and HDG: ``gnnprep hag``, ``hdg``, ``info`` and the hag.h5/hdg.h5 files
``precompute --hag/--hdg`` loads. One table of cases; each asserts the contract: the expected exit
code, exactly one ``Error:`` line on stderr matching the message (no traceback), no output or
temporary file left in the folder, inputs byte-identical afterwards."""

from __future__ import annotations

import hashlib
import os
import shutil

import h5py
import numpy as np
import pytest
from fixtures import run

N = 60  # nodes of the base graph store


# -- base artifacts, built once -----------------------------------------------------------------------
@pytest.fixture(scope="module")
def base(tmp_path_factory):
    from fixtures import build_artifacts

    from gnnprep.graph.ingest import IngestConfig, ingest

    tmp = tmp_path_factory.mktemp("faults_graph")
    build_artifacts(tmp, N, 200, 4, seed=7, hag_capacity=20,
                    specs=(("shells", "hop-shells:2,cap=3"), ("walk", "random-walk:walks=4,length=3,topk=3")), hops=1)
    ingest("sample", tmp / "sample.h5", IngestConfig())  # 3,000 nodes, in-degrees up to 332
    with h5py.File(tmp / "hag.h5", "r") as f:
        assert f["agg/inputs"].shape[0] > 3, "the base HAG needs aggregation nodes"
    return tmp


def _copy(base, tmp, *names):
    for name in names:
        shutil.copy(base / name, tmp / name)
    return [tmp / n for n in names]


def _edit(path, fn):
    with h5py.File(path, "r+") as f:
        fn(f)


def _set(name, index, value):
    def fn(f):
        a = f[name][:]
        a[index] = value
        f[name][...] = a
    return fn


def _attr(name, value):
    def fn(f):
        f.attrs[name] = value
    return fn


def _replace(name, data):
    def fn(f):
        del f[name]
        f.create_dataset(name, data=data)
    return fn


def _store(edit=None, name="g.h5"):
    """Setup: a copy of the base store (edited), for a command that reads it."""
    def setup(base, tmp):
        (p,) = _copy(base, tmp, name)
        if edit:
            _edit(p, edit)
        return p
    return setup


def hdg_on(edit, spec="hop-shells:2", name="g.h5"):
    return lambda base, tmp: ["hdg", _store(edit, name)(base, tmp), "--select", spec, "-o", tmp / "out.h5"]


def hag_on(edit):
    return lambda base, tmp: ["hag", _store(edit)(base, tmp), "-o", tmp / "out.h5"]


def precompute_with(flag, name, edit):
    """``precompute g.h5 --hag/--hdg <edited copy of name>``."""
    def setup(base, tmp):
        g, art = _copy(base, tmp, "g.h5", name)
        _edit(art, edit)
        return ["precompute", g, "-o", tmp / "out.h5", "--hops", "1", "--device", "cpu", flag, art]
    return setup


def info_of(name, edit):
    def setup(base, tmp):
        (p,) = _copy(base, tmp, name)
        _edit(p, edit)
        return ["info", p]
    return setup


def same_file(kind):
    """``hag``/``hdg`` whose output is the input store: by name, through a symlink, or a hard link."""
    def setup(base, tmp):
        (g,) = _copy(base, tmp, "g.h5")
        out = g
        if kind == "symlink":
            out = tmp / "link.h5"
            os.symlink(g, out)
        elif kind == "hardlink":
            out = tmp / "hard.h5"
            os.link(g, out)
        return [g, "-o", out]
    return setup


def hag_same(kind):
    return lambda base, tmp: ["hag"] + same_file(kind)(base, tmp)


def hdg_same(kind):
    return lambda base, tmp: ["hdg"] + same_file(kind)(base, tmp) + ["--select", "hop-shells:1"]


def hdg_spec(spec, *extra):
    return lambda base, tmp: ["hdg", _store()(base, tmp), "--select", spec, "-o", tmp / "out.h5", *extra]


def _swap_first_agg_inputs_level(f):
    """Make aggregation node 0 (level 1) read aggregation node 1: not topological."""
    ins = f["agg/inputs"][:]
    ins[0, 1] = f.attrs["num_nodes"] + 1
    f["agg/inputs"][...] = ins


BIG = 10**6
# (id, setup(base, tmp) -> args, expected exit code, stderr regex; None: success)
CASES = [
    # finding 1: the output is the input store
    ("f1_hag_output_is_input", hag_same("name"), 1, r"g\.h5: is also an input of this command"),
    ("f1_hag_output_is_input_symlink", hag_same("symlink"), 1, r"link\.h5: is also an input"),
    ("f1_hag_output_is_input_hardlink", hag_same("hardlink"), 1, r"hard\.h5: is also an input"),
    ("f1_hdg_output_is_input", hdg_same("name"), 1, r"g\.h5: is also an input of this command"),
    ("f1_hdg_output_is_input_symlink", hdg_same("symlink"), 1, r"link\.h5: is also an input"),
    ("f1_hdg_output_is_input_hardlink", hdg_same("hardlink"), 1, r"hard\.h5: is also an input"),
    # finding 4: corrupt graph stores in hdg and hag
    ("f4_hdg_store_indices_beyond_n", hdg_on(_set("adj/indices", 3, N + 5)), 1,
     r"g\.h5: /adj/indices\[3\] = 65: expected a node id in \[0, 60\)"),
    ("f4_hdg_store_indices_negative", hdg_on(_set("adj/indices", 0, -2), "random-walk:walks=2,length=2,topk=2"), 1,
     r"/adj/indices\[0\] = -2: expected a node id"),
    ("f4_hdg_store_indptr_decreasing", hdg_on(_set("adj/indptr", 5, 0), "anchors:sets=2,size=3"), 1,
     r"g\.h5: /adj/indptr decreases at row"),
    ("f4_hdg_store_indptr_end", hdg_on(_set("adj/indptr", -1, 10**9)), 1, r"/adj/indptr runs from 0 to 1000000000"),
    ("f4_hag_store_indices_beyond_n", hag_on(_set("adj/indices", 7, 10**9)), 1, r"/adj/indices\[7\] = 1000000000"),
    ("f4_hag_store_indptr_decreasing", hag_on(_set("adj/indptr", 9, -1)), 1, r"/adj/indptr decreases at row"),
    ("f4_hdg_metapath_type_beyond_types", hdg_on(_set("nodes/type", 2, 99), "metapath:PAP=paper-author-paper",
                                                 "mag.h5"), 1, r"mag\.h5: /nodes/type\[2\] = 99"),
    ("f4_hdg_metapath_type_negative", hdg_on(_set("nodes/type", 0, -1), "metapath:PAP=paper-author-paper",
                                             "mag.h5"), 1, r"mag\.h5: /nodes/type\[0\] = -1"),
    ("f4_hdg_metapath_type_length", hdg_on(_replace("nodes/type", np.zeros(3, np.int16)),
                                           "metapath:PAP=paper-author-paper", "mag.h5"), 1,
     r"/nodes/type has shape \(3,\); expected \[\d+\] integer type codes"),
    ("f4_hdg_metapath_node_types_not_json", hdg_on(_attr("node_types", "{oops"), "metapath:PAP=paper-author-paper",
                                                   "mag.h5"), 1, r"'node_types' is not a JSON list"),
    ("f4_precompute_hag_inputs_beyond", precompute_with("--hag", "hag.h5", _set("agg/inputs", (0, 0), 10**7)), 1,
     r"hag\.h5: /agg/inputs\[0\] = \[.*\]; expected ids in \[0, 60\)"),
    ("f4_precompute_hag_inputs_negative", precompute_with("--hag", "hag.h5", _set("agg/inputs", (2, 1), -3)), 1,
     r"/agg/inputs\[2\] = \[.*-3\]; expected ids in"),
    ("f4_precompute_hag_inputs_not_topological", precompute_with("--hag", "hag.h5", _swap_first_agg_inputs_level), 1,
     r"/agg/inputs\[0\] = .*earlier levels"),
    ("f4_precompute_hag_level_ptr_end", precompute_with("--hag", "hag.h5", _set("agg/level_ptr", -1, BIG)), 1,
     r"/agg/level_ptr runs .*expected non-decreasing offsets from 0 to \d+"),
    ("f4_precompute_hag_level_ptr_decreasing", precompute_with("--hag", "hag.h5", _replace(
        "agg/level_ptr", np.array([0, 3, 1, 3], np.int64))), 1, r"/agg/level_ptr .*decreases"),
    ("f4_precompute_hag_adj_indices_beyond", precompute_with("--hag", "hag.h5", _set("adj/indices", 1, 10**6)), 1,
     r"hag\.h5: /adj/indices\[1\] = 1000000: expected a node id in \[0, \d+\)"),
    ("f4_precompute_hag_adj_indptr_bad", precompute_with("--hag", "hag.h5", _set("adj/indptr", 4, BIG)), 1,
     r"hag\.h5: /adj/indptr decreases at row"),
    ("f4_precompute_hag_num_nodes", precompute_with("--hag", "hag.h5", _attr("num_nodes", np.int64(7))), 1,
     r"hag\.h5: num_nodes is 7; expected 60, the nodes of .*g\.h5"),   # its attributes, checked before its arrays
    ("f4_precompute_hag_inputs_float", precompute_with("--hag", "hag.h5", _replace(
        "agg/inputs", np.zeros((2, 2)))), 1, r"/agg/inputs is float64 of shape \(2, 2\); expected \[\|VA\|, 2\] integers"),
    ("f4_precompute_hdg_ids_beyond", precompute_with("--hdg", "shells.h5", _set("levels/shell_members/ids", 4, N)), 1,
     r"shells\.h5: /levels/shell_members/ids\[4\] = 60: expected a node id in \[0, 60\)"),
    ("f4_precompute_hdg_ids_negative", precompute_with("--hdg", "walk.h5", _set("levels/topk/ids", 0, -7)), 1,
     r"walk\.h5: /levels/topk/ids\[0\] = -7"),
    ("f4_precompute_hdg_offsets_decreasing", precompute_with("--hdg", "shells.h5", _set(
        "levels/shell_members/offsets", 3, 10**6)), 1, r"/levels/shell_members/offsets decreases at row"),
    ("f4_precompute_hdg_offsets_end", precompute_with("--hdg", "walk.h5", _set("levels/topk/offsets", -1, 2)), 1,
     r"walk\.h5: /levels/topk/(offsets decreases|ids has \d+ entries; expected 2)"),
    ("f4_precompute_hdg_offsets_start", precompute_with("--hdg", "walk.h5", _set("levels/topk/offsets", 0, 1)), 1,
     r"/levels/topk/offsets runs from 1 to"),
    ("f4_precompute_hdg_weights_nan", precompute_with("--hdg", "walk.h5", _set("levels/topk/weights", 1, np.nan)), 1,
     r"walk\.h5: /levels/topk/weights has \d+ entries or non-finite values"),
    ("f4_precompute_hdg_schema_not_json", precompute_with("--hdg", "walk.h5", _attr("schema", "[1, 2")), 1,
     r"walk\.h5: root attribute 'schema' is not a JSON dict"),
    ("f4_precompute_hdg_schema_bad_kind", precompute_with("--hdg", "walk.h5", _attr(
        "schema", '{"children": [{"level": "topk", "kind": "edges"}]}')), 1, r"schema level 'topk': kind 'edges'"),
    ("f4_precompute_hdg_channels_mismatch", precompute_with("--hdg", "shells.h5", _attr("channels", '["hop1"]')), 1,
     r"root attribute 'channels' is \['hop1'\]; expected the schema's channels \['hop1', 'hop2'\]"),
    ("f4_precompute_hdg_missing_level", precompute_with("--hdg", "shells.h5", lambda f: f.__delitem__(
        "levels/shell_members")), 1, r"missing group /levels/shell_members"),
    # finding 6: option values that cannot work are usage errors
    ("f6_hdg_walks_1e8", hdg_spec("random-walk:walks=100000000,length=100000000,topk=5"), 2,
     r"Invalid value for '--select'.*walks='100000000'; expected an integer ≥ 1 and ≤ 1,000,000"),
    ("f6_hdg_walks_1e8_literal", hdg_spec("random-walk:walks=1e8,length=1e8,topk=5"), 2,
     r"walks='1e8'; expected an integer ≥ 1"),
    ("f6_hdg_walk_steps", hdg_spec("random-walk:walks=2000,length=1000,topk=5"), 2,
     r"walks·length = 2,000,000 steps per node; expected at most 1,000,000"),
    ("f6_hdg_topk_huge", hdg_spec("random-walk:walks=2,length=2,topk=" + "9" * 40), 2, r"topk='9+'; expected an integer"),
    ("f6_hdg_seed_beyond_64_bits", hdg_spec("hop-shells:1", "--seed", str(2**64)), 2, r"Invalid value for '--seed'"),
    ("f6_hdg_seed_64_bits_ok", hdg_spec("random-walk:walks=2,length=2,topk=2", "--seed", str(2**64 - 1)), 0, None),
    ("f6_hdg_seed_negative", hdg_spec("hop-shells:1", "--seed", "-1"), 2, r"Invalid value for '--seed'"),
    ("f6_hdg_hop_shells_k_huge", hdg_spec("hop-shells:100000"), 2, r"K='100000'; expected an integer ≥ 1 and ≤ 64"),
    ("f6_hdg_anchor_hops_huge", hdg_spec("anchors:sets=2,size=2,hops=1000"), 2, r"hops='1000'"),
    ("f6_hdg_metapath_name_clash", hdg_spec("metapath:A=paper-paper,A_members=paper-paper"), 2,
     r"metapath name 'A_members' given twice or clashes"),
    ("f6_hdg_metapath_name_slash", hdg_spec("metapath:a/b=paper-paper"), 2, r"metapath name 'a/b'"),
    ("f6_hag_capacity_inf", lambda base, tmp: ["hag", _store()(base, tmp), "--capacity", "inf", "-o", tmp / "out.h5"],
     2, r"Invalid value for '--capacity'"),
    # finding 7: a window beyond any in-list is refused above 1024 and clipped below it
    ("f7_hag_window_1e8", lambda base, tmp: ["hag", _store()(base, tmp), "--window", "100000000", "-o",
                                             tmp / "out.h5"], 2, r"Invalid value for '--window'"),
    ("f7_hag_window_clipped", lambda base, tmp: ["hag", _store()(base, tmp), "--window", "1024", "-o",
                                                 tmp / "out.h5"], 0, None),
    ("f7_hag_window_1024_on_3000_nodes", lambda base, tmp: ["hag", _store(name="sample.h5")(base, tmp), "--window",
                                                            "1024", "-o", tmp / "out.h5"], 0, None),
    # finding 8: newer or non-integer format versions
    ("f8_precompute_hag_newer", precompute_with("--hag", "hag.h5", _attr("format_version", 2)), 1,
     r"hag\.h5: gnnprep\.hag format_version 2 is newer than this gnnprep reads \(1\); upgrade gnnprep"),
    ("f8_precompute_hag_string_version", precompute_with("--hag", "hag.h5", _attr("format_version", "1")), 1,
     r"hag\.h5: root attribute 'format_version' is '1'; expected a positive integer"),
    ("f8_precompute_hdg_newer", precompute_with("--hdg", "shells.h5", _attr("format_version", 7)), 1,
     r"shells\.h5: gnnprep\.hdg format_version 7 is newer"),
    ("f8_precompute_hdg_string_version", precompute_with("--hdg", "walk.h5", _attr("format_version", "two")), 1,
     r"walk\.h5: root attribute 'format_version' is 'two'; expected a positive integer"),
    ("f8_info_hag_newer", info_of("hag.h5", _attr("format_version", 3)), 1, r"format_version 3 is newer"),
    # info on odd artifacts: exit 0 or one line, never a traceback
    ("info_graph_string_count", info_of("g.h5", _attr("num_classes", "many")), 1,
     r"g\.h5: attribute 'num_classes' is 'many'; expected a count"),
    ("info_graph_indptr_decreasing", info_of("g.h5", _set("adj/indptr", 3, -5)), 1,
     r"g\.h5: /adj/indptr is not a CSR pointer"),
    ("info_graph_node_types_not_json", info_of("mag.h5", _attr("node_types", "x")), 1, r"'node_types' is not a JSON list"),
    ("info_graph_node_type_beyond", info_of("mag.h5", _set("nodes/type", 1, 40)), 1, r"/nodes/type\[1\] = 40"),
    ("info_hag_string_count", info_of("hag.h5", _attr("num_agg", "lots")), 1, r"attribute 'num_agg' is 'lots'"),
    ("info_hag_array_attr", info_of("hag.h5", _attr("aggregate", np.array([b"set", b"x"]))), 0, None),
    ("info_hdg_schema_not_json", info_of("shells.h5", _attr("schema", "{")), 1, r"'schema' is not a JSON dict"),
    ("info_hdg_schema_level_not_object", info_of("shells.h5", _attr("schema", '{"children": [3]}')), 1,
     r"schema has a level that is not an object"),
    ("info_hdg_missing_level", info_of("walk.h5", lambda f: f.__delitem__("levels/topk")), 1,
     r"missing group /levels/topk"),
    ("info_features_plan_not_json", info_of("f.h5", _attr("plan", "nope")), 1, r"f\.h5: attribute 'plan' is not a JSON"),
    ("info_features_hops_string", info_of("f.h5", _attr("hops", "3")), 1, r"f\.h5: attribute 'hops' is '3'"),
    ("info_features_no_plan_keys", info_of("f.h5", _attr("plan", "{}")), 0, None),
    ("info_string_format_version", info_of("g.h5", _attr("format_version", "1")), 1,
     r"'format_version' is '1'; expected a positive integer"),
]


def _digest(folder):
    return {p.name: (os.readlink(p) if p.is_symlink() else hashlib.sha256(p.read_bytes()).hexdigest())
            for p in sorted(folder.iterdir()) if not p.is_dir() or p.is_symlink()}


@pytest.mark.parametrize("setup, code, message", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_fault(base, tmp_path, setup, code, message):
    work = tmp_path / "w"
    work.mkdir()
    args = setup(base, work)
    before = _digest(work)
    r = run(args)
    assert r.exit_code == code, (r.exit_code, r.stderr, r.stdout)
    assert "Traceback" not in r.stderr + r.stdout
    after = _digest(work)
    if message is None:
        assert r.stderr.strip() == "" or not r.stderr.startswith("Error")
        assert {k: v for k, v in after.items() if k in before} == before  # inputs unchanged
        assert not [n for n in after if ".tmp-" in n or ".work-" in n]
        return
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: "), r.stderr
    import re

    assert re.search(message, lines[0]), lines[0]
    assert after == before  # nothing written, nothing left, inputs byte-identical


def test_the_table_is_large_enough():
    assert len(CASES) >= 20 and len({c[0] for c in CASES}) == len(CASES)
