"""Group statistics vectorised over a batch with integer group ids (any values, any order): the
default path of advantage.py's group_normalize (Eq. 7), which states them one group at a time.
tests/test_advantage.py pins the two together, bit for bit.
"""
import torch


def normalize(x, present, group_ids, eps, norm_by_std, stats):
    """advantage.group_normalize (Eq. 7 in each group), vectorised: (x - group mean) / (group std + ε) over
    the present members of each group; stats "exact" (float64) or "release" (float32, the release's).

    x: (B,) float, present: (B,) bool, group_ids: (B,) int. Returns (B,) in x's dtype, 0 where
    absent, where the group has fewer than two present members, where their values are all
    equal (stats "exact" only), or where a present member's value is not finite.
    """
    _, g = torch.unique(group_ids, return_inverse=True)        # (B,) dense ids 0..NG-1
    n_groups = int(g.max()) + 1 if g.numel() else 0
    xs = x.double() if stats == "exact" else x.float()         # (B,) statistics in float64, or the release's float32
    zeros = xs.new_zeros(n_groups)
    bad = zeros.index_add(0, g, (present & ~xs.isfinite()).to(xs.dtype)) > 0  # (NG,) group has a non-finite reward
    use = present & ~bad[g]                                     # (B,) rows that enter the statistics
    count = zeros.index_add(0, g, use.to(xs.dtype))             # (NG,)
    if stats == "exact":
        mean = zeros.index_add(0, g, torch.where(use, xs, 0.0)) / count.clamp(min=1)    # (NG,)
        sq = torch.where(use, xs - mean[g], 0.0) ** 2                                  # (B,)
        std = (zeros.index_add(0, g, sq) / (count - 1).clamp(min=1)).sqrt()            # (NG,) unbiased
    else:
        mean, std = _release_stats(xs, use, g, n_groups)        # (NG,) each
    dev = torch.where(use, xs - mean[g], 0.0)                   # (B,)
    if norm_by_std:
        dev = dev / (std[g] + eps)
    keep = use & (count[g] >= 2)                                # (B,)
    if stats == "exact":                                        # equal values give exactly 0
        inf = torch.full_like(zeros, float("inf"))
        lo = inf.scatter_reduce(0, g, torch.where(use, xs, float("inf")), "amin")    # (NG,)
        hi = (-inf).scatter_reduce(0, g, torch.where(use, xs, -float("inf")), "amax")
        keep &= (hi > lo)[g]
    return torch.where(keep, dev, 0.0).to(x.dtype)


def _release_stats(xs, use, g, n_groups):
    """Each group's mean and unbiased std as the release computes them (core_algos.py): torch's
    mean and std of the group's used values, one group at a time; 0 where a group has fewer
    than two. xs, use, g: (B,). Returns (NG,), (NG,)."""
    parts = [xs[use & (g == k)] for k in range(n_groups)]
    mean = torch.stack([p.mean() if len(p) else xs.new_zeros(()) for p in parts])       # (NG,)
    std = torch.stack([p.std() if len(p) > 1 else xs.new_zeros(()) for p in parts])     # (NG,)
    return mean, std
