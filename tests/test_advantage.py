"""advantage.py against a plain-loop reference, the checks of docs/method.md §3.2, its numerics, non-finite
rewards, and ToolPO (Eq. 13) on hand-computed numbers."""
import math
import statistics

import pytest
import torch

from advantage import group_normalize, grpo_advantages, route, slca_advantages, toolpo_advantages
from lib.training.groups import normalize
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



@pytest.mark.parametrize("seed", range(40))
@pytest.mark.parametrize("stats", ["exact", "release"])
def test_vectorised_is_the_plain_statement_bit_for_bit(seed, stats):
    """lib/training/groups.normalize, the default path, against advantage.group_normalize, Eq. 7 one group at a time:
    ties, equal groups, groups of one, absent and non-finite members, sparse shuffled ids, both dtypes."""
    gen = torch.Generator().manual_seed(seed)
    B = 60
    gids = torch.randint(0, 9, (B,), generator=gen) * 5 - 7
    x = torch.rand(B, generator=gen, dtype=torch.float64)
    x = torch.where(torch.rand(B, generator=gen) < 0.5, (x * 4).round() / 4, x)  # ties and equal groups
    x[gids == gids[0]] = 0.9                                                     # one group all equal
    x[torch.randint(0, B, (2,), generator=gen)] = [float("nan"), float("inf")][seed % 2]
    present = torch.rand(B, generator=gen) < 0.8
    for dtype in (torch.float64, torch.float32):
        for norm_by_std in (True, False):
            want = group_normalize(x.to(dtype), present, gids, EPS, norm_by_std, stats)
            got = normalize(x.to(dtype), present, gids, EPS, norm_by_std, stats)
            assert got.dtype == want.dtype == dtype and torch.equal(got, want)
            assert (want != 0).any()


@pytest.mark.parametrize("seed", range(6))
def test_the_plain_statement_is_the_plain_loop(seed):
    gen = torch.Generator().manual_seed(seed)
    gids = torch.randint(0, 5, (30,), generator=gen)
    x = torch.rand(30, generator=gen, dtype=torch.float64)
    present = torch.rand(30, generator=gen) < 0.7
    for norm_by_std in (True, False):
        ref = norm_loop(x.tolist(), present.tolist(), gids.tolist(), norm_by_std)
        assert group_normalize(x, present, gids, norm_by_std=norm_by_std).tolist() == pytest.approx(ref, abs=1e-12)

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


# --- numerics (docs/method.md §3.2): group statistics in float64, equal rewards give exactly 0 --
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("value", [0.9, 0.1, 0.3, 0.45, 0.7, 1 / 3, -0.5, 0.0])
@pytest.mark.parametrize("G", [2, 3, 7, 16])
def test_equal_rewards_give_exactly_zero(dtype, value, G):
    gids = torch.zeros(G, dtype=torch.long)
    for norm_by_std in (True, False):
        adv = grpo_advantages(torch.full((G,), value, dtype=dtype), gids, norm_by_std=norm_by_std)
        assert adv.dtype == dtype and adv.tolist() == [0.0] * G
    # the same inside SLCA, with absent members holding other values
    r = torch.full((G + 2,), value, dtype=dtype)
    r[-2:] = torch.tensor([5.0, -3.0])
    pres = torch.arange(G + 2) < G
    at, _ = slca_advantages(r, r, pres, pres, torch.zeros(G + 2, dtype=torch.long))
    assert at.tolist() == [0.0] * (G + 2)


def test_sixteen_point_nines():
    # the release's float32 arithmetic gives every one of them the same nonzero advantage (stats="release")
    assert grpo_advantages(torch.full((16,), 0.9), torch.zeros(16, dtype=torch.long)).tolist() == [0.0] * 16


def release_loop(x, present, gids, norm_by_std=True, lone_verl=False):
    """Reference: the release's estimators written out (core_algos.py): float32 torch tensors,
    torch's mean and std per group; a group of one gets 0 (`_groupwise_normalize_with_present`)
    or, with lone_verl, verl's GRPO mean 0 and std 1 (`compute_grpo_outcome_advantage`)."""
    out = torch.zeros(len(x))
    for g in set(gids):
        idx = [i for i in range(len(x)) if gids[i] == g and present[i]]
        vals = torch.stack([x[i] for i in idx]) if idx else None
        if len(idx) == 1 and not lone_verl or not idx:
            continue
        mean, std = (vals.mean(), vals.std()) if len(idx) > 1 else (torch.tensor(0.0), torch.tensor(1.0))
        for i in idx:
            out[i] = (x[i] - mean) / (std + EPS) if norm_by_std else x[i] - mean
    return out


