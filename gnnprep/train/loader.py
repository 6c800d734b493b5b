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
from gnnprep.core.errors import ArgumentError, OptionError, shown
from gnnprep.core.sizes import parse_size
from gnnprep.precompute.features import FeatureStore


class Features(FeatureStore):
    """A features artifact opened by :func:`gnnprep.open`: the numpy reads of
    :class:`~gnnprep.precompute.features.FeatureStore` (``read``, ``labels_of``, ``splits``, ``info``)
    and torch batches (:meth:`loader`)."""

    def loader(self, split: str = "train", **options) -> Loader:
        """:func:`loader` over this file (the same options; another name is an ArgumentError)."""
        import inspect

        known = [name for name in inspect.signature(loader).parameters if name not in ("path", "split")]
        for name in options:
            if name not in known:
                raise ArgumentError(name, f"is not an option of loader(); expected {', '.join(known)}", self.path)
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
    (``gnnprep train --normalize-features``); ``prefetch``: read windows queued ahead when
    streaming (1..1024).

    A bad argument (a float for an integer, ``memory_budget=0``, a string for ``shuffle``, hops
    beyond the file's, an unknown split or operator) is a
    :class:`~gnnprep.core.errors.ArgumentError` naming it, never coerced.

    The file must stay as it was opened while the loader lives: a streamed epoch over a file
    truncated, rewritten or replaced after this call (HDF5 would read the lost chunks as zeros) is
    a :class:`~gnnprep.core.errors.GnnprepError` ("the file changed or was truncated while it was
    read") at the first row block read after the change, never zeros
    (:class:`gnnprep.train.batches.FileGuard`).
    """
    from gnnprep.train.batches import open_data
    from gnnprep.train.config import TrainConfig

    ops, budget = _checked_options(path, split, hops, operators, batch_size, shuffle, seed, memory_budget, device,
                                   normalize, prefetch)
    try:
        with FeatureStore(path) as f:
            if hops is None:   # every hop in the file (gnnprep train's regime would pick the model's paper K)
                hops = f.hops
            elif hops > f.hops:
                raise ArgumentError("hops", f"is {hops}; expected 0..{f.hops} (the hops this file holds)", path)
            for op in ops or ():
                if op not in f.operators():
                    raise ArgumentError("operators", f"{op!r} is not an operator or channel of this file; it has "
                                        f"{', '.join(f.operators())}", path)
        # the trainer's views of the model that reads every hop: lc-gprgnn (one operator), sign (several)
        model = "sign" if ops is not None and len(ops) > 1 else "lc-gprgnn"
        config = TrainConfig(model=model, hops=hops, operators=ops, batch_size=batch_size, memory_budget=budget,
                             device=device, seed=seed, normalize_features=normalize, prefetch=prefetch, hidden=1,
                             layers=1)
        config.check()
        data = open_data(path, config)
    except OptionError as e:   # the trainer's checks name its command-line options: name the argument
        if e.option not in _ARGUMENTS:
            raise
        raise ArgumentError(_ARGUMENTS[e.option], e.message, path) from None
    if split not in data.splits:
        data.loader.close()
        raise ArgumentError("split", f"this file has no split {split!r}; it has {', '.join(data.splits)}", path)
    return Loader(data, data.splits[split], batch_size, split == "train" if shuffle is None else bool(shuffle), seed,
                  len(data.spec.operators), normalize)


# the options of gnnprep train that loader() passes on, by the names of its arguments
_ARGUMENTS = {"--hops": "hops", "--operator": "operators", "--operators": "operators", "--batch-size": "batch_size",
              "--memory-budget": "memory_budget", "--device": "device", "--seed": "seed",
              "--normalize-features": "normalize", "--prefetch": "prefetch"}
MAX_PREFETCH = 1024


def _checked_options(path, split, hops, operators, batch_size, shuffle, seed, memory_budget, device, normalize,
                     prefetch) -> tuple[tuple[str, ...] | None, int | None]:
    """The loader's arguments checked on their own (no file read yet): (operators as a tuple or
    None, the memory budget in bytes or None), or an ArgumentError naming the first bad one. Never
    a coercion: a float where an integer is expected, 0 for a budget, a string for a flag are refused."""
    from gnnprep.core.device import check_name
    from gnnprep.train.config import MAX_SEED, NORMALIZE

    def integer(name, value, lo, hi, what="an integer"):
        if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
            raise ArgumentError(name, f"is {shown(value)}; expected {what} in {lo}..{hi}", path)
        if not lo <= value <= hi:
            raise ArgumentError(name, f"is {value}; expected {what} in {lo}..{hi}", path)

    if not isinstance(split, str):
        raise ArgumentError("split", f"is {shown(split)}; expected train, valid or test", path)
    if hops is not None:
        integer("hops", hops, 0, 2**31 - 1, "a hop count K")
    ops = None
    if operators is not None:
        if isinstance(operators, str):
            ops = (operators,)
        elif isinstance(operators, (list, tuple)) and operators and all(isinstance(o, str) for o in operators):
            ops = tuple(str(o) for o in operators)
        else:
            raise ArgumentError("operators", f"is {shown(operators)}; expected an operator name or a non-empty "
                                "list of names", path)
    integer("batch_size", batch_size, 1, 2**31 - 1)
    if shuffle is not None and not isinstance(shuffle, (bool, np.bool_)):
        raise ArgumentError("shuffle", f"is {shown(shuffle)}; expected True, False or None (True for train only)",
                            path)
    integer("seed", seed, 0, MAX_SEED)
    budget = None
    if isinstance(memory_budget, str):
        try:
            budget = parse_size(memory_budget, "memory_budget")
        except OptionError as e:
            raise ArgumentError("memory_budget", e.message, path) from None
    elif memory_budget is not None:
        integer("memory_budget", memory_budget, 1, 2**63 - 1, "a byte count (or a size such as '2GiB')")
        budget = int(memory_budget)
    if not isinstance(device, str):
        raise ArgumentError("device", f"is {shown(device)}; expected cpu, cuda, cuda:N or auto", path)
    try:
        check_name(device)
    except OptionError as e:
        raise ArgumentError("device", e.message, path) from None
    if not isinstance(normalize, str) or normalize not in NORMALIZE:
        raise ArgumentError("normalize", f"is {shown(normalize)}; expected one of {', '.join(NORMALIZE)}", path)
    integer("prefetch", prefetch, 1, MAX_PREFETCH, "a count of read windows")
    return ops, budget


# gnnprep.open gives features artifacts as this subclass (the describer stays precompute.features')
register_format(Features.FORMAT, reader=Features)
