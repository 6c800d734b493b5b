"""Bad arguments to the features reader's Python API (issue 32, item 16): ``read``, ``labels_of``
and ``loader`` raise one documented exception, ``gnnprep.core.errors.ArgumentError`` (a
GnnprepError that is also a ValueError and a TypeError), naming the argument in one line that
starts with the file; never a raw TypeError/ValueError/OverflowError/KeyError/MemoryError, and never
a silent coercion (``read([1.7])`` read node 1, ``hops=[1.5]`` hop 1, a boolean mask ids 0 and 1,
``memory_budget=0`` the default). The file is left as it was."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest
from fixtures import write_features

import gnnprep
from gnnprep.core.errors import ArgumentError, GnnprepError

N, K = 20, 2


@pytest.fixture(scope="module")
def feats(tmp_path_factory):
    path = tmp_path_factory.mktemp("args") / "f.h5"
    return write_features(path, np.random.default_rng(0), n=N, d=3, K=K, operators=("sym", "rw"))


def _mask(n, *ids):
    m = np.zeros(n, dtype=bool)
    m[list(ids)] = True
    return m


# case -> (method, args, kwargs, the argument named, what the message says)
CASES = {
    # nodes
    "float-id": ("read", ([1.7],), {}, "nodes", r"holds floats \(such as 1\.7\)"),
    "integral-float-id": ("read", ([1.0],), {}, "nodes", r"holds floats"),
    "float-scalar": ("read", (1.5,), {}, "nodes", r"holds floats"),
    "bool-list-short": ("read", ([True, False],), {}, "nodes", rf"boolean mask of 2 entries; .* \({N}\)"),
    "bool-mask-long": ("read", (np.zeros(N + 1, bool),), {}, "nodes", r"boolean mask of 21 entries"),
    "bool-scalar": ("read", (True,), {}, "nodes", r"is the boolean True"),
    "none": ("read", (None,), {}, "nodes", r"is None"),
    "2-d": ("read", (np.zeros((2, 2), int),), {}, "nodes", r"shape \(2, 2\)"),
    "strings": ("read", (["a", "b"],), {}, "nodes", r"dtype <U1"),
    "bytes": ("read", (b"train",), {}, "nodes", r"is b'train'"),
    "dict": ("read", ({1: 2},), {}, "nodes", r"is \{1: 2\} \(dict\)"),
    "set": ("read", ({1, 2},), {}, "nodes", r"\(set\)"),
    "object": ("read", ([object()],), {}, "nodes", r"dtype object"),
    "huge-int": ("read", ([2**70],), {}, "nodes", r"dtype object"),
    "uint64-beyond-int64": ("read", (np.array([2**64 - 1], np.uint64),), {}, "nodes", r"node 18446744073709551615"),
    "negative": ("read", ([-1],), {}, "nodes", r"node -1 is not a stored row"),
    "beyond-rows": ("read", ([N],), {}, "nodes", rf"node {N} is not a stored row"),
    "ragged": ("read", ([[1], [1, 2]],), {}, "nodes", r"cannot be read as node ids"),
    "unknown-split": ("read", ("nope",), {}, "nodes", r"no split 'nope'; it has train, valid, test"),
    "too-many-to-hold": ("read", (range(10**13),), {}, "nodes", r"does not fit in memory"),
    "too-many-to-count": ("read", (range(2**64),), {}, "nodes", r"does not fit in memory"),
    "labels-float": ("labels_of", ([2.5],), {}, "nodes", r"holds floats"),
    "labels-bool-short": ("labels_of", ([True, True],), {}, "nodes", r"boolean mask"),
    # hops
    "hop-float": ("read", ([1],), {"hops": [1.5]}, "hops", r"holds 1\.5 \(float64\)"),
    "hop-integral-float": ("read", ([1],), {"hops": 1.0}, "hops", r"holds 1\.0"),
    "hop-bool": ("read", ([1],), {"hops": True}, "hops", r"is True \(bool\)"),
    "hop-bools": ("read", ([1],), {"hops": [True, False]}, "hops", r"\(bool\)"),
    "hop-string": ("read", ([1],), {"hops": "1"}, "hops", r"is '1' \(str\)"),
    "hop-beyond": ("read", ([1],), {"hops": [K + 1]}, "hops", rf"hop {K + 1}: expected 0\.\.{K}"),
    "hop-negative": ("read", ([1],), {"hops": -1}, "hops", rf"hop -1: expected 0\.\.{K}"),
    "hop-empty": ("read", ([1],), {"hops": []}, "hops", r"is empty"),
    "hop-2-d": ("read", ([1],), {"hops": [[0, 1]]}, "hops", r"shape \(1, 2\)"),
    "hop-none-inside": ("read", ([1],), {"hops": [None]}, "hops", r"holds None"),
    # operators
    "operator-unknown": ("read", ([1],), {"operators": "ppr"}, "operators", r"'ppr' is not an operator .* sym, rw"),
    "operator-int": ("read", ([1],), {"operators": 5}, "operators", r"is 5 \(int\)"),
    "operator-set": ("read", ([1],), {"operators": {"sym"}}, "operators", r"\(set\)"),
    "operator-empty": ("read", ([1],), {"operators": []}, "operators", r"is empty"),
    "operator-not-str": ("read", ([1],), {"operators": ["sym", 1]}, "operators", r"holds 1 \(int\)"),
    # loader
    "loader-budget-zero": ("loader", ("train",), {"memory_budget": 0}, "memory_budget", r"is 0; expected a byte count"),
    "loader-budget-negative": ("loader", ("train",), {"memory_budget": -1}, "memory_budget", r"is -1"),
    "loader-budget-float": ("loader", ("train",), {"memory_budget": 1.5e9}, "memory_budget", r"\(float\)"),
    "loader-budget-bool": ("loader", ("train",), {"memory_budget": True}, "memory_budget", r"\(bool\)"),
    "loader-budget-text": ("loader", ("train",), {"memory_budget": "lots"}, "memory_budget", r"cannot read size 'lots'"),
    "loader-budget-zero-text": ("loader", ("train",), {"memory_budget": "0MiB"}, "memory_budget", r"must be positive"),
    "loader-budget-too-small": ("loader", ("train",), {"memory_budget": 1}, "memory_budget", r"cannot hold"),
    "loader-hops-float": ("loader", ("train",), {"hops": 1.5}, "hops", r"is 1\.5 \(float\)"),
    "loader-hops-beyond": ("loader", ("train",), {"hops": K + 1}, "hops", rf"is {K + 1}; expected 0\.\.{K}"),
    "loader-hops-negative": ("loader", ("train",), {"hops": -1}, "hops", r"is -1"),
    "loader-batch-zero": ("loader", ("train",), {"batch_size": 0}, "batch_size", r"is 0"),
    "loader-batch-float": ("loader", ("train",), {"batch_size": 2.0}, "batch_size", r"\(float\)"),
    "loader-shuffle-text": ("loader", ("train",), {"shuffle": "no"}, "shuffle", r"is 'no' \(str\)"),
    "loader-seed-negative": ("loader", ("train",), {"seed": -1}, "seed", r"is -1"),
    "loader-seed-float": ("loader", ("train",), {"seed": 0.5}, "seed", r"\(float\)"),
    "loader-seed-huge": ("loader", ("train",), {"seed": 2**64}, "seed", r"is 18446744073709551616"),
    "loader-device-unknown": ("loader", ("train",), {"device": "tpu"}, "device", r"'tpu'"),
    "loader-device-int": ("loader", ("train",), {"device": 0}, "device", r"is 0 \(int\)"),
    "loader-normalize-unknown": ("loader", ("train",), {"normalize": "max"}, "normalize", r"none, row, l2"),
    "loader-prefetch-zero": ("loader", ("train",), {"prefetch": 0}, "prefetch", r"is 0"),
    "loader-operator-unknown": ("loader", ("train",), {"operators": ["ppr"]}, "operators", r"'ppr' is not an operator .* sym, rw"),
    "loader-operators-empty": ("loader", ("train",), {"operators": []}, "operators", r"non-empty"),
    "loader-split-unknown": ("loader", ("nope",), {}, "split", r"no split 'nope'"),
    "loader-split-int": ("loader", (0,), {}, "split", r"is 0 \(int\)"),
    "loader-unknown-option": ("loader", ("train",), {"batchsize": 4}, "batchsize", r"not an option of loader"),
}


def _digest(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_bad_argument_is_one_argument_error_naming_it(feats, case):
    method, args, kwargs, argument, says = CASES[case]
    before = _digest(feats)
    with gnnprep.open(feats) as f:
        with pytest.raises(ArgumentError, match=says) as e:
            getattr(f, method)(*args, **kwargs)
    err = e.value
    assert isinstance(err, GnnprepError) and isinstance(err, ValueError) and isinstance(err, TypeError)
    assert err.argument == argument
    text = str(err)
    assert "\n" not in text and text.startswith(f"{feats}: {argument}: "), text
    assert _digest(feats) == before


def test_valid_forms_read_what_they_name(feats):
    with gnnprep.open(feats) as f:
        want = f.read([3, 4, 9])
        assert f.read(_mask(N, 3, 4, 9)).tobytes() == want.tobytes()          # a mask over the graph's nodes
        assert f.read(np.array([3, 4, 9], np.uint8)).tobytes() == want.tobytes()
        assert f.read((np.int32(3), 4, np.int64(9))).tobytes() == want.tobytes()
        assert f.read(4).tobytes() == want[1:2].tobytes()                      # a scalar id
        assert f.read([]).shape == (0, K + 1, 3)
        assert f.read([3], hops=2).tobytes() == want[:1, 2:3].tobytes()
        assert f.read([3], hops=np.array([0, 2])).shape == (1, 2, 3)
        assert np.array_equal(f.labels_of(_mask(N, 3, 4, 9)), f.labels_of([3, 4, 9]))
        x, y = next(iter(f.loader("train", batch_size=np.int64(4), memory_budget="1MiB", shuffle=np.bool_(False))))
        assert tuple(x.shape) == (4, K + 1, 3)


def test_a_lazy_sequence_larger_than_free_memory_is_refused_before_numpy_allocates(feats, monkeypatch):
    """Where the kernel overcommits memory (vm.overcommit_memory = 1: a GPU machine's), numpy's
    allocation for ``range(10**13)`` succeeds and filling it ends in the OOM killer (the test worker
    crashed there), so the length is weighed against the free memory first."""
    import gnnprep.precompute.features as features

    monkeypatch.setattr(features, "available_ram", lambda: 100 << 20)
    with gnnprep.open(feats) as f:
        with pytest.raises(ArgumentError, match="does not fit in memory"):
            f.read(range(20 << 20))                           # 160 MiB of ids against 100 MiB free
        assert f.read(range(3, 5)).tobytes() == f.read([3, 4]).tobytes()
