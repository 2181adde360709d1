"""The PPO-clip policy loss with dual clip and a k3 KL to the reference (SPEC §4, Eqs. 9-12).

    r_{i,t}   = exp(clamp(logπ_θ - logπ_old, -20, 20))                               (Eq. 9)
    L^clip    = max(-A·r, -A·clip(r, 1-ε, 1+ε)),   ε = 0.2                            (Eq. 10)
    L         = min(L^clip, -A·c) where A < 0, else L^clip,   c = 3  (dual clip)
    KL        = exp(d) - d - 1,  d = logπ_ref - logπ_θ, clamped to [-10, 10]  (k3)     (Eq. 11)
    loss      = Σ_{masked i,t} (L + β·KL) / N,   β = 0.001                            (Eq. 12)

N is the number of masked tokens in the whole PPO mini-batch, passed in by the caller, so
summing the loss over any split of the mini-batch into micro-batches gives the same
gradient (token-mean over the mini-batch, as verl's "token-mean"). The loss is the same for
GRPO and SLCA: only the advantage tensor A differs. The statistics are sums divided by N
too, so they also add up over micro-batches. Mirrors verl's compute_policy_loss and its
"low_var_kl" (which also clamps d to ±20 before the exponential).
"""
import torch

CLIP_EPS = 0.2     # SPEC §4 / paper: PPO clip range
CLIP_C = 3.0       # SPEC §4: dual-clip constant
KL_BETA = 0.001    # SPEC §4: weight of the k3 KL to the SFT reference


def policy_loss(logp, old_logp, ref_logp, advantages, mask, num_tokens,
                clip_eps=CLIP_EPS, clip_c=CLIP_C, kl_beta=KL_BETA):
    """Eqs. 9-12 on one micro-batch. All tensors (B, T); ref_logp may be None when kl_beta == 0.

    Returns (loss, stats): loss is a scalar to backpropagate; stats holds floats that sum
    over micro-batches into mini-batch means (pg_loss, kl, clip_frac, dual_clip_frac,
    approx_kl between old and current policy, ratio).
    """
    mask = mask.to(logp.dtype)                                 # (B, T)
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
        d = (ref_logp - logp).clamp(-20.0, 20.0)               # (B, T)
        kl = (d.exp() - d - 1).clamp(-10.0, 10.0)              # (B, T)  Eq. 11
        total = pg + kl_beta * kl
    loss = (total * mask).sum() / num_tokens                   # Eq. 12

    def share(x):
        return float((x.float() * mask).sum() / num_tokens)

    stats = {"pg_loss": share(pg.detach()), "kl": share(kl.detach()),
             "clip_frac": share(pg2 > pg1), "dual_clip_frac": share((advantages < 0) & (clipped > pg3)),
             "approx_kl": share(-log_ratio.detach()), "ratio": share(ratio.detach())}
    return loss, stats
