"""Your own model over gnnprep's precomputed hops: a GAMLP-style hop attention in plain PyTorch.

Each node's hops X, SX, ..., S^K X (Zhang et al., "Graph Attention Multi-Layer Perceptron", KDD 2022)
are weighted per node, h = Σ_k softmax_k(a · tanh(W x_k)) x_k, then classified by an MLP.
    python examples/own_model.py feats.h5 [--epochs 50] [--memory-budget 512KiB] [--seed 0]
"""
import argparse

import torch

import gnnprep


class HopAttention(torch.nn.Module):
    def __init__(self, d: int, classes: int, hidden: int = 64, dropout: float = 0.5):
        super().__init__()
        self.score = torch.nn.Sequential(torch.nn.Linear(d, hidden), torch.nn.Tanh(), torch.nn.Linear(hidden, 1))
        self.mlp = torch.nn.Sequential(torch.nn.Dropout(dropout), torch.nn.Linear(d, hidden), torch.nn.ReLU(),
                                       torch.nn.Dropout(dropout), torch.nn.Linear(hidden, classes))

    def forward(self, x):                                    # x [B, K+1, d]
        alpha = torch.softmax(self.score(x), dim=1)          # [B, K+1, 1], one weight per node and hop
        return self.mlp((alpha * x).sum(1))


def accuracy(model, batches) -> float:
    model.eval()
    with torch.no_grad():
        hits = sum(int((model(x).argmax(1) == y).sum()) for x, y in batches)
    return hits / sum(len(y) for _, y in batches)


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("features")
    ap.add_argument("--epochs", type=int, default=50)
    ap.add_argument("--memory-budget", default=None, help="e.g. 512KiB: rows streamed when they do not fit")
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args(argv)
    torch.manual_seed(a.seed)
    feats = gnnprep.open(a.features)
    opts = dict(batch_size=256, seed=a.seed, memory_budget=a.memory_budget, normalize="row")
    train = feats.loader("train", **opts)
    valid, test = (list(feats.loader(s, **opts)) for s in ("valid", "test"))
    model = HopAttention(train.in_dim, train.num_classes)
    opt = torch.optim.Adam(model.parameters(), lr=0.01, weight_decay=5e-4)
    for _ in range(a.epochs):
        model.train()
        for x, y in train:
            opt.zero_grad()
            torch.nn.functional.cross_entropy(model(x), y).backward()
            opt.step()
    result = {"valid_acc": accuracy(model, valid), "test_acc": accuracy(model, test), "streaming": train.streaming}
    print(result)
    return result


if __name__ == "__main__":
    main()
