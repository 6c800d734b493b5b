"""Training defaults that fit the data: each model's settings from its paper, per label regime.

A setting left unset (``None`` in :class:`~gnnprep.train.config.TrainConfig`) is filled here from the
artifact, after it is opened; every value the user gives wins. Two regimes, chosen by the number of
training rows:

- ``small`` (at most ``SMALL_TRAIN_ROWS`` = 1,000 training rows: the Planetoid setting of 20 labels
  per class): one full batch per epoch, a narrow network, dropout and weight decay, as in the papers'
  Cora/Citeseer/PubMed experiments, and each hop row-normalised (unit L1 norm) as GCN, SGC and
  GPR-GNN normalise bag-of-words features (unless precompute normalised X already,
  ``precompute --normalize-features row``). Hops per model: SGC K = 2 (Wu et al. 2019, §4: K = 2
  on the citation graphs); LC-GCN K = 2 (the two-layer GCN, Kipf & Welling 2017); LC-JKNet
  K = 4; GPR-GNN K = 10 with a 2-layer MLP of width 64, α = 0.1, dropout 0.5, dprate 0.5, weight
  decay 5e-4 (Chien et al. 2021, §5 and their appendix); SIGN r = 3 hops (Frasca et al. 2020 use
  r ≤ 3), input dropout 0.6 (as GAT's 0.6 on Planetoid inputs, Veličković et al. 2018) and dropout
  0.8 on the concatenated hop projections, which hold K + 1 times the units of one hidden layer
  (0.5 overfits 140 labels: on Cora's validation split 76.9 against 78.3 with 0.8); SGC: lr 0.2, 100 epochs, no dropout, weight decay 5e-5 (the middle of the 1e-5..1e-4 range
  its hyperparameter search returns on the citation graphs). Fewer hops when the artifact has fewer.
- ``large`` (more training rows): the LC paper's large-graph settings (Maekawa et al., appendix):
  Adam at lr 0.01, mini-batches of 4,096 rows, hidden 256, dropout 0.5, no weight decay, up to 2,000
  epochs with patience 300, every hop in the artifact, features as stored.

The regime and the values filled in are reported (``regime``, ``defaults`` in the summary, ``--json``
and ``metrics.json``) so a run says exactly what it trained with.
"""

from __future__ import annotations

import dataclasses

from gnnprep.train.config import TrainConfig

SMALL_TRAIN_ROWS = 1_000

# the settings a regime may fill: left None in TrainConfig means "from the regime"
REGIME_FIELDS = ("hops", "hidden", "layers", "dropout", "input_dropout", "lr", "weight_decay", "batch_size",
                 "epochs", "patience", "normalize_features")

LARGE = dict(hidden=256, dropout=0.5, input_dropout=0.0, lr=0.01, weight_decay=0.0, batch_size=4096,
             epochs=2000, patience=300, normalize_features="none")
SMALL = dict(hidden=64, dropout=0.5, input_dropout=0.0, lr=0.01, weight_decay=5e-4, epochs=1000, patience=100,
             normalize_features="row")
SMALL_MODEL = {
    "sgc": dict(hops=2, lr=0.2, weight_decay=5e-5, dropout=0.0, epochs=100, patience=0),
    "lc-gcn": dict(hops=2, layers=2),
    "lc-jknet": dict(hops=4),
    "lc-gprgnn": dict(hops=10, layers=2),
    "sign": dict(hops=3, layers=1, input_dropout=0.6, dropout=0.8),
    "mlp": dict(layers=2),
}


def choose_regime(train_rows: int) -> str:
    """``small`` for at most SMALL_TRAIN_ROWS training rows, else ``large``."""
    return "small" if train_rows <= SMALL_TRAIN_ROWS else "large"


def regime_defaults(model: str, regime: str, train_rows: int, hops_in_file: int, prenormalized: bool) -> dict:
    """Every regime field's default for ``model`` (layers None: the model's own default)."""
    if regime == "large":
        values = dict(LARGE, hops=hops_in_file, layers=None)
    else:
        values = dict(SMALL, layers=None, **{"batch_size": max(1, train_rows)})
        values.update(SMALL_MODEL[model])
        values["hops"] = min(values.get("hops", hops_in_file), hops_in_file)
    if prenormalized:
        values["normalize_features"] = "none"   # X was row-normalised before propagation
    return values


# fields a model has no use for (SGC is one linear layer on the K-th hop, with input dropout): filled
# like any other, so a checkpoint's config stays whole, but not listed among the defaults used
UNUSED_FIELDS = {"sgc": ("hidden", "layers", "dropout")}


def resolve(config: TrainConfig, train_rows: int, hops_in_file: int, prenormalized: bool = False
            ) -> tuple[TrainConfig, str, dict]:
    """(the config with every unset regime field filled, the regime, the values filled in that the
    model uses)."""
    regime = choose_regime(train_rows)
    values = regime_defaults(config.model, regime, train_rows, hops_in_file, prenormalized)
    filled = {k: values[k] for k in REGIME_FIELDS if getattr(config, k) is None and values[k] is not None}
    unused = UNUSED_FIELDS.get(config.model, ())
    return dataclasses.replace(config, **filled), regime, {k: v for k, v in filled.items() if k not in unused}
