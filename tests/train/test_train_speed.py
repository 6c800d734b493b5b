"""The trainer's fast paths (issue 14) compute exactly what the plain torch formulation computes.

- the numba ReLU-dropout / dropout kernels: forward and backward bit-for-bit equal to
  ``relu(h) * keep * scale`` and ``h * (keep * scale)`` with the masks of ``_keep_mask`` (same draws);
- the full-range random draw equals the old ``random_(-2**63, 2**63 - 1)`` words;
- in-place only where allowed: a caller's tensor (leaf, view) is never overwritten;
- the MLP on 2-d rows and the γ sum by matmul equal the 3-d linear layers and the einsum;
- evaluation runs without autograd and gives the same numbers.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from gnnprep.train import models as M


def _ref_relu_dropout(h, p, seed):
    torch.manual_seed(seed)
    keep, scale = M._keep_mask(h.shape, p, h.device)
    return torch.relu(h) * keep * scale


def test_random_words_are_the_old_draws():
    torch.manual_seed(3)
    old = torch.empty(10_001, dtype=torch.int64).random_(-2**63, 2**63 - 1)
    torch.manual_seed(3)
    assert torch.equal(M._random_words(10_001, "cpu"), old)
    assert torch.equal(torch.get_rng_state(), (torch.manual_seed(3), torch.empty(10_001, dtype=torch.int64)
                                               .random_(-2**63, 2**63 - 1), torch.get_rng_state())[2])


@pytest.mark.parametrize("p", [0.5, 0.3, 0.0001])
@pytest.mark.parametrize("inplace", [False, True])
def test_relu_dropout_kernel_is_bitwise_the_torch_formula(p, inplace):
    g = torch.Generator().manual_seed(1)
    h0 = torch.randn(777, 65, generator=g)
    h0[0, :4] = torch.tensor([-0.0, float("nan"), float("inf"), float("-inf")])
    grad = torch.randn(777, 65, generator=g)
    ref = _ref_relu_dropout(h0, p, 9)
    # the documented backward: the gradient passes where the output is positive (or NaN, as
    # threshold_backward passes it), scaled by 1/(1 − p)
    scale = M._drop_threshold(p)[1]
    ref_grad = torch.ops.aten.threshold_backward.default(grad, ref, 0.0) * scale
    x = h0.clone().requires_grad_(True)
    h = x * 1.0                                   # a fresh non-leaf: what a linear layer hands over
    torch.manual_seed(9)
    out = M.relu_dropout(h, p, True, inplace=inplace)
    assert (out.data_ptr() == h.data_ptr()) == inplace
    out.backward(grad)
    assert torch.equal(out.detach().nan_to_num(7.0), ref.detach().nan_to_num(7.0))
    assert torch.equal(torch.signbit(out.detach()), torch.signbit(ref.detach()))
    assert torch.equal(x.grad.nan_to_num(7.0), ref_grad.nan_to_num(7.0))
    assert torch.equal(torch.signbit(x.grad), torch.signbit(ref_grad))


def test_relu_dropout_never_overwrites_a_callers_tensor():
    h = torch.randn(50, 8, requires_grad=True)
    before = h.detach().clone()
    M.relu_dropout(h, 0.5, True).sum().backward()        # a leaf: not in place
    base = torch.randn(10, 4, 8)
    view = base.view(40, 8)
    M.relu_dropout(view, 0.5, True, inplace=True)        # a view: not in place either
    M.relu_dropout(view, 0.5, False, inplace=True)
    assert torch.equal(h.detach(), before)
    assert torch.equal(base.view(40, 8), view) and (base < 0).any()


@pytest.mark.parametrize("shape", [(333, 5, 17), (1000,)])
def test_dropout_kernel_is_bitwise_the_torch_formula(shape):
    h0 = torch.randn(*shape)
    grad = torch.randn(*shape)
    ref_h = h0.clone().requires_grad_(True)
    torch.manual_seed(4)
    keep, scale = M._keep_mask(h0.shape, 0.5, h0.device)
    ref = ref_h * (keep * scale)
    ref.backward(grad)
    x = h0.clone().requires_grad_(True)
    torch.manual_seed(4)
    out = M.dropout(x, 0.5, True)
    out.backward(grad)
    assert torch.equal(out, ref) and torch.equal(x.grad, ref_h.grad)
    noncontiguous = h0.clone().unsqueeze(-1).expand(*shape, 2)[..., 0]
    torch.manual_seed(4)
    assert torch.equal(M.dropout(noncontiguous, 0.5, True), ref.detach())


def test_gprgnn_forward_and_grads_equal_the_plain_formulation():
    spec = M.ModelSpec(name="lc-gprgnn", in_dim=24, num_classes=7, hops=4, hidden=32, dropout=0.5, dprate=0.5)
    torch.manual_seed(0)
    model = M.build_model(spec).train()
    x = torch.randn(300, 5, 24)
    y = torch.randint(0, 7, (300,))

    def plain(x):                                  # the pre-issue-14 formulation, same draws
        h = x
        for lin in model.mlp.linears[:-1]:
            h = _ref_relu_dropout_draw(lin(h), spec.dropout)
        h = model.mlp.linears[-1](h)
        keep, scale = M._keep_mask(h.shape, spec.dprate, h.device)
        return torch.einsum("bkc,k->bc", h * (keep * scale), model.gamma)

    torch.manual_seed(5)
    z = model(x)
    torch.nn.functional.cross_entropy(z, y).backward()
    grads = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    torch.manual_seed(5)
    z_ref = plain(x)
    torch.nn.functional.cross_entropy(z_ref, y).backward()
    torch.testing.assert_close(z, z_ref, rtol=0, atol=0)
    for a, p in zip(grads, model.parameters()):
        torch.testing.assert_close(a, p.grad, rtol=1e-6, atol=1e-7)
    model.eval()
    with torch.inference_mode():
        ev = model(x)
    with torch.no_grad():
        h = x
        for lin in model.mlp.linears[:-1]:
            h = torch.relu(lin(h))
        ref_ev = torch.einsum("bkc,k->bc", model.mlp.linears[-1](h), model.gamma)
    torch.testing.assert_close(ev, ref_ev, rtol=0, atol=0)


def _ref_relu_dropout_draw(h, p):
    keep, scale = M._keep_mask(h.shape, p, h.device)
    return torch.relu(h) * keep * scale


def test_keep_freed_memory_is_harmless_and_once():
    from gnnprep.core import memory

    memory.keep_freed_memory()
    memory.keep_freed_memory()
    assert memory._ALLOCATOR_TUNED
    a = torch.empty(40 * 2**20 // 4)
    del a
    assert np.isfinite(float(torch.ones(10).sum()))
