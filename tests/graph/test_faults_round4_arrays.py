"""Issue 32, line 16 (part): ``from_arrays`` refuses a bad argument with one ArgumentError (a
GnnprepError, also a ValueError and a TypeError) naming it, writes nothing, and never coerces
silently: a 0/1 integer train mask is not read as the node ids 0 and 1, ``num_nodes=5.9`` is not
truncated to 5, ``order='bogus'`` is not written into the store."""

from __future__ import annotations

import numpy as np
import pytest

from gnnprep.core.errors import ArgumentError, GnnprepError
from gnnprep.graph import from_arrays
from gnnprep.graph.sources.arrays import check_options

E = np.array([[0, 1, 2, 3], [1, 2, 3, 0]])

# (keyword arguments of from_arrays beside edge_index, the argument the error names)
CASES = {
    "int_mask_01": ({"splits": {"train_mask": np.array([1, 0, 1, 0])}}, "splits['train']"),
    "int_mask_01_num_nodes": ({"splits": {"train": np.array([0, 0, 1, 1, 0])}, "num_nodes": 5}, "splits['train']"),
    "int_mask_01_from_x": ({"x": np.ones((4, 2)), "splits": {"val_mask": np.array([0, 1, 1, 0])}}, "splits['valid']"),
    "float_mask": ({"splits": {"test_mask": np.array([1.0, 0.0, 0.0, 1.0])}}, "splits['test']"),
    "mask_2d": ({"splits": {"train": np.ones((2, 2), dtype=bool)}}, "splits['train']"),
    "splits_not_a_mapping": ({"splits": [0, 1]}, "splits"),
    "splits_key": ({"splits": {"dev": np.array([0])}}, "splits"),
    "num_nodes_float": ({"num_nodes": 5.9}, "num_nodes"),
    "num_nodes_whole_float": ({"num_nodes": 5.0}, "num_nodes"),
    "num_nodes_bool": ({"num_nodes": True}, "num_nodes"),
    "num_nodes_str": ({"num_nodes": "5"}, "num_nodes"),
    "num_nodes_zero": ({"num_nodes": 0}, "num_nodes"),
    "num_nodes_negative": ({"num_nodes": np.int64(-3)}, "num_nodes"),
    "num_nodes_huge": ({"num_nodes": 2**63}, "num_nodes"),
    "x_strings": ({"x": np.array([["a"], ["b"], ["c"], ["d"]])}, "x"),
    "x_complex": ({"x": np.ones((4, 2), dtype=complex)}, "x"),
    "x_1d": ({"x": np.ones(4)}, "x"),
    "y_strings": ({"y": np.array(["a", "b", "c", "d"])}, "y"),
    "y_3d": ({"y": np.zeros((4, 1, 1))}, "y"),
    "y_objects": ({"y": [object()] * 4}, "y"),
    "name_empty": ({"name": ""}, "name"),
    "name_not_str": ({"name": 3}, "name"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_a_bad_argument_is_refused_naming_it(tmp_path, case):
    kwargs, argument = CASES[case]
    with pytest.raises(ArgumentError) as e:
        from_arrays(E, output=tmp_path / "g.h5", order="none", **kwargs)
    assert e.value.argument == argument, str(e.value)
    assert isinstance(e.value, GnnprepError) and isinstance(e.value, ValueError) and isinstance(e.value, TypeError)
    assert str(e.value).startswith(argument) and "\n" not in str(e.value)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("edge_index,argument", [
    (None, "edge_index"), (np.zeros((3, 4), dtype=np.int64), "edge_index"), (E.astype(np.float32), "edge_index[0]"),
    ((np.array([0, 1]), np.array([1])), "edge_index"), ("0 1", "edge_index"),
])
def test_a_bad_edge_index_is_refused_naming_it(tmp_path, edge_index, argument):
    with pytest.raises(ArgumentError) as e:
        from_arrays(edge_index, output=tmp_path / "g.h5", order="none")
    assert e.value.argument == argument
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("kwargs,argument", [
    ({"order": "bogus"}, "order"), ({"order": None}, "order"), ({"directed": "yes"}, "directed"),
    ({"directed": 1}, "directed"), ({"memory_budget": 0}, "memory_budget"), ({"memory_budget": 1.5e9}, "memory_budget"),
    ({"memory_budget": True}, "memory_budget"), ({"tmp_dir": 3}, "tmp_dir"), ({"name": ""}, "name"),
])
def test_the_other_arguments_are_checked(kwargs, argument):
    with pytest.raises(ArgumentError) as e:
        check_options(**kwargs)
    assert e.value.argument == argument


def test_check_options_accepts_the_documented_values():
    for order in ("auto", "community", "degree", "degree-bucket", "none"):
        check_options(order=order)
    check_options(directed=True, memory_budget="64MiB", tmp_dir="/tmp", name="cora")
    check_options(memory_budget=np.int64(1 << 26))


def test_what_is_meant_is_still_read(tmp_path):
    """A boolean mask, node ids and a numpy integer num_nodes are read as before; an integer array
    of ids that is not a 0/1 mask of length n is ids."""
    r = from_arrays(E, num_nodes=np.int32(5), output=tmp_path / "a.h5", order="none",
                    splits={"train_mask": np.array([True, False, True, False, False]), "valid": np.array([1, 3]),
                            "test": np.array([4])})
    assert r.num_nodes == 5
    import h5py

    with h5py.File(tmp_path / "a.h5", "r") as f:
        splits = {k: sorted(int(i) for i in f["splits"][k][()]) for k in f["splits"]}
    assert splits == {"train": [0, 2], "valid": [1, 3], "test": [4]}
    # two nodes: [0, 1] is the ids of both, refused as ambiguous only when it is as long as the graph
    from_arrays(np.array([[0, 1, 2], [1, 2, 0]]), output=tmp_path / "b.h5", order="none",
                splits={"train": np.array([0, 1])})


@pytest.mark.parametrize("kwargs, argument", [({"order": "bogus"}, "order"), ({"memory_budget": 0}, "memory_budget"),
                                              ({"directed": "yes"}, "directed")])
def test_from_arrays_checks_its_options_before_writing(tmp_path, kwargs, argument):
    """order='bogus' was written into the store (issue 32, line 16): refused, nothing written."""
    with pytest.raises(ArgumentError) as e:
        from_arrays(np.array([[0, 1], [1, 2]]), num_nodes=3, output=tmp_path / "g.h5", **kwargs)
    assert e.value.argument == argument
    assert list(tmp_path.iterdir()) == []