@pytest.mark.parametrize("seed", range(8))
@pytest.mark.parametrize("norm_by_std", [True, False])
def test_release_group_stats_are_the_release_estimators(seed, norm_by_std):
    gen = torch.Generator().manual_seed(seed)
    gids = torch.randint(0, 6, (40,), generator=gen)             # groups of one happen
    r = (torch.rand(40, generator=gen) * 10).round() / 10        # float32, ties and equal groups happen
    pres = torch.rand(40, generator=gen) < 0.8
    g = gids.tolist()
    at, _ = slca_advantages(r, r, pres, pres, gids, norm_by_std=norm_by_std, stats="release")
    assert torch.equal(at, release_loop(r, pres.tolist(), g, norm_by_std))
    adv = grpo_advantages(r, gids, norm_by_std=norm_by_std, stats="release")
    assert torch.equal(adv, release_loop(r, [True] * 40, g, norm_by_std, lone_verl=True))


def test_release_group_stats_keep_the_float32_noise_and_verls_group_of_one():
    x, one = torch.full((16,), 0.9), torch.zeros(16, dtype=torch.long)
    adv = grpo_advantages(x, one, stats="release")
    assert torch.equal(adv, release_loop(x, [True] * 16, [0] * 16)) and adv.abs().min() > 0.01   # not 0
    assert grpo_advantages(x, one).tolist() == [0.0] * 16
    lone = torch.tensor([0.7])
    assert grpo_advantages(lone, torch.zeros(1, dtype=torch.long)).tolist() == [0.0]
    assert grpo_advantages(lone, torch.zeros(1, dtype=torch.long), stats="release").tolist() == \
        pytest.approx([0.7 / (1 + EPS)])


def test_float32_input_gets_float64_statistics():
    # fifteen 0.9s and one 0.9 + 1 ulp, in float32: the answer is the float64 one, back in float32
    x = torch.full((16,), 0.9)
    x[3] = torch.nextafter(x[3], torch.tensor(1.0))
    ref = norm_loop(x.double().tolist(), [True] * 16, [0] * 16)
    adv = grpo_advantages(x, torch.zeros(16, dtype=torch.long))
    assert adv.dtype == torch.float32
    assert adv.tolist() == pytest.approx(ref, rel=1e-6)


# --- non-finite rewards --------------------------------------------------------------------------
@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf")])
def test_absent_member_never_enters_the_statistics(bad):
    args = (torch.tensor([1.0, 0.0, bad]), torch.zeros(3), torch.tensor([True, True, False]),
            torch.ones(3, dtype=torch.bool), torch.zeros(3, dtype=torch.long))
    at, _ = slca_advantages(*args)
    assert at.tolist() == pytest.approx([1 / math.sqrt(2), -1 / math.sqrt(2), 0.0], abs=1e-5)


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf")])
def test_present_non_finite_reward_zeroes_its_group_only(bad):
    r = torch.tensor([1.0, bad, 0.0, 1.0, 0.0])
    gids = torch.tensor([0, 0, 0, 1, 1])
    pres = torch.ones(5, dtype=torch.bool)
    at, asum = slca_advantages(r, torch.tensor([0.2, 0.4, 0.6, 0.0, 1.0]), pres, pres, gids)
    assert at.tolist() == pytest.approx([0, 0, 0, 1 / math.sqrt(2), -1 / math.sqrt(2)], abs=1e-5)
    assert at[:3].tolist() == [0.0, 0.0, 0.0]
    assert asum[:3].tolist() == pytest.approx([-1, 0, 1], abs=1e-5)  # the other segment is untouched
    assert grpo_advantages(r, gids)[:3].tolist() == [0.0, 0.0, 0.0]
    assert (~r.isfinite() & pres).sum() == 1                           # how a caller counts them


def test_route_does_not_spread_nan_over_other_tokens():
    mask = torch.tensor([[0, 1, 1, 0, 1], [0, 0, 1, 1, 0]])
    tool, summ, tp, sp = segment_masks(mask)
    A = route(torch.tensor([0.5, float("nan")]), torch.tensor([-1.0, 2.0]), tool, summ)  # row 1 has no tool tokens
    assert A.tolist() == [[0, 0.5, 0.5, 0, -1], [0, 0, 2, 2, 0]]


