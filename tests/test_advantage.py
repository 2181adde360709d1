"""advantage.py against a plain-loop reference and the checks of SPEC §3.2."""
import math
import statistics

import pytest
import torch

from advantage import grpo_advantages, route, slca_advantages
from segment import segment_masks

EPS = 1e-6


def norm_loop(x, present, gids, norm_by_std=True):
    """Reference: Python loop over groups, statistics over present members only."""
    out = [0.0] * len(x)
    for g in set(gids):
        idx = [i for i in range(len(x)) if gids[i] == g and present[i]]
        if len(idx) < 2:
            continue
        vals = [x[i] for i in idx]
        mean, std = statistics.fmean(vals), statistics.stdev(vals)  # stdev is unbiased
        for i in idx:
            out[i] = (x[i] - mean) / (std + EPS) if norm_by_std else x[i] - mean
    return out


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("G", [1, 2, 3, 8])
@pytest.mark.parametrize("norm_by_std", [True, False])
def test_vectorised_matches_loop(seed, G, norm_by_std):
    gen = torch.Generator().manual_seed(seed)
    n_groups = 5
    gids = torch.randperm(n_groups * G, generator=gen) % n_groups * 7 + 3  # shuffled, sparse ids
    B = gids.numel()
    r_tool = torch.rand(B, generator=gen, dtype=torch.float64).round(decimals=1)  # ties happen
    r_sum = torch.rand(B, generator=gen, dtype=torch.float64)
    p = [0.0, 0.5, 0.9, 1.0][seed % 4]  # presence patterns from none to all
    tp = torch.rand(B, generator=gen) < p
    sp = torch.rand(B, generator=gen) < 0.7
    at, asum = slca_advantages(r_tool, r_sum, tp, sp, gids, lam_tool=1.5, lam_sum=0.5, norm_by_std=norm_by_std)
    g = gids.tolist()
    ref_t = [1.5 * v for v in norm_loop(r_tool.tolist(), tp.tolist(), g, norm_by_std)]
    ref_s = [0.5 * v for v in norm_loop(r_sum.tolist(), sp.tolist(), g, norm_by_std)]
    assert torch.allclose(at, torch.tensor(ref_t, dtype=at.dtype), atol=1e-9)
    assert torch.allclose(asum, torch.tensor(ref_s, dtype=at.dtype), atol=1e-9)
    score = r_tool + r_sum
    ref_g = norm_loop(score.tolist(), [True] * B, g, norm_by_std)
    assert torch.allclose(grpo_advantages(score, gids, norm_by_std=norm_by_std),
                          torch.tensor(ref_g, dtype=score.dtype), atol=1e-9)


def test_pair_gets_plus_minus_inverse_sqrt2():
    at, asum = slca_advantages(torch.tensor([1.0, 0.0]), torch.tensor([0.2, 0.2]),
                               torch.tensor([True, True]), torch.tensor([True, True]), torch.tensor([0, 0]))
    assert at.tolist() == pytest.approx([1 / math.sqrt(2), -1 / math.sqrt(2)], abs=1e-5)
    assert asum.tolist() == [0.0, 0.0]  # equal scores give 0


def test_single_tool_segment_in_group_gets_zero():
    at, _ = slca_advantages(torch.tensor([0.9, 0.1, 0.5]), torch.zeros(3),
                            torch.tensor([True, False, False]), torch.ones(3, dtype=torch.bool),
                            torch.tensor([4, 4, 4]))
    assert at.tolist() == [0.0, 0.0, 0.0]


def test_presence_filter_ignores_absent_rewards():
    # the absent rollout's reward (100) must not enter the statistics
    args = (torch.tensor([1.0, 0.0, 100.0]), torch.zeros(3), torch.tensor([True, True, False]),
            torch.ones(3, dtype=torch.bool), torch.zeros(3, dtype=torch.long))
    at, _ = slca_advantages(*args)
    assert at.tolist() == pytest.approx([1 / math.sqrt(2), -1 / math.sqrt(2), 0.0], abs=1e-5)


def test_lambda_scales_after_normalisation():
    r_tool, r_sum = torch.tensor([1.0, 0.0, 0.5]), torch.tensor([0.3, 0.9, 0.1])
    pres, gids = torch.ones(3, dtype=torch.bool), torch.zeros(3, dtype=torch.long)
    at1, as1 = slca_advantages(r_tool, r_sum, pres, pres, gids)
    at2, as2 = slca_advantages(r_tool, r_sum, pres, pres, gids, lam_tool=2.0)
    assert torch.equal(at2, 2 * at1) and torch.equal(as2, as1)


def test_route_zero_on_observations_and_padding():
    # rows: prompt, tool turn, observation, summary turn, padding
    mask = torch.tensor([[0, 1, 1, 0, 0, 1, 1, 0, 0],
                         [0, 0, 1, 1, 1, 0, 0, 0, 0]])
    tool, summ, tp, sp = segment_masks(mask)
    A = route(torch.tensor([0.5, 0.0]), torch.tensor([-2.0, 3.0]), tool, summ)
    assert A.tolist() == [[0, 0.5, 0.5, 0, 0, -2, -2, 0, 0], [0, 0, 3, 3, 3, 0, 0, 0, 0]]
    assert torch.all(A[mask == 0] == 0)


def test_norm_by_std_false_subtracts_mean():
    adv = grpo_advantages(torch.tensor([1.0, 2.0, 6.0, 4.0]), torch.tensor([0, 0, 1, 1]), norm_by_std=False)
    assert adv.tolist() == [-0.5, 0.5, 1.0, -1.0]
