"""Group-relative advantages: plain GRPO and segment-locked SLCA (SPEC §3, Eqs. 6-8).

GRPO (the matched baseline, "w/o SLCA") normalises one score per rollout within its group
of G rollouts and gives it to every response token:

    Â_i = (score_i - mean_g score) / (std_g score + ε)                              (Eq. 6)

SLCA normalises each segment's reward within its group, over only the rollouts where that
segment exists (the presence filter), and routes each advantage to its own tokens:

    Â_i^seg = (R_i^seg - mean_{P_seg} R^seg) / (std_{P_seg} R^seg + ε),  i in P_seg   (Eq. 7)
    A_{i,t} = λ_tool·Â_i^tool·tool_mask_{i,t} + λ_sum·Â_i^sum·summary_mask_{i,t}    (Eq. 8)

std is unbiased (N - 1), ε = 1e-6; a rollout outside P_seg, or in a group where |P_seg| < 2,
gets 0. λ is applied after normalisation. `norm_by_std=False` subtracts the mean only
(Dr. GRPO style). So tool-token advantages never depend on any R^sum, and vice versa.

Simplification: GRPO uses the same fewer-than-two rule (a lone rollout gets 0); verl instead
gives a group of one mean 0 and std 1. The two agree for every G >= 2.

Everything is vectorised over the batch with integer group ids (any values, any order);
tests/test_advantage.py holds the plain-loop reference.
"""
import torch

EPS = 1e-6  # SPEC §3: ε of the released code


def group_normalize(x, present, group_ids, eps=EPS, norm_by_std=True):
    """(x - group mean) / (group std + ε) over the present members of each group.

    x: (B,) float, present: (B,) bool, group_ids: (B,) int. Returns (B,), 0 where absent or
    where the group has fewer than two present members.
    """
    _, g = torch.unique(group_ids, return_inverse=True)        # (B,) dense ids 0..NG-1
    n_groups = int(g.max()) + 1 if g.numel() else 0
    w = present.to(x.dtype)                                     # (B,)
    zeros = x.new_zeros(n_groups)
    count = zeros.index_add(0, g, w)                            # (NG,)
    mean = zeros.index_add(0, g, x * w) / count.clamp(min=1)    # (NG,)
    dev = (x - mean[g]) * w                                     # (B,)
    if norm_by_std:
        var = zeros.index_add(0, g, dev * dev) / (count - 1).clamp(min=1)  # (NG,) unbiased
        dev = dev / (var.sqrt()[g] + eps)
    return torch.where(present & (count[g] >= 2), dev, torch.zeros_like(dev))


def grpo_advantages(scores, group_ids, eps=EPS, norm_by_std=True):
    """Eq. 6: one advantage per rollout, (B,). Broadcast it with `response_mask`."""
    return group_normalize(scores, torch.ones_like(scores, dtype=torch.bool), group_ids, eps, norm_by_std)


def slca_advantages(r_tool, r_sum, tool_present, summary_present, group_ids,
                    eps=EPS, lam_tool=1.0, lam_sum=1.0, norm_by_std=True):
    """Eq. 7 with λ applied after normalisation: (adv_tool, adv_sum), each (B,)."""
    adv_tool = lam_tool * group_normalize(r_tool, tool_present, group_ids, eps, norm_by_std)
    adv_sum = lam_sum * group_normalize(r_sum, summary_present, group_ids, eps, norm_by_std)
    return adv_tool, adv_sum


def route(adv_tool, adv_sum, tool_mask, summary_mask):
    """Eq. 8: per-token advantages (B, T); 0 on prompt, observation and padding tokens."""
    return adv_tool[:, None] * tool_mask + adv_sum[:, None] * summary_mask  # (B, T)