# --- ToolPO (Eq. 13) -----------------------------------------------------------------------------
def test_toolpo_hand_computed():
    # group 7: four rollouts, the last without a tool segment; group 9: a group of one
    r_succ = torch.tensor([1.0, 0.0, 0.0, 1.0, 1.0])
    r_action = torch.tensor([1.0, 0.5, 0.0, 0.9, 0.75])
    tp = torch.tensor([True, True, True, False, True])
    gids, all5 = torch.tensor([7, 7, 7, 7, 9]), torch.ones(5, dtype=torch.bool)
    a_succ, a_action = toolpo_advantages(r_succ, r_action, all5, tp, gids)
    assert a_succ.tolist() == [0.5, -0.5, -0.5, 0.5, 1.0]      # mean 0.5; alone: verl's mean 0, std 1
    assert a_action.tolist() == [0.5, 0.0, -0.5, 0.0, 0.0]     # mean over P_tool = 0.5; |P_tool| = 1 -> 0
    _, a2 = toolpo_advantages(r_succ, r_action, all5, tp, gids, lam_action=2.0)
    assert torch.equal(a2, 2 * a_action)
    # per token: A_succ everywhere in the response, plus A_action on the tool turns
    mask = torch.tensor([[0, 1, 1, 0, 1, 1, 0]] * 3 + [[0, 0, 0, 0, 1, 1, 0]] + [[0, 1, 0, 0, 1, 0, 0]])
    tool, summ, _, _ = segment_masks(mask)
    A = route(a_succ + a_action, a_succ, tool, summ)
    assert A.tolist() == [[0, 1.0, 1.0, 0, 0.5, 0.5, 0], [0, -0.5, -0.5, 0, -0.5, -0.5, 0],
                          [0, -1.0, -1.0, 0, -0.5, -0.5, 0], [0, 0, 0, 0, 0.5, 0.5, 0],
                          [0, 1.0, 0, 0, 1.0, 0, 0]]


def test_toolpo_with_std_as_the_release_ran_it():
    r_succ = torch.tensor([1.0, 0.0, 0.0, 1.0, 1.0])
    a_succ, a_action = toolpo_advantages(r_succ, torch.tensor([1.0, 0.5, 0.0, 0.9, 0.75]),
                                         torch.ones(5, dtype=torch.bool), torch.tensor([True, True, True, False, True]),
                                         torch.tensor([7, 7, 7, 7, 9]), norm_by_std=True)
    s = 0.5 / (math.sqrt(1 / 3) + EPS)   # std of (1, 0, 0, 1) is sqrt(1/3); of (1, .5, 0) is 0.5
    assert a_succ.tolist() == pytest.approx([s, -s, -s, s, 1 / (1 + EPS)], rel=1e-6)
    assert a_action.tolist() == pytest.approx([0.5 / (0.5 + EPS), 0, -0.5 / (0.5 + EPS), 0, 0], rel=1e-6)


def test_toolpo_left_out_rollouts():
    # rollout 1 is left out (e.g. a transport failure): 0 for it, and its rewards enter no mean;
    # group 9 keeps one member of two, which then counts as a group of one; a present NaN
    # zeroes its group (group 4), alone or not
    nan = float("nan")
    r_succ = torch.tensor([1.0, nan, 0.0, 1.0, 0.0, 1.0, nan, 0.0])
    r_action = torch.tensor([1.0, nan, 0.5, 0.25, 0.0, nan, 0.0, 1.0])
    present = torch.tensor([True, False, True, True, False, True, True, True])
    gids = torch.tensor([7, 7, 7, 9, 9, 4, 4, 4])
    a_succ, a_action = toolpo_advantages(r_succ, r_action, present, present, gids)
    assert a_succ.tolist() == [0.5, 0.0, -0.5, 1.0, 0.0, 0.0, 0.0, 0.0]
    assert a_action.tolist() == [0.25, 0.0, -0.25, 0.0, 0.0, 0.0, 0.0, 0.0]
    lone, _ = toolpo_advantages(torch.tensor([nan]), torch.tensor([0.0]), torch.tensor([True]),
                                torch.tensor([True]), torch.tensor([0]))
    assert lone.tolist() == [0.0]


