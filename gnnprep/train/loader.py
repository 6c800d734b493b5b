"""Batches of precomputed hops for your own model: the trainer's own loader, offered as an API.

``gnnprep train`` feeds its models ``x`` of shape [B, V, d] (V stacked (operator, hop) views of each
row) and ``y`` [B]: held in memory when the rows fit the memory budget, else streamed from the HDF5
file in chunk-aligned windows, shuffled inside each window, read ahead on a thread
(:mod:`gnnprep.train.batches`). :func:`loader` opens the same machinery through the same call
(:func:`gnnprep.train.batches.open_data`), so for one seed its batches are exactly the ones
``gnnprep train`` trains on (run r of a ``--runs`` job uses seed + r).

With one operator a batch is ``(x, y)`` with x [B, K+1, d] (hops 0..K, SIGN/GAMLP-style models
take them as they are); with several operators x is a list with one [B, K+1, d] tensor per
operator (hop 0, X itself, is shared: it is read once and repeated in every channel).

    feats = gnnprep.open("feats.h5")
    for epoch in range(10):
        for x, y in feats.loader("train", batch_size=4096, shuffle=True, seed=0):
            ...
"""

from __future__ import annotations

import math

import numpy as np

from gnnprep.core.artifact import register_format
from gnnprep.core.errors import GnnprepError
from gnnprep.core.sizes import parse_size
from gnnprep.precompute.features import FeatureStore


class Features(FeatureStore):
    """A features artifact opened by :func:`gnnprep.open`: the numpy reads of
    :class:`~gnnprep.precompute.features.FeatureStore` (``read``, ``labels_of``, ``splits``, ``info``)
    and torch batches (:meth:`loader`)."""

    def loader(self, split: str = "train", **options) -> Loader:
        """:func:`loader` over this file (the same options)."""
        return loader(self.path, split, **options)


class Loader:
    """An epoch of batches each time it is iterated; the shuffle stream continues across epochs,
    as in ``gnnprep train``. ``streaming``: whether rows are read from the file per epoch."""

    def __init__(self, data, split: np.ndarray, batch_size: int, shuffle: bool, seed: int, channels: int,
                 normalize: str):
        self._data, self._split = data, split
        self.batch_size, self.shuffle, self.channels, self.normalize = batch_size, shuffle, channels, normalize
        self.rng = np.random.default_rng(seed)
        self.streaming = bool(getattr(data.loader, "streaming", False))
        self.num_classes = data.spec.num_classes
        self.in_dim = data.spec.in_dim

    def __len__(self) -> int:
        return math.ceil(len(self._split) / self.batch_size)

    def __iter__(self):
        from gnnprep.train.batches import normalize_rows

        for x, y in self._data.loader.batches(self._split, self.batch_size, self.shuffle,
                                              self.rng if self.shuffle else None):
            x = normalize_rows(x, self.normalize)
            if self.channels > 1:   # [X, op0 hops 1..K, op1 hops 1..K, ...] -> per operator [X, hops 1..K]
                k = (x.shape[1] - 1) // self.channels
                x = [x[:, [0, *range(1 + c * k, 1 + (c + 1) * k)]] for c in range(self.channels)]
            yield x, y

    def close(self) -> None:
        self._data.loader.close()


def loader(path, split: str = "train", hops: int | None = None, operators=None, batch_size: int = 4096,
           shuffle: bool | None = None, seed: int = 0, memory_budget=None, device: str = "cpu",
           normalize: str = "none", prefetch: int = 2) -> Loader:
    """Batches of ``split`` (train, valid or test) from the features artifact at ``path``.

    ``hops``: K, hops 0..K (default: every hop in the file); ``operators``: one name or several
    (default: the file's first); ``shuffle``: default True for train only; ``seed``: the shuffle
    stream (``gnnprep train --seed``); ``memory_budget``: bytes or a size such as ``"2GiB"`` —
    the rows are held in memory when all splits' rows fit it, else streamed within it (default:
    half the free memory, as ``gnnprep train``); ``device``: where batches go (cpu, cuda, auto);
    ``normalize``: none, row (L1) or l2 per row of each hop after reading
    (``gnnprep train --normalize-features``).
    """
    from gnnprep.train.batches import open_data
    from gnnprep.train.config import TrainConfig

    ops = None if operators is None else ((operators,) if isinstance(operators, str) else tuple(operators))
    budget = parse_size(memory_budget) if isinstance(memory_budget, str) else memory_budget
    if hops is None:   # every hop in the file (gnnprep train's regime would pick the model's paper K)
        with FeatureStore(path) as f:
            hops = f.hops
    # the trainer's views of the model that reads every hop: lc-gprgnn (one operator), sign (several)
    model = "sign" if ops is not None and len(ops) > 1 else "lc-gprgnn"
    config = TrainConfig(model=model, hops=hops, operators=ops, batch_size=batch_size, memory_budget=budget,
                         device=device, seed=seed, normalize_features=normalize, prefetch=prefetch, hidden=1,
                         layers=1)
    config.check()
    data = open_data(path, config)
    if split not in data.splits:
        data.loader.close()
        raise GnnprepError(f"{path}: has no split {split!r}; it has {', '.join(data.splits)}")
    return Loader(data, data.splits[split], batch_size, split == "train" if shuffle is None else shuffle, seed,
                  len(data.spec.operators), normalize)


# gnnprep.open gives features artifacts as this subclass (the describer stays precompute.features')
register_format(Features.FORMAT, reader=Features)
