"""LC models: GNNs rewritten so that every graph multiplication touches only X (precomputed hops).

The LC transformation (Maekawa et al., "GNN Transformation Framework for Improving Efficiency and
Scalability") moves the graph out of training: with S = D̃^-1/2 Ã D̃^-1/2 and the hops S^k X
(k = 0..K) precomputed, each model below is a function of rows of those hops only, so it trains on
mini-batches of rows without touching the graph.

Every model takes one tensor ``x`` of shape [B, V, d]: the V *views* it asked for (``views``), each a
(operator, hop) pair, stacked per row. Models that apply one network to several hops do so on the
stacked tensor in one batched computation (``nn.Linear`` acts on the last axis), never in a Python
loop per hop. Hidden layers use a fused ReLU-dropout (``relu_dropout``) that keeps only its output
for backward and draws masks from 16 random bits per element; ``recompute`` trades one extra forward
pass for about 4× less activation memory (``LCModel``).

- ``sgc``        Z = S^K X W                                    (SGC, Wu et al. 2019)
- ``lc-gcn``     Z = MLP(S^K X)                                 (LC form of GCN)
- ``lc-jknet``   h_k = f_k(…f_1(S^k X)), Z = W_o · pool(h_1..h_K),  f_l shared across hops
                 (JKNet, Xu et al. 2018; pool = concat or max)
- ``lc-gprgnn``  Z = Σ_k γ_k · MLP(S^k X), γ_k = α(1−α)^k (γ_K = (1−α)^K) learnable
                 (GPR-GNN, Chien et al. 2021)
- ``sign``       Z = MLP(ReLU([S^0 X W_0 ‖ … ‖ S^K X W_K])) over every operator channel
                 (SIGN, Frasca et al. 2020)
- ``mlp``        Z = MLP(X)                                     (hop 0 only; the graph-free baseline)
"""

from __future__ import annotations

from dataclasses import dataclass

import numba
import numpy as np
import torch
from numba import njit, prange
from torch import nn
from torch.utils.checkpoint import checkpoint

from gnnprep.core.errors import GnnprepError, OptionError
from gnnprep.train.config import MODELS

# lc-jknet has one layer per hop (K, set by the hops), plus its output layer
DEFAULT_LAYERS = {"sgc": 1, "lc-gcn": 2, "lc-gprgnn": 4, "sign": 2, "mlp": 2}


@dataclass(frozen=True)
class ModelSpec:
    """What a model is built from: its name, sizes and the hyperparameters that shape it."""

    name: str
    in_dim: int
    num_classes: int
    hops: int                       # K: the highest hop the model reads
    operators: tuple[str, ...] = ("sym",)
    hidden: int = 256
    layers: int | None = None       # None: the model's default (DEFAULT_LAYERS)
    dropout: float = 0.5
    input_dropout: float = 0.0
    alpha: float = 0.1              # lc-gprgnn: PPR teleport of the γ initialisation
    dprate: float = 0.5             # lc-gprgnn: dropout on each hop's MLP output before the weighted sum
    pool: str = "concat"            # lc-jknet: concat | max
    recompute: bool = False         # recompute activations in backward instead of storing them

    @property
    def num_layers(self) -> int:
        if self.name == "lc-jknet":
            return self.hops
        return self.layers if self.layers is not None else DEFAULT_LAYERS[self.name]


def check_model_name(name: str) -> None:
    if name not in MODELS:
        raise GnnprepError(f"model {name!r}: expected one of {', '.join(MODELS)}")


def views(spec: ModelSpec) -> list[tuple[str, int]]:
    """The (operator, hop) datasets the model reads, in the order they are stacked in ``x``."""
    first = spec.operators[0]
    K = spec.hops
    if spec.name in ("sgc", "lc-gcn"):
        return [(first, K)]
    if spec.name == "mlp":
        return [(first, 0)]
    if spec.name == "lc-jknet":
        if K < 1:
            raise GnnprepError("lc-jknet: needs hops >= 1 (hop k goes through k layers)")
        return [(first, k) for k in range(1, K + 1)]
    if spec.name == "lc-gprgnn":
        return [(first, k) for k in range(K + 1)]
    if spec.name == "sign":
        # hop 0 is X for every operator: read it once
        return [(first, 0)] + [(op, k) for op in spec.operators for k in range(1, K + 1)]
    check_model_name(spec.name)
    raise AssertionError(spec.name)


