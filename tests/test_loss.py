"""loss.py: hand-computed values, micro-batch invariance under both aggregations, equality with
verl's agg_loss and the released actor, non-finite masked values, and SLCA's gradient isolation."""
import math

import pytest
import torch
from torch import nn

from advantage import grpo_advantages, route, slca_advantages
from loss import Clip, policy_loss
from segment import segment_masks

TOKEN = Clip(loss_agg="token-mean")  # Eq. 12 as the paper states it: one mean over the tokens


def test_hand_computed_value():
    # token 1: A>0, ratio 1.5 clipped at 1.2; token 2: A<0, ratio 0.5 clipped at 0.8;
    # token 3: A<0, ratio 5 hits the dual clip c=3 and has a KL; token 4 is masked out.
    logp = torch.tensor([[math.log(1.5), math.log(0.5), math.log(5.0), 0.0]])
    old = torch.zeros(1, 4)
    ref = logp + torch.tensor([[0.0, 0.0, math.log(2.0), 0.0]])
    A = torch.tensor([[1.0, -1.0, -1.0, 10.0]])
    mask = torch.tensor([[1, 1, 1, 0]])
    loss, st = policy_loss(logp, old, ref, A, mask, norm=3, clip=TOKEN)
    kl3 = 2.0 - math.log(2.0) - 1.0
    assert loss.item() == pytest.approx((-1.2 + 0.8 + 3.0 + 0.001 * kl3) / 3, rel=1e-6)
    assert st["clip_frac"] == pytest.approx(2 / 3)
    assert st["dual_clip_frac"] == pytest.approx(1 / 3)
    assert st["kl"] == pytest.approx(kl3 / 3, rel=1e-6)
    assert st["ratio"] == pytest.approx((1.5 + 0.5 + 5.0) / 3, rel=1e-6)
    # without KL the reference may be absent
    loss0, _ = policy_loss(logp, old, None, A, mask, norm=3, clip=Clip(kl_beta=0.0, loss_agg="token-mean"))
    assert loss0.item() == pytest.approx(2.6 / 3, rel=1e-6)


def test_ratio_is_clamped():
    loss, st = policy_loss(torch.tensor([[50.0]]), torch.zeros(1, 1), torch.tensor([[50.0]]),
                           torch.tensor([[1.0]]), torch.ones(1, 1), 1, clip=TOKEN)
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


def norm_of(mask, agg):
    """Eq. 12's N for the whole mini-batch: tokens, or rows with at least one token."""
    return int(mask.sum()) if agg == "token-mean" else int((mask.sum(-1) > 0).sum())


def grads(model, ids, mask, A, old, ref, splits, norm=None, agg="token-mean"):
    model.zero_grad()
    n = norm_of(mask, agg) if norm is None else norm
    for part in torch.arange(ids.shape[0]).chunk(splits):
        loss, _ = policy_loss(model.logp(ids[part]), old[part], ref[part], A[part], mask[part], n, clip=Clip(loss_agg=agg))
        loss.backward()
    return torch.cat([p.grad.flatten().clone() for p in model.parameters()])


def setup(seed=0):
    model, (ids, mask) = Tiny(), batch(seed)
    mask[5] = 0  # a rollout dropped from the loss: adds nothing, counts in no normaliser
    g = torch.Generator().manual_seed(1)
    A = torch.randn(ids.shape, generator=g, dtype=torch.float64) * mask
    with torch.no_grad():
        lp = model.logp(ids)
    old = lp + 0.3 * torch.randn(ids.shape, generator=g, dtype=torch.float64)  # ratios off 1: clips active
    ref = lp + 0.1 * torch.randn(ids.shape, generator=g, dtype=torch.float64)
    return model, ids, mask, A, old, ref


@pytest.mark.parametrize("agg", ["token-mean", "seq-mean-token-mean"])
def test_micro_batch_invariance(agg):
    model, ids, mask, A, old, ref = setup()
    one, four = grads(model, ids, mask, A, old, ref, 1, agg=agg), grads(model, ids, mask, A, old, ref, 4, agg=agg)
    assert one.abs().sum() > 0
    assert torch.allclose(one, four, rtol=1e-10, atol=1e-12)
    # stats add up over micro-batches as well
    n = norm_of(mask, agg)
    parts = [policy_loss(model.logp(ids[p]), old[p], ref[p], A[p], mask[p], n, clip=Clip(loss_agg=agg))[1]
             for p in torch.arange(8).chunk(4)]
    whole = policy_loss(model.logp(ids), old, ref, A, mask, n, clip=Clip(loss_agg=agg))[1]
    for k, v in whole.items():
        assert sum(st[k] for st in parts) == pytest.approx(v, rel=1e-5, abs=1e-9)


