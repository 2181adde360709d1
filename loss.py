"""PPO-clip policy loss with dual clip and a k3 KL to the reference (README Eqs. 9-12, docs/method.md §4).

    r_{i,t}   = exp(clamp(logπ_θ - logπ_old, -20, 20))                               (Eq. 9)
    L^clip    = max(-A·r, -A·clip(r, 1-ε, 1+ε)),   ε = 0.2                            (Eq. 10)
    L         = min(L^clip, -A·c) where A < 0, else L^clip,   c = 3  (dual clip)
    KL        = exp(d) - d - 1,  d = clamp(logπ_ref - logπ_θ, -20, 20), then
                clamped to [-10, 10]  (k3, verl's "low_var_kl")                       (Eq. 11)
    loss      = agg_{masked i,t} (L + β·KL),   β = 0.001                              (Eq. 12)

    "token-mean"           Σ_{i,t} x_{i,t} / N,          N = masked tokens of the mini-batch
    "seq-mean-token-mean"  Σ_i (Σ_t x_{i,t} / n_i) / N,  N = rows of the mini-batch with n_i > 0

The caller passes N (`normaliser`, summed over ranks), so any split into micro-batches gives
the same gradient; KL is aggregated as L; a row with an empty mask adds 0. `Clip` holds the
knobs (ε, c, β, the aggregation), train.py's flags of the same names; its aggregation is the
release's "seq-mean-token-mean" (what verl's actor optimised), `Clip(loss_agg="token-mean")` the
paper's statement. Masked positions are removed with torch.where, never a product, so NaN
or inf there reaches neither loss, stats nor gradient. The same loss for GRPO, SLCA and
ToolPO; mirrors verl's compute_policy_loss_vanilla, agg_loss and kl_penalty("low_var_kl").
`grad_cosine` is the paper's tool-versus-summary gradient cosine. Details: docs/method.md §4.
"""
import math
from dataclasses import dataclass, field

import torch

from lib.training.dist import all_sum

CLIP_EPS = 0.2     # docs/method.md §4 / paper: PPO clip range
CLIP_C = 3.0       # docs/method.md §4: dual-clip constant
KL_BETA = 0.001    # docs/method.md §4: weight of the k3 KL to the SFT reference
AGGS = ("token-mean", "seq-mean-token-mean")  # Eq. 12 aggregations (names as verl's loss_agg_mode)


@dataclass(frozen=True)
class Clip:
    """The loss's knobs (docs/method.md §4): train.py's flags of the same names, in its "loss" group."""
    clip_eps: float = field(default=CLIP_EPS, metadata={"help": "ε of Eq. 10's ratio clip", "range": "(0, 1]",
                                                        "hidden": True})
    clip_c: float = field(default=CLIP_C, metadata={"help": "dual-clip constant", "range": "(1, 100]",  # verl asserts c > 1
                                                    "hidden": True})
    kl_beta: float = field(default=KL_BETA, metadata={"help": "0 drops the reference model", "range": "[0, 100]"})
    loss_agg: str = field(default=AGGS[1], metadata={
        "choices": AGGS, "help": "seq-mean-token-mean = what the released run computed (one rollout per micro-batch): "
        "a mean over rollouts of per-rollout token means; token-mean = one mean over the mini-batch's tokens"})