# --------------------------------------------------------------------------------------------
# per-turn credit (--turn-credit ω, Eq. 14)
# --------------------------------------------------------------------------------------------
from advantage import route_turns, turn_advantages  # noqa: E402
from loss import Clip, policy_loss  # noqa: E402
from segment import run_index  # noqa: E402


def runs_loop(mask):
    out = []
    for row in mask.tolist():
        k, prev, r = -1, 0, []
        for m in row:
            k += m and not prev
            r.append(k if m else -1)
            prev = m
        out.append(r)
    return torch.tensor(out)


@pytest.mark.parametrize("seed", range(4))
def test_turn_advantages_and_runs_match_loops(seed):
    gen = torch.Generator().manual_seed(seed)
    G, n, K = 4, 3, 3
    gids = torch.randperm(n * G, generator=gen) % n * 5 + 2                       # (B,) shuffled, sparse
    B = gids.numel()
    r = torch.rand(B, K, generator=gen, dtype=torch.float64).round(decimals=1)  # ties happen
    present = torch.rand(B, K, generator=gen) < 0.7
    got = turn_advantages(r, present, gids)
    for k in range(K):
        want = norm_loop(r[:, k].tolist(), present[:, k].tolist(), gids.tolist())
        assert got[:, k].tolist() == pytest.approx(want, abs=1e-12)
    mask = (torch.rand(B, 20, generator=gen) < 0.6).long()
    assert torch.equal(run_index(mask), runs_loop(mask))


def turn_batch():
    """Two groups of two; rollouts with one or two tool turns, then a summary run."""
    mask = torch.tensor([[0, 1, 1, 0, 1, 1, 0, 1, 0],    # tool turns 0 and 1, summary
                         [0, 1, 0, 1, 1, 0, 0, 0, 0],    # tool turn 0, summary
                         [0, 1, 1, 0, 1, 0, 1, 1, 0],    # tool turns 0 and 1, summary
                         [0, 1, 1, 1, 0, 1, 1, 0, 0]])   # tool turn 0, summary
    tool, summary, tp, sp = segment_masks(mask)
    gids = torch.tensor([0, 0, 1, 1])
    present = torch.tensor([[True, True], [True, False], [True, True], [True, False]])
    return mask, tool, summary, tp, sp, gids, present


def test_turn_credit_zero_is_slca_bit_for_bit():
    mask, tool, summary, tp, sp, gids, present = turn_batch()
    r_tool, r_sum = torch.tensor([0.9, 0.4, 0.7, 0.7]), torch.tensor([1.0, 0.25, 0.5, 0.75])
    at, asum = slca_advantages(r_tool, r_sum, tp, sp, gids, lam_tool=1.5)
    a_turn = turn_advantages(torch.tensor([[1.0, 0.2], [0.5, 0.0], [0.3, 0.9], [0.8, 0.0]]), present, gids)
    assert torch.equal(route_turns(at, asum, a_turn, run_index(mask), tool, summary, omega=0.0, lam_tool=1.5),
                       route(at, asum, tool, summary))
    A = route_turns(at, asum, a_turn, run_index(mask), tool, summary, omega=0.5, lam_tool=1.5)
    # turn 0 of rollout 0 against rollout 1's turn 0 (a pair: ±1/√2), times ω·λ, on top of Â_tool
    assert A[0, 1].item() == pytest.approx(at[0].item() + 1.5 * 0.5 / math.sqrt(2), abs=1e-5)  # ε
    assert A[0, 4].item() == pytest.approx(at[0].item(), abs=1e-6)   # turn 1: alone in its group -> 0
    assert torch.equal(A[:, -2:][summary[:, -2:].bool()], route(at, asum, tool, summary)[:, -2:][summary[:, -2:].bool()])
    assert (A[mask == 0] == 0).all()