def test_per_micro_batch_token_mean_is_not_invariant():
    # the bug the normaliser guards against: a token mean inside each micro-batch
    model, ids, mask, A, old, ref = setup()
    one = grads(model, ids, mask, A, old, ref, 1)
    model.zero_grad()
    for part in torch.arange(8).chunk(4):
        loss, _ = policy_loss(model.logp(ids[part]), old[part], ref[part], A[part], mask[part], int(mask[part].sum()), clip=TOKEN)
        (loss / 4).backward()
    wrong = torch.cat([p.grad.flatten() for p in model.parameters()])
    assert not torch.allclose(one, wrong, rtol=1e-6)


def test_the_two_aggregations_differ():
    # rows of different lengths: token-mean weighs long rows more, seq-mean-token-mean does not
    model, ids, mask, A, old, ref = setup()
    assert len(set(mask.sum(-1).tolist())) > 2
    tok = grads(model, ids, mask, A, old, ref, 1, agg="token-mean")
    seq = grads(model, ids, mask, A, old, ref, 1, agg="seq-mean-token-mean")
    assert (tok - seq).norm() > 0.05 * tok.norm()
    # equal lengths: the two coincide
    m = torch.zeros_like(mask)
    m[:, 2:9] = 1
    n_seq = norm_of(m, "seq-mean-token-mean")
    assert n_seq == 8
    assert torch.allclose(grads(model, ids, m, A, old, ref, 1, agg="token-mean"),
                          grads(model, ids, m, A, old, ref, 1, agg="seq-mean-token-mean"), rtol=1e-10, atol=1e-12)
    with pytest.raises(ValueError):
        policy_loss(old, old, ref, A, mask, 1, clip=Clip(loss_agg="seq-mean"))


# --- verl, restated in plain PyTorch: what the release's actor computes --------------------------
def verl_agg_loss(x, m, mode):
    """verl's core_algos.agg_loss with no global batch info (how dp_actor calls it)."""
    m = m.to(x.dtype)
    if mode == "token-mean":
        return (x * m).sum() / m.sum()
    count = m.sum(-1)
    seq = (x * m).sum(-1) / (count + 1e-8)
    present = (count > 0).to(x.dtype)
    return (seq * present).sum() / present.sum()


def verl_update(logp, old, ref, A, mask, mode, micro, eps=0.2, c=3.0, beta=0.001):
    """dp_actor.update_policy on one mini-batch (vanilla loss, use_kl_loss, low_var_kl): the
    sum over micro-batches of (agg(pg) + β·agg(kl)) / gradient-accumulation steps."""
    neg_kl = (logp - old).clamp(-20, 20)
    r = neg_kl.exp()
    c1 = torch.maximum(-A * r, -A * r.clamp(1 - eps, 1 + eps))
    pg = torch.where(A < 0, torch.min(-A * c, c1), c1)
    d = (ref - logp).clamp(-20, 20)
    kl = (d.exp() - d - 1).clamp(-10, 10)
    parts = torch.arange(logp.shape[0]).split(micro)
    return sum((verl_agg_loss(pg[p], mask[p], mode) + beta * verl_agg_loss(kl[p], mask[p], mode)) / len(parts)
               for p in parts)


def random_case(seed, B=6, T=10, empty_row=False):
    g = torch.Generator().manual_seed(seed)
    mask = (torch.rand(B, T, generator=g) < 0.6).long()
    mask[:, 0] = 1
    if empty_row:
        mask[2] = 0
    logp = (-2 * torch.rand(B, T, generator=g, dtype=torch.float64)).requires_grad_()
    old = logp.detach() + 0.4 * torch.randn(B, T, generator=g, dtype=torch.float64)
    ref = logp.detach() + 0.5 * torch.randn(B, T, generator=g, dtype=torch.float64)
    A = torch.randn(B, T, generator=g, dtype=torch.float64)
    return logp, old, ref, A, mask


def same(ours, theirs, logp):
    g1, = torch.autograd.grad(ours, logp)
    g2, = torch.autograd.grad(theirs, logp)
    assert ours.item() == pytest.approx(theirs.item(), rel=1e-7)
    assert torch.allclose(g1, g2, rtol=1e-6, atol=1e-12)


@pytest.mark.parametrize("seed", range(4))
def test_release_setting_is_seq_mean_token_mean(seed):
    # the release: loss_agg_mode token-mean, one rollout per micro-batch, 1/grad-accum scaling
    logp, old, ref, A, mask = random_case(seed)
    ours, _ = policy_loss(logp, old, ref, A, mask, mask.shape[0], clip=Clip(loss_agg="seq-mean-token-mean"))
    same(ours, verl_update(logp, old, ref, A, mask, "token-mean", micro=1), logp)
    # ...which differs from a token mean over the mini-batch
    tok, _ = policy_loss(logp, old, ref, A, mask, int(mask.sum()), clip=TOKEN)
    assert abs(tok.item() - ours.item()) > 1e-3