def policy_loss(logp, old_logp, ref_logp, advantages, mask, norm, *, clip=Clip()):
    """Eqs. 9-12 on one micro-batch, under `clip`'s ε, c, β and aggregation. All tensors (B, T);
    ref_logp may be None when β = 0.

    mask: 0/1 (any dtype), the tokens that count. norm: the mini-batch's N for the aggregation
    (see the module docstring); a count, where 0 is taken as 1 (an empty mini-batch gives loss 0).

    Returns (loss, stats): loss is a scalar to backpropagate; stats holds floats that sum
    over micro-batches into mini-batch aggregates, under the same `agg` (pg_loss, kl,
    clip_frac, dual_clip_frac, approx_kl between old and current policy, ratio).
    """
    clip_eps, clip_c, kl_beta, agg = clip.clip_eps, clip.clip_c, clip.kl_beta, clip.loss_agg
    if agg not in AGGS:
        raise ValueError(f"loss_agg must be one of {AGGS}, got {agg!r}")
    m = mask.bool()                                            # (B, T)
    keep = lambda x: torch.where(m, x, 0.0)                    # noqa: E731  masked positions -> 0
    logp, old_logp, advantages = keep(logp), keep(old_logp), keep(advantages)
    log_ratio = (logp - old_logp).clamp(-20.0, 20.0)           # (B, T)
    ratio = log_ratio.exp()                                    # (B, T)  Eq. 9
    pg1 = -advantages * ratio                                  # (B, T)
    pg2 = -advantages * ratio.clamp(1 - clip_eps, 1 + clip_eps)
    clipped = torch.maximum(pg1, pg2)                          # (B, T)  Eq. 10
    pg3 = -advantages * clip_c
    pg = torch.where(advantages < 0, torch.minimum(clipped, pg3), clipped)  # (B, T) dual clip
    total = pg
    kl = torch.zeros_like(logp)
    if kl_beta:
        d = (keep(ref_logp) - logp).clamp(-20.0, 20.0)         # (B, T)
        kl = (d.exp() - d - 1).clamp(-10.0, 10.0)              # (B, T)  Eq. 11
        total = pg + kl_beta * kl
    n_row = m.sum(-1).clamp(min=1)                             # (B,) tokens per row
    norm = max(norm, 1)

    def aggregate(x):                                          # (B, T) -> scalar, Eq. 12
        rows = keep(x).sum(-1)                                 # (B,)
        if agg == "seq-mean-token-mean":
            rows = rows / n_row
        return rows.sum() / norm

    def share(x):
        return float(aggregate(x.detach().float()))

    stats = {"pg_loss": share(pg), "kl": share(kl), "clip_frac": share(pg2 > pg1),
             "dual_clip_frac": share((advantages < 0) & (clipped > pg3)),
             "approx_kl": share(-log_ratio), "ratio": share(ratio)}
    return aggregate(total), stats


def normaliser(mask, agg):
    """Eq. 12's N of one mini-batch, summed over ranks: mask (b, L) holds the mini-batch's rows
    on this rank. token-mean: its masked tokens; seq-mean-token-mean: its rollouts with at least
    one masked token (a rollout dropped from the loss, whose mask is all 0, does not count). At
    least 1."""
    local = float(mask.sum()) if agg == "token-mean" else float((mask.sum(1) > 0).sum())
    return max(all_sum(local), 1.0)


def grad_cosine(model, accumulate):
    """The paper's diagnostic: cosine between the gradients that the tool-segment tokens and the
    summary-segment tokens contribute to one mini-batch's loss. accumulate(mask_key) backpropagates
    that loss counting only the tokens of "tool_mask" or "summary_mask"; called once for each
    (two extra backward passes), the gradients are cleared before, between and after. 0 when
    either gradient is zero."""
    grads = []
    for key in ("tool_mask", "summary_mask"):
        model.zero_grad(set_to_none=True)
        accumulate(key)
        grads.append([(p.grad.to_local() if hasattr(p.grad, "to_local") else p.grad).flatten()
                      if p.grad is not None else torch.zeros(0) for p in model.parameters()])
    model.zero_grad(set_to_none=True)
    dot, n0, n1 = all_sum([sum(float((g0 * g1).sum()) for g0, g1 in zip(*grads) if g0.numel() and g1.numel()),
                           sum(float(g.pow(2).sum()) for g in grads[0]), sum(float(g.pow(2).sum()) for g in grads[1])])
    return dot / math.sqrt(n0 * n1) if n0 > 0 and n1 > 0 else 0.0
