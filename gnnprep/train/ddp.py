"""Training under torchrun (DistributedDataParallel): one epoch and one evaluation as rank r of P,
and each rank's torch RNG. The loop around them (runs, early stopping, checkpoints written by rank
0, resume with every rank's RNG) is :func:`gnnprep.train.trainer.train`'s, shared with one process.

Every rank reads its :func:`gnnprep.train.batches.rank_slice` of each global batch of ``batch_size · P``
rows, so an epoch takes the steps of one process with that batch and the averaged gradient is the
global batch's (see :func:`train_epoch_shared`)."""

from __future__ import annotations

import numpy as np
import torch

from gnnprep.core.errors import GnnprepError
from gnnprep.core.memory import keep_freed_memory
from gnnprep.train.batches import Data, global_batches, normalize_rows, rank_slice
from gnnprep.train.config import TrainConfig


def train_epoch_shared(model, optimizer, data: Data, config: TrainConfig, rng: np.random.Generator, dist,
                       device) -> tuple[float, int, int]:
    """One epoch as rank ``dist.rank`` of ``dist.world``: (this rank's summed training loss, its
    rows, the optimizer steps taken); the caller sums loss and rows over the ranks.

    Every rank draws the same permutation (``rng`` is seeded alike on every rank) and takes its
    :func:`rank_slice` of each global batch of ``batch_size · world`` rows, so the steps per epoch
    are those of one process with that batch. The loss of a slice is its summed cross entropy
    times ``world / global batch length``: DDP averages the gradients over the ranks, which gives
    the gradient of the global batch's mean loss. A rank whose slice is empty (the last global
    batch has fewer rows than ranks) runs the batch's first row with weight 0, so it still takes
    the step and joins DDP's all-reduce."""
    model.train()
    if device.type == "cpu":
        keep_freed_memory()
    split = data.splits["train"]
    lengths = global_batches(len(split), config.batch_size, dist.world)
    total, n, steps = 0.0, 0, 0
    for length, (x, y) in zip(lengths, data.loader.batches(split, config.batch_size, True, rng,
                                                            share=(dist.rank, dist.world))):
        lo, hi = rank_slice(length, dist.rank, dist.world)
        x = normalize_rows(x, config.normalize_features)
        optimizer.zero_grad(set_to_none=True)
        loss = torch.nn.functional.cross_entropy(model(x), y, reduction="sum")
        (loss * ((dist.world / length) if hi > lo else 0.0)).backward()
        optimizer.step()
        if hi > lo:
            total += float(loss.detach())
            n += hi - lo
        steps += 1
    if steps != len(lengths):
        raise GnnprepError(f"rank {dist.rank}: the loader gave {steps} batches for {len(lengths)} global batches")
    return total, n, steps


@torch.inference_mode()
def evaluate_shared(model, data: Data, config: TrainConfig, dist, comm_device) -> dict:
    """Like :func:`gnnprep.train.trainer.evaluate`, each rank scoring its contiguous share of the valid and test rows;
    the loss sums and correct counts are summed over the ranks, so every rank gets the same
    numbers (and takes the same early-stopping decision). Accuracy is correct / rows: what ogb's
    Evaluator computes for an ``acc`` data set."""
    model.eval()
    sums = []
    for name in ("valid", "test"):
        loss_sum, correct, count = 0.0, 0, 0
        if name in data.splits:
            split = data.splits[name]
            lo, hi = rank_slice(len(split), dist.rank, dist.world)
            if hi > lo:
                for x, y in data.loader.batches(split[lo:hi], config.eval_batch_size, False):
                    logits = model(normalize_rows(x, config.normalize_features))
                    loss_sum += float(torch.nn.functional.cross_entropy(logits, y, reduction="sum"))
                    correct += int((logits.argmax(1) == y).sum())
                    count += len(y)
        sums += [loss_sum, correct, count]
    vl, vc, vn, _, tc, tn = dist.all_sum(sums, comm_device)
    return {"valid_acc": vc / vn if vn else float("nan"), "valid_loss": vl / max(vn, 1),
            "test_acc": (tc / tn if tn else float("nan")) if "test" in data.splits else None}


def rank_seed(seed: int, rank: int) -> int:
    """The torch seed of rank ``rank`` ≥ 1 after the (identical) model init: its own dropout masks."""
    return int(np.random.SeedSequence([seed, rank]).generate_state(1, np.uint64)[0])


def rank_rng(device) -> dict:
    state = {"torch": torch.get_rng_state()}
    if device.type == "cuda":
        state["cuda"] = torch.cuda.get_rng_state(device)
    return state


def set_rank_rng(state: dict, device) -> None:
    torch.set_rng_state(state["torch"])
    if "cuda" in state and device.type == "cuda":
        torch.cuda.set_rng_state(state["cuda"], device)