@pytest.mark.parametrize("mode", ["token-mean", "seq-mean-token-mean"])
@pytest.mark.parametrize("seed", range(3))
def test_matches_verl_agg_loss_on_one_micro_batch(mode, seed):
    # verl's own modes over the whole mini-batch; an empty row is left out of seq-mean's count
    logp, old, ref, A, mask = random_case(seed, empty_row=True)
    n = int(mask.sum()) if mode == "token-mean" else int((mask.sum(-1) > 0).sum())
    ours, _ = policy_loss(logp, old, ref, A, mask, n, clip=Clip(loss_agg=mode))
    same(ours, verl_update(logp, old, ref, A, mask, mode, micro=mask.shape[0]), logp)


@pytest.mark.parametrize("agg", ["token-mean", "seq-mean-token-mean"])
def test_non_finite_values_at_masked_positions_do_not_leak(agg):
    nan, inf = float("nan"), float("inf")
    mask = torch.tensor([[1, 0, 1, 0], [0, 0, 0, 0], [1, 1, 0, 0]])
    clean = [torch.tensor(v, dtype=torch.float64) for v in (
        [[-1.0, -0.3, -0.5, -0.2], [-0.1, -0.2, -0.3, -0.4], [-0.7, -1.1, -0.2, -0.3]],   # logp
        [[-1.2, -0.1, -0.4, -0.2], [-0.1, -0.2, -0.3, -0.4], [-0.2, -1.0, -0.2, -0.3]],   # old
        [[-0.9, -0.2, -0.6, -0.2], [-0.1, -0.2, -0.3, -0.4], [-0.8, -1.5, -0.2, -0.3]],   # ref
        [[1.0, 0.5, -2.0, 0.5], [0.0, 0.0, 0.0, 0.0], [-0.5, 0.3, 0.0, 0.0]])]            # A
    dirty = [x.clone() for x in clean]
    for x, bad in zip(dirty, ([nan, inf], [-inf, nan], [inf, nan], [nan, -inf])):
        x[0, 1], x[1, 2] = bad                 # masked positions, one in the empty row
        x[2, 3] = nan
    n = int(mask.sum()) if agg == "token-mean" else 2
    out = []
    for lp, old, ref, A in (clean, dirty):
        lp = lp.clone().requires_grad_()
        loss, st = policy_loss(lp, old, ref, A, mask, n, clip=Clip(loss_agg=agg))
        g, = torch.autograd.grad(loss, lp)
        out.append((loss, st, g))
    (l0, s0, g0), (l1, s1, g1) = out
    assert torch.isfinite(l1) and l1.item() == pytest.approx(l0.item(), rel=1e-12)
    assert s1 == pytest.approx(s0, rel=1e-6)
    assert torch.isfinite(g1).all() and torch.equal(g1, g0)
    assert torch.all(g1[mask == 0] == 0)


def test_empty_mini_batch_gives_zero():
    z = torch.zeros(2, 3)
    loss, st = policy_loss(z, z, z, z, torch.zeros(2, 3), 0, clip=Clip(loss_agg="seq-mean-token-mean"))
    assert loss.item() == 0.0 and all(v == 0.0 for v in st.values())


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


def test_decision_credit_isolates_the_decision_from_the_summary_reward():
    """Eq. 15 through a model's gradient: with the decision tokens paid Â_tool, no change to R_sum
    moves the gradient on a tool token or a decision token, and no change to R_tool moves it on the
    other summary tokens; under Eq. 8 the same change to R_sum does move the decision tokens'."""
    from advantage import route_decision
    from segment import decision_mask
    model, (ids, mask) = Tiny(), batch(seed=3)
    tool, summ, tp, sp = segment_masks(mask)
    d = decision_mask(mask, ids, lambda x: "".join("<" if i == 6 else "x" for i in x))  # id 6 opens like a call
    assert d.sum() > tp.sum() - 1 and (d.sum(1) > 0).tolist() == tp.tolist()
    gids = torch.arange(8) // 4
    g = torch.Generator().manual_seed(2)
    r_tool, r_sum, r_sum2, r_tool2 = (torch.rand(8, generator=g, dtype=torch.float64) for _ in range(4))
    with torch.no_grad():
        lp = model.logp(ids)
    old = lp + 0.2 * torch.randn(ids.shape, generator=g, dtype=torch.float64)
    n = int(mask.sum())

    def slca(rt, rs, seg_mask, decision=True):
        at, asum = slca_advantages(rt, rs, tp, sp, gids)
        A = route(at, asum, tool, summ)
        return grads(model, ids, seg_mask, route_decision(A, at, d) if decision else A, old, lp, 1, n)

    tool_side, rest = tool + d, summ - d
    g_tool = slca(r_tool, r_sum, tool_side)
    assert g_tool.abs().sum() > 0 and torch.equal(g_tool, slca(r_tool, r_sum2, tool_side))
    g_rest = slca(r_tool, r_sum, rest)
    assert g_rest.abs().sum() > 0 and torch.equal(g_rest, slca(r_tool2, r_sum, rest))
    assert not torch.allclose(slca(r_tool, r_sum, d), slca(r_tool2, r_sum, d))          # the decision follows R_tool
    assert not torch.allclose(slca(r_tool, r_sum, d, False), slca(r_tool, r_sum2, d, False))  # Eq. 8: it follows R_sum