def test_turn_k_gradients_ignore_other_turns_rewards():
    """Isolation: changing turn 1's rewards leaves the loss gradient on every turn-0 token (and
    every summary token) as it was; the shared Â_tool term is held fixed (same R_tool)."""
    mask, tool, summary, tp, sp, _, present = turn_batch()
    gids = torch.tensor([0, 1, 0, 1])  # rollouts 0 and 2 share a group and both have a turn 1
    runs = run_index(mask)
    at, asum = slca_advantages(torch.tensor([0.9, 0.4, 0.7, 0.1]), torch.tensor([1.0, 0.25, 0.5, 0.75]), tp, sp, gids)
    grads = []
    for turn1 in (0.2, 0.9):
        r = torch.tensor([[1.0, turn1], [0.5, 0.0], [0.3, 1 - turn1], [0.8, 0.0]])
        A = route_turns(at, asum, turn_advantages(r, present, gids), runs, tool, summary, omega=0.7)
        lp = torch.full(mask.shape, -1.0, requires_grad=True)
        old = torch.full(mask.shape, -1.0)
        loss, _ = policy_loss(lp, old, None, A, mask, float(mask.sum()), clip=Clip(kl_beta=0.0, loss_agg="token-mean"))
        loss.backward()
        grads.append(lp.grad.clone())
    turn0 = (runs == 0) & tool.bool()
    assert torch.equal(grads[0][turn0], grads[1][turn0]) and torch.equal(grads[0][summary.bool()], grads[1][summary.bool()])
    turn1 = (runs == 1) & tool.bool()
    assert not torch.equal(grads[0][turn1], grads[1][turn1])  # the test can fail: turn 1 does move


# --------------------------------------------------------------------------------------------
# decision credit (--decision-credit tool, Eq. 15)
# --------------------------------------------------------------------------------------------
from advantage import Credit, route_decision, token_advantages  # noqa: E402


def test_decision_tokens_get_the_tool_advantage():
    mask, tool, summary, tp, sp, gids, present = turn_batch()
    at, asum = slca_advantages(torch.tensor([0.9, 0.4, 0.7, 0.1]), torch.tensor([1.0, 0.25, 0.5, 0.75]), tp, sp, gids,
                               lam_tool=1.5, lam_sum=0.5)
    d = torch.zeros_like(mask)
    d[0, 7] = d[1, 3] = d[1, 4] = d[3, 5] = 1                                    # each row's summary opening
    A8 = route(at, asum, tool, summary)
    A = route_decision(A8, at, d)
    assert torch.equal(A[d.bool()], at[:, None].expand_as(A)[d.bool()])         # λ_tool·Â^tool, exactly
    assert torch.equal(A[~d.bool()], A8[~d.bool()])                              # every other token as Eq. 8
    assert torch.equal(route_decision(A8, at, torch.zeros_like(mask)), A8)
    # beside Eq. 14: a decision token gets Â^tool alone, the tool turns keep their per-turn term
    a_turn = turn_advantages(torch.tensor([[1.0, 0.2], [0.5, 0.0], [0.3, 0.9], [0.8, 0.0]]), present, gids)
    A14 = route_turns(at, asum, a_turn, run_index(mask), tool, summary, omega=0.5, lam_tool=1.5)
    both = route_decision(A14, at, d)
    assert torch.equal(both[d.bool()], A[d.bool()]) and torch.equal(both[~d.bool()], A14[~d.bool()])


def test_token_advantages_default_is_eq8_and_decision_is_slca_only():
    mask, tool, summary, tp, sp, gids, present = turn_batch()
    batch = {"response_mask": mask, "tool_mask": tool, "summary_mask": summary}
    scores = [{"r_tool": t, "r_sum": s, "score": t + s, "r_succ": 1.0, "r_action": t}
              for t, s in [(0.9, 1.0), (0.4, 0.25), (0.7, 0.5), (0.1, 0.75)]]
    keep = torch.ones(4, dtype=torch.bool)
    at, asum = slca_advantages(*(torch.tensor([s[k] for s in scores]) for k in ("r_tool", "r_sum")), tp, sp, gids)
    plain = token_advantages(scores, [[]] * 4, batch, keep, gids)
    assert torch.equal(plain, route(at, asum, tool, summary))
    d = torch.zeros_like(mask)
    d[0, 7] = 1
    got = token_advantages(scores, [[]] * 4, batch, keep, gids, Credit(decision_credit="tool"), decision=d)
    assert got[0, 7] == at[0] != plain[0, 7] and torch.equal(got[~d.bool()], plain[~d.bool()])
    for algo in ("grpo", "toolpo"):
        with pytest.raises(ValueError, match="algo slca"):
            token_advantages(scores, [[]] * 4, batch, keep, gids, Credit(algo=algo, decision_credit="tool"), decision=d)
