"""loss.py: a hand-computed value, micro-batch invariance, and SLCA's gradient isolation."""
import math

import pytest
import torch
from torch import nn

from advantage import grpo_advantages, route, slca_advantages
from loss import policy_loss
from segment import segment_masks


def test_hand_computed_value():
    # token 1: A>0, ratio 1.5 clipped at 1.2; token 2: A<0, ratio 0.5 clipped at 0.8;
    # token 3: A<0, ratio 5 hits the dual clip c=3 and has a KL; token 4 is masked out.
    logp = torch.tensor([[math.log(1.5), math.log(0.5), math.log(5.0), 0.0]])
    old = torch.zeros(1, 4)
    ref = logp + torch.tensor([[0.0, 0.0, math.log(2.0), 0.0]])
    A = torch.tensor([[1.0, -1.0, -1.0, 10.0]])
    mask = torch.tensor([[1, 1, 1, 0]])
    loss, st = policy_loss(logp, old, ref, A, mask, num_tokens=3)
    kl3 = 2.0 - math.log(2.0) - 1.0
    assert loss.item() == pytest.approx((-1.2 + 0.8 + 3.0 + 0.001 * kl3) / 3, rel=1e-6)
    assert st["clip_frac"] == pytest.approx(2 / 3)
    assert st["dual_clip_frac"] == pytest.approx(1 / 3)
    assert st["kl"] == pytest.approx(kl3 / 3, rel=1e-6)
    assert st["ratio"] == pytest.approx((1.5 + 0.5 + 5.0) / 3, rel=1e-6)
    # without KL the reference may be absent
    loss0, _ = policy_loss(logp, old, None, A, mask, num_tokens=3, kl_beta=0.0)
    assert loss0.item() == pytest.approx(2.6 / 3, rel=1e-6)


def test_ratio_is_clamped():
    loss, st = policy_loss(torch.tensor([[50.0]]), torch.zeros(1, 1), torch.tensor([[50.0]]),
                           torch.tensor([[1.0]]), torch.ones(1, 1), 1)
    assert torch.isfinite(loss) and st["ratio"] == pytest.approx(math.exp(20.0), rel=1e-5)


class Tiny(nn.Module):
    """A small causal LM: embedding, GRU, head."""

    def __init__(self, vocab=11, dim=8):
        super().__init__()
        torch.manual_seed(0)
        self.emb, self.rnn, self.head = nn.Embedding(vocab, dim), nn.GRU(dim, dim, batch_first=True), nn.Linear(dim, vocab)
        self.double()

    def logp(self, ids):  # (B, T) -> log-prob of each token given its prefix, (B, T); first token gets 0
        h, _ = self.rnn(self.emb(ids))
        lp = self.head(h[:, :-1]).log_softmax(-1).gather(-1, ids[:, 1:, None])[..., 0]  # (B, T-1)
        return torch.cat([torch.zeros_like(lp[:, :1]), lp], 1)


def batch(seed=0, B=8, T=12):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, 11, (B, T), generator=g)
    # prompt | tool turn | observation | summary | padding, with row-varying lengths
    mask = torch.zeros(B, T, dtype=torch.long)
    for b in range(B):
        mask[b, 2:4 + b % 3] = 1
        mask[b, 6:8 + b % 4] = 1
    mask[0, :] = 0
    mask[0, 3:6] = 1  # a rollout with no tool call: all summary
    return ids, mask


def grads(model, ids, mask, A, old, ref, splits, num_tokens=None):
    model.zero_grad()
    n = int(mask.sum()) if num_tokens is None else num_tokens
    for part in torch.arange(ids.shape[0]).chunk(splits):
        loss, _ = policy_loss(model.logp(ids[part]), old[part], ref[part], A[part], mask[part], n)
        loss.backward()
    return torch.cat([p.grad.flatten().clone() for p in model.parameters()])


def test_micro_batch_invariance():
    model, (ids, mask) = Tiny(), batch()
    g = torch.Generator().manual_seed(1)
    A = torch.randn(ids.shape, generator=g, dtype=torch.float64) * mask
    with torch.no_grad():
        lp = model.logp(ids)
    old = lp + 0.3 * torch.randn(ids.shape, generator=g, dtype=torch.float64)  # ratios off 1: clips active
    ref = lp + 0.1 * torch.randn(ids.shape, generator=g, dtype=torch.float64)
    one, four = grads(model, ids, mask, A, old, ref, 1), grads(model, ids, mask, A, old, ref, 4)
    assert one.abs().sum() > 0
    assert torch.allclose(one, four, rtol=1e-10, atol=1e-12)
    # a per-micro-batch token mean (the bug this guards against) would differ
    model.zero_grad()
    for part in torch.arange(8).chunk(4):
        loss, _ = policy_loss(model.logp(ids[part]), old[part], ref[part], A[part], mask[part], int(mask[part].sum()))
        (loss / 4).backward()
    wrong = torch.cat([p.grad.flatten() for p in model.parameters()])
    assert not torch.allclose(one, wrong, rtol=1e-6)


def test_gradient_isolation_slca_vs_grpo():
    """∂g_tool/∂R_sum = 0 and ∂g_sum/∂R_tool = 0 under SLCA, bit for bit; GRPO mixes them."""
    model, (ids, mask) = Tiny(), batch(seed=3)
    tool, summ, tp, sp = segment_masks(mask)
    gids = torch.arange(8) // 4                                   # two groups of G = 4
    g = torch.Generator().manual_seed(2)
    r_tool = torch.rand(8, generator=g, dtype=torch.float64)
    r_sum = torch.rand(8, generator=g, dtype=torch.float64)
    r_sum2 = torch.rand(8, generator=g, dtype=torch.float64)     # only the summary rewards change
    r_tool2 = torch.rand(8, generator=g, dtype=torch.float64)    # only the tool rewards change
    with torch.no_grad():
        lp = model.logp(ids)
    old = lp + 0.2 * torch.randn(ids.shape, generator=g, dtype=torch.float64)
    n = int(mask.sum())

    def slca(rt, rs, seg_mask):
        A = route(*slca_advantages(rt, rs, tp, sp, gids), tool, summ)
        return grads(model, ids, seg_mask, A, old, lp, 1, n)

    def grpo(rt, rs, seg_mask):
        A = grpo_advantages(rt + rs, gids)[:, None] * mask
        return grads(model, ids, seg_mask, A, old, lp, 1, n)

    # SLCA: the tool tokens' gradient ignores R_sum, the summary tokens' gradient ignores R_tool
    g_tool = slca(r_tool, r_sum, tool)
    assert g_tool.abs().sum() > 0
    assert torch.equal(g_tool, slca(r_tool, r_sum2, tool))
    g_sum = slca(r_tool, r_sum, summ)
    assert g_sum.abs().sum() > 0
    assert torch.equal(g_sum, slca(r_tool2, r_sum, summ))
    # ...while each still responds to its own reward
    assert not torch.allclose(g_tool, slca(r_tool2, r_sum, tool))
    # GRPO: the same change moves both
    assert not torch.allclose(grpo(r_tool, r_sum, tool), grpo(r_tool, r_sum2, tool))
    assert not torch.allclose(grpo(r_tool, r_sum, summ), grpo(r_tool2, r_sum, summ))