def _random_words(n: int, device) -> torch.Tensor:
    """``n`` int64 words of 64 random bits from torch's default generator.

    Exactly the words ``random_(-2**63, 2**63 - 1)`` draws (what earlier versions called): that call
    reduces each 64-bit draw V modulo 2^64 − 1 (a 64-bit division per word) and adds −2^63, i.e. it
    flips V's top bit unless V = 2^64 − 1 (probability 2^-64). On the CPU the full-range draw
    (``random_(-2**63, None)``: V itself, no division) plus one XOR of the top bit gives the same words
    ~20% faster; elsewhere the original call is kept.
    """
    words = torch.empty(n, dtype=torch.int64, device=device)
    if words.device.type != "cpu":
        return words.random_(-2**63, 2**63 - 1)
    return words.random_(-2**63, None).bitwise_xor_(-2**63)


def _drop_threshold(p: float) -> tuple[int, float]:
    """(q, 1/(1 − q/65536)): a unit is dropped when its 16 random bits, read as an unsigned
    number, are below q = round(p · 65536)."""
    q = min(65535, max(0, round(p * 65536)))
    return q, 65536.0 / (65536 - q)


def _bits16(shape, device) -> torch.Tensor:
    """16 random bits per element (int16, shape ``shape``), four per 64-bit draw."""
    n = 1
    for s in shape:
        n *= s
    return _random_words((n + 3) // 4, device).view(torch.int16)[:n].view(shape)


def _keep_mask(shape, p: float, device) -> tuple[torch.Tensor, float]:
    """Bernoulli(1 − p) keep mask from 16 random bits per element, and its 1/(1 − p) scale.

    ``torch.bernoulli`` draws one random float per element, which on the CPU costs more than the
    layer's matmul; here every 64-bit draw yields four 16-bit samples (about 10× cheaper). The drop
    probability is rounded to a multiple of 1/65536, and the scale uses the rounded value, so the
    expectation is exact. Draws come from torch's default generator: seeds and checkpoint replay work.
    """
    q, scale = _drop_threshold(p)
    return _bits16(shape, device) >= q - 32768, scale


# ---------------------------------------------------------------------------------------------------
# CPU kernels: one pass over the activations instead of four or five torch ops (each a full pass over
# a [B·views, hidden] tensor that does not fit the cache). Every element gets exactly the float32
# operations the torch formulation applies, so results are bit-for-bit those of
# ``relu(h) * keep * scale`` (forward), ``threshold_backward(g, out, 0) * scale`` (backward) and
# ``h * (keep * scale)`` (dropout), NaN and signed zeros included.

_CHUNK = 1 << 16     # elements per parallel work item


@njit(parallel=True, nogil=True, cache=True)
def _relu_dropout_cpu(h, bits, thr, scale, out):
    """out = relu(h) · keep · scale, keep = bits ≥ thr (flat arrays; ``out`` may be ``h``)."""
    one, zero = np.float32(1.0), np.float32(0.0)
    n = h.shape[0]
    for c in prange((n + _CHUNK - 1) // _CHUNK):
        for i in range(c * _CHUNK, min(n, (c + 1) * _CHUNK)):
            r = h[i]
            r = zero if r < zero else r
            out[i] = (r * (one if bits[i] >= thr else zero)) * scale


@njit(parallel=True, nogil=True, cache=True)
def _relu_dropout_backward_cpu(grad, out, scale, g):
    """g = (0 where out ≤ 0, else grad) · scale (flat arrays)."""
    zero = np.float32(0.0)
    n = grad.shape[0]
    for c in prange((n + _CHUNK - 1) // _CHUNK):
        for i in range(c * _CHUNK, min(n, (c + 1) * _CHUNK)):
            gi = grad[i] * scale     # loaded unconditionally: the select vectorises, no branch
            g[i] = zero if out[i] <= zero else gi


@njit(parallel=True, nogil=True, cache=True)
def _dropout_cpu(h, bits, thr, scale, out):
    """out = h · (keep · scale), keep = bits ≥ thr (flat arrays); also the backward (h = grad)."""
    zero = np.float32(0.0)
    n = h.shape[0]
    for c in prange((n + _CHUNK - 1) // _CHUNK):
        for i in range(c * _CHUNK, min(n, (c + 1) * _CHUNK)):
            out[i] = h[i] * (scale if bits[i] >= thr else zero)


def _use_kernel(*tensors) -> bool:
    """The numba kernels take contiguous float32 CPU tensors; anything else uses the torch ops."""
    return all(t.device.type == "cpu" and t.dtype == torch.float32 and t.is_contiguous() for t in tensors)


def _flat(t: torch.Tensor) -> np.ndarray:
    return t.detach().view(-1).numpy()


def _kernel_threads() -> None:
    """Run the kernels on as many threads as torch's intra-op pool (``--threads``)."""
    n = max(1, min(torch.get_num_threads(), numba.config.NUMBA_NUM_THREADS))
    if numba.get_num_threads() != n:
        numba.set_num_threads(n)


class _ReLUDropout(torch.autograd.Function):
    """dropout(ReLU(h)) whose backward needs only its own output: the gradient passes where the
    output is positive (ReLU active and the unit kept), scaled by 1/(1 − p). The output is the tensor
    the next linear layer saves anyway, so no ReLU output or dropout mask is kept besides it.

    On the CPU one numba pass computes relu, mask and scale (``_relu_dropout_cpu``). With ``inplace``
    and ``h`` a fresh tensor (no view: a linear layer's output on a 2-d input), the output overwrites
    ``h`` (marked dirty for autograd; a linear layer's backward needs its input and weight, not its
    output), saving an allocation as large as the activations.
    """

    @staticmethod
    def forward(ctx, h, p, inplace=False):
        scale = 1.0
        if p > 0 and _use_kernel(h):
            q, scale = _drop_threshold(p)
            bits = _bits16(h.shape, h.device)
            if inplace and h._base is None:
                out = h
                ctx.mark_dirty(h)
            else:
                out = torch.empty_like(h)
            _kernel_threads()
            _relu_dropout_cpu(_flat(h), _flat(bits), q - 32768, np.float32(scale), _flat(out))
        else:
            out = torch.relu(h)
            if p > 0:
                keep, scale = _keep_mask(h.shape, p, h.device)
                out.mul_(keep).mul_(scale)
        ctx.save_for_backward(out)
        ctx.scale = scale
        return out

    @staticmethod
    def backward(ctx, grad):
        (out,) = ctx.saved_tensors
        if ctx.scale != 1.0 and _use_kernel(grad, out):
            g = torch.empty_like(out)
            _kernel_threads()
            _relu_dropout_backward_cpu(_flat(grad), _flat(out), np.float32(ctx.scale), _flat(g))
            return g, None, None
        g = torch.ops.aten.threshold_backward.default(grad, out, 0.0)
        return (g.mul_(ctx.scale) if ctx.scale != 1.0 else g), None, None


class _Dropout(torch.autograd.Function):
    """h · (keep · scale) with the mask of ``_keep_mask`` (CPU, float32): one numba pass forward and
    one backward; keeps the 16-bit draws (2 bytes per element) for backward instead of a float mask."""

    @staticmethod
    def forward(ctx, h, p):
        q, scale = _drop_threshold(p)
        bits = _bits16(h.shape, h.device)
        h = h.contiguous()
        out = torch.empty_like(h)
        _kernel_threads()
        _dropout_cpu(_flat(h), _flat(bits), q - 32768, np.float32(scale), _flat(out))
        ctx.save_for_backward(bits)
        ctx.thr, ctx.scale = q - 32768, scale
        return out

    @staticmethod
    def backward(ctx, grad):
        (bits,) = ctx.saved_tensors
        grad = grad.contiguous()
        g = torch.empty_like(grad)
        _kernel_threads()
        _dropout_cpu(_flat(grad), _flat(bits), ctx.thr, np.float32(ctx.scale), _flat(g))
        return g, None


def relu_dropout(h: torch.Tensor, p: float, training: bool, inplace: bool = False) -> torch.Tensor:
    """dropout(ReLU(h)) (``_ReLUDropout``); ``inplace``: ``h`` is a fresh layer output that may be
    overwritten (see ``_ReLUDropout``)."""
    if not training:
        return h.relu_() if inplace and h._base is None else torch.relu(h)
    return _ReLUDropout.apply(h, p, inplace)


def dropout(h: torch.Tensor, p: float, training: bool) -> torch.Tensor:
    """Inverted dropout with the cheap keep mask of ``_keep_mask``: h · (keep · scale)."""
    if not training or p == 0:
        return h
    if h.device.type == "cpu" and h.dtype == torch.float32:
        return _Dropout.apply(h, p)
    keep, scale = _keep_mask(h.shape, p, h.device)
    return h * (keep * scale)


class MLP(nn.Module):
    """Linear → ReLU → dropout, repeated; the last layer is linear only. Acts on the last axis, so
    an input [B, V, d] runs all V views through the same weights as one batched computation."""

    def __init__(self, in_dim: int, hidden: int, out_dim: int, layers: int, dropout: float):
        super().__init__()
        if layers < 1:
            raise OptionError("--layers", f"{layers}: expected at least 1")
        dims = [in_dim] + [hidden] * (layers - 1) + [out_dim]
        self.linears = nn.ModuleList(nn.Linear(a, b) for a, b in zip(dims[:-1], dims[1:]))
        self.dropout = dropout

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # on 2-d rows [B·V, d]: the same addmm a linear layer runs on [B, V, d], but its output is a
        # tensor of its own (not a view), which the fused ReLU-dropout may overwrite
        lead = x.shape[:-1]
        x = x.reshape(-1, x.shape[-1])
        for lin in self.linears[:-1]:
            x = relu_dropout(lin(x), self.dropout, self.training, inplace=True)
        return self.linears[-1](x).view(*lead, -1)


RECOMPUTE_SEGMENTS = 4


class LCModel(nn.Module):
    """Base of the models: ``forward`` runs ``body``, or with ``recompute`` (training only) runs it
    on ``RECOMPUTE_SEGMENTS`` row segments of the batch under ``torch.utils.checkpoint``.

    Only each segment's input (a view of the batch) and output (the logits) live between forward
    and backward; backward rebuilds one segment's activations at a time, so activation memory
    drops about ``RECOMPUTE_SEGMENTS``-fold for one extra forward pass. (Checkpointing single layers
    would save nothing here: a fused ReLU-dropout layer keeps only its output, which is the next
    layer's input anyway.) Dropout masks replay identically in the recomputation (checkpoint
    restores the RNG state), but differ from a run without ``recompute``.
    """

    recompute = False

    def body(self, x: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.recompute and self.training and torch.is_grad_enabled() and x.shape[0] > 1:
            parts = x.chunk(RECOMPUTE_SEGMENTS, dim=0)
            return torch.cat([checkpoint(self.body, part, use_reentrant=False) for part in parts], dim=0)
        return self.body(x)


class SGC(LCModel):
    """SGC (Wu et al. 2019): Z = S^K X W — one linear layer on the K-th hop."""

    def __init__(self, spec: ModelSpec):
        super().__init__()
        self.input_dropout = spec.input_dropout
        self.linear = nn.Linear(spec.in_dim, spec.num_classes)

    def body(self, x):
        x = dropout(x[:, 0], self.input_dropout, self.training)
        return self.linear(x)


class HopMLP(LCModel):
    """LC-GCN (Z = MLP(S^K X), the LC form of a K-layer GCN) and the MLP baseline (Z = MLP(X))."""

    def __init__(self, spec: ModelSpec):
        super().__init__()
        self.input_dropout = spec.input_dropout
        self.mlp = MLP(spec.in_dim, spec.hidden, spec.num_classes, spec.num_layers, spec.dropout)

    def body(self, x):
        return self.mlp(dropout(x[:, 0], self.input_dropout, self.training))


class LCJKNet(LCModel):
    """LC-JKNet (JKNet, Xu et al. 2018, in LC form): hop k passes through the first k layers,

        h_k = f_k(… f_1(S^k X)),   f_l(h) = dropout(ReLU(h W_l + b_l)),   k = 1..K,

    the layers shared across hops as in JKNet (layer l of every path is the same f_l), then the
    jumping-knowledge pool — concat: Z = [h_1 ‖ … ‖ h_K] W_o; max: Z = (max_k h_k) W_o (element-wise).
    Layer l is applied once to the stacked hops l..K (one batched matmul per layer).
    """

    def __init__(self, spec: ModelSpec):
        super().__init__()
        K = spec.hops
        if spec.pool not in ("concat", "max"):
            raise OptionError("--pool", f"{spec.pool!r}: expected concat or max")
        self.pool = spec.pool
        self.K = K
        self.dropout = spec.dropout
        self.input_dropout = spec.input_dropout
        dims = [spec.in_dim] + [spec.hidden] * K
        self.layers = nn.ModuleList(nn.Linear(a, b) for a, b in zip(dims[:-1], dims[1:]))
        self.out = nn.Linear(spec.hidden * (K if self.pool == "concat" else 1), spec.num_classes)

    def _layer(self, i: int, h: torch.Tensor) -> torch.Tensor:
        return relu_dropout(self.layers[i](h), self.dropout, self.training, inplace=True)

    def hop_states(self, x: torch.Tensor) -> list[torch.Tensor]:
        """[h_1, …, h_K], each [B, hidden]; x is [B, K, d] holding hops 1..K."""
        x = dropout(x, self.input_dropout, self.training)
        done = []
        h = x                                # h[:, j] is hop j+1+len(done) after len(done) layers
        for i in range(self.K):
            h = self._layer(i, h)
            done.append(h[:, 0])             # hop i+1 has now been through i+1 layers: finished
            h = h[:, 1:]
        return done

    def body(self, x):
        states = self.hop_states(x)
        if self.pool == "concat":
            z = torch.cat(states, dim=1)
        else:
            z = torch.stack(states, dim=1).amax(dim=1)
        return self.out(z)


def gpr_init(alpha: float, K: int) -> torch.Tensor:
    """γ_k = α(1−α)^k for k < K and γ_K = (1−α)^K (personalised PageRank; the γ sum to 1)."""
    if not 0.0 <= alpha <= 1.0:
        raise OptionError("--alpha", f"{alpha}: expected a value in [0, 1]")
    g = torch.tensor([alpha * (1 - alpha) ** k for k in range(K + 1)], dtype=torch.float64)
    g[K] = (1 - alpha) ** K
    return g.float()


class LCGPRGNN(LCModel):
    """LC-GPRGNN (GPR-GNN, Chien et al. 2021, in LC form): one MLP shared by every hop,

        Z = Σ_{k=0..K} γ_k · dropout_dprate(MLP(S^k X)),   γ learnable, γ_k = α(1−α)^k, γ_K = (1−α)^K.

    The MLP runs once on the stacked hops [B, K+1, d] → [B, K+1, c]; the weighted sum is one
    contraction with γ.
    """

    def __init__(self, spec: ModelSpec):
        super().__init__()
        self.input_dropout = spec.input_dropout
        self.dprate = spec.dprate
        self.mlp = MLP(spec.in_dim, spec.hidden, spec.num_classes, spec.num_layers, spec.dropout)
        self.gamma = nn.Parameter(gpr_init(spec.alpha, spec.hops))

    def body(self, x):
        h = self.mlp(dropout(x, self.input_dropout, self.training))     # [B, K+1, c]
        h = dropout(h, self.dprate, self.training)
        # Σ_k γ_k h[:, k]: a batched [1, K+1] × [K+1, c] product per row; unlike einsum("bkc,k->bc"),
        # which first copies h to [B, c, K+1], it reads h as it lies (same sums, ~2× faster)
        return torch.matmul(self.gamma, h)


class SIGN(LCModel):
    """SIGN (Frasca et al. 2020): Z = MLP(ReLU([X Θ_0 ‖ S X Θ_1 ‖ … ‖ S^K X Θ_K])) with one linear map per
    hop and operator channel (hop 0 once). The V per-view maps run as one batched matmul."""

    def __init__(self, spec: ModelSpec):
        super().__init__()
        V = len(views(spec))
        self.input_dropout = spec.input_dropout
        self.dropout = spec.dropout
        bound = 1.0 / spec.in_dim ** 0.5
        self.weight = nn.Parameter(torch.empty(V, spec.in_dim, spec.hidden).uniform_(-bound, bound))
        self.bias = nn.Parameter(torch.empty(V, spec.hidden).uniform_(-bound, bound))
        self.mlp = MLP(V * spec.hidden, spec.hidden, spec.num_classes, spec.num_layers, spec.dropout)

    def body(self, x):
        x = dropout(x, self.input_dropout, self.training)
        h = torch.einsum("bvd,vdh->bvh", x, self.weight) + self.bias
        h = relu_dropout(h, self.dropout, self.training, inplace=True)
        return self.mlp(h.flatten(1))


_CLASSES = {"sgc": SGC, "lc-gcn": HopMLP, "mlp": HopMLP, "lc-jknet": LCJKNet, "lc-gprgnn": LCGPRGNN, "sign": SIGN}


def build_model(spec: ModelSpec) -> nn.Module:
    check_model_name(spec.name)
    if spec.hidden < 1:
        raise OptionError("--hidden", f"{spec.hidden}: expected a positive width")
    for what, p in (("--dropout", spec.dropout), ("--dprate", spec.dprate), ("--input-dropout", spec.input_dropout)):
        if not 0.0 <= p < 1.0:
            raise OptionError(what, f"{p}: expected a probability in [0, 1)")
    views(spec)  # validates hops for the model
    if spec.name == "sgc" and spec.layers not in (None, 1):
        raise OptionError("--layers", f"{spec.layers}: sgc is one linear layer")
    if spec.name == "lc-jknet" and spec.layers not in (None, spec.hops):
        raise OptionError("--layers", f"{spec.layers}: lc-jknet has one layer per hop; set --hops instead")
    model = _CLASSES[spec.name](spec)
    model.recompute = spec.recompute
    return model


def training_bytes(spec: ModelSpec, batch_rows: int) -> tuple[int, int]:
    """(parameters, bytes) training ``spec`` on batches of ``batch_rows`` holds, estimated without
    allocating anything (the model is built on torch's ``meta`` device): float32 weights, their
    gradients, Adam's two moments and the best state kept aside (5 copies), plus one batch's layer
    outputs and their gradients (each layer keeps one [B, views, width] output for backward;
    ``recompute`` keeps a quarter of them)."""
    with torch.device("meta"):
        model = build_model(spec)
    params = sum(p.numel() for p in model.parameters())
    width = max(spec.hidden, spec.num_classes, spec.in_dim)
    activations = batch_rows * len(views(spec)) * width * (spec.num_layers + 1) * 4 * 2
    if spec.recompute:
        activations //= RECOMPUTE_SEGMENTS
    return params, params * 4 * 5 + activations
