"""HopGraph.reuse: the next column block's buffers from the last block's pages."""

from types import SimpleNamespace

import numpy as np

from gnnprep.precompute.hop_graph import HopGraph


def graph(extra_rows=0):
    made = []

    def buffer(shape):
        made.append(shape)
        return np.empty(shape, dtype=np.float32)

    return SimpleNamespace(extra_rows=extra_rows, buffer=buffer, extended=lambda buf: None), made


def test_the_same_shape_is_the_same_buffer_and_a_narrower_one_its_first_pages():
    g, made = graph()
    old = np.arange(10 * 43, dtype=np.float32).reshape(10, 43)
    assert HopGraph.reuse(g, old, (10, 43)) is old
    last = HopGraph.reuse(g, old, (10, 42))   # d = 128 in blocks of 43: the last block is 42 wide
    assert last.shape == (10, 42) and last.flags.c_contiguous and np.shares_memory(last, old)
    assert np.array_equal(last.reshape(-1), np.arange(420, dtype=np.float32))
    assert made == []


def test_a_wider_or_missing_buffer_is_made_new():
    g, made = graph()
    assert HopGraph.reuse(g, np.empty((10, 16), np.float32), (10, 32)).shape == (10, 32)
    assert HopGraph.reuse(g, None, (4, 8)).shape == (4, 8)
    assert HopGraph.reuse(g, np.empty((10, 43), np.float64), (10, 42)).dtype == np.float32
    assert made == [(10, 32), (4, 8), (10, 42)]


def test_a_hags_buffers_are_reused_only_whole():
    g, made = graph(extra_rows=5)
    old = np.empty((10, 43), np.float32)
    assert HopGraph.reuse(g, old, (10, 42)) is not old and made == [(10, 42)]
    g.extended = lambda buf: buf
    assert HopGraph.reuse(g, old, (10, 43)) is old
