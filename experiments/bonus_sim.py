"""The diagnostic's prediction, before any real run (docs/experiments/misattribution.md).

    python -m experiments.bonus_sim [--seeds 20] [--lr 0.01 0.03 0.1] [--marked 0.5] [--arg]

A toy of the demo's RL on the diagnostic world's marked prompts (tools/make_world.py --bonus K):
the policy is two Bernoulli choices, each a logit. `call`: after the gold calls, the next turn's
first token either opens the bonus call or opens the summary; `state`: once the call was made,
the summary states its values. Rewards follow the world's arithmetic (tests/test_data.py checks
it on the real scorer): the call costs S_process its Name F1 share, and S_sum is the facts
judge's level for the share of reference facts stated (Eq. 3), where K of the call's values are
reference facts. The rest of each rollout varies as in the demo (a noisy process base, a
binomial count of the ordinary facts stated). Advantages come from advantage.py itself, at the
demo's G, prompts per step and steps, routed to the token that decides each branch:

- `grpo` (Eq. 6): one advantage Â on every token, so on both branches of both choices;
- `slca` (Eqs. 1, 7-8): the decision token of a caller opens a tool turn, so it gets Â_tool; the
  decision token of a non-caller is the first token of its last turn, the summary (Eq. 1), so
  it gets Â_sum; `state` is in the summary either way (Â_sum). Under SLCA the decision to stop
  calling tools belongs to the summary segment: at K >= 1 non-callers state fewer reference
  facts, so Â_sum pushes their "stop" down and the call rate up, while Â_tool pushes it down;
- `slca-decision` (Eq. 15, train.py --decision-credit tool): the non-caller's decision token is
  paid Â_tool too, so both branches of `call` get Â_tool; `state` keeps Â_sum.

The optimizer is Adam whose second moment is one scalar over both logits (the mean square of
the gradient vector), not one per logit: in a network every weight's gradient sums both
decisions' tokens, so its normaliser mixes their scales, and a decision with a small gradient
moves slowly; per-logit Adam would move each decision at the learning rate whatever its
gradient's size. The learning rate has no exact network counterpart, so it is swept: the
direction of each K = 2 - K = 0 effect is the prediction, its size is indicative only.
Measured: the call probability averaged over the last third of the steps (what the real runs'
sampled rate pooled over their last third estimates), per seed at K = 0 and K = 2 with the
same seed, and the paired effect K2 - K0.

--arg plays the other direction (make_world.py --wrong K, K = 0, 1): `call` is now writing the
wrong argument value, which costs S_process its value share (0.20 · 1/2) and makes the summary
state the wrong response's facts: those score at K = 1 (the reference is the wrong response's)
and the gold's score at K = 0. The choice is inside the call, so SLCA routes Â_tool to it
either way; there is no `state` choice.
"""
import argparse
import math

import torch

from advantage import grpo_advantages, slca_advantages

G, PROMPTS, STEPS = 8, 16, 60  # the demo's (configs/demo.toml)
MARKED = 0.5                    # share of RL prompts of a bonus kind: experiments.misattribution --powered (--bonus: 0.147, measured)
START_CALL = 0.5                # make_world.BONUS_SHARE: half the teacher's demonstrations make the call
START_STATE = 0.9               # the teacher always states the values after the call; a little slack
FACTS = 2                       # ordinary reference facts of a bonus kind's task
STATE_P = 0.85                  # chance that the summary states one ordinary fact
BETAS, EPS = (0.9, 0.999), 1e-8  # torch.optim.AdamW's defaults, as train.py uses them
ALGOS = ("slca", "slca-decision", "grpo")  # the routings above


def level_score(stated, total):
    """The facts judge (rewards.FactsJudge) as S_sum: r = 1 + round_half_up(4·share), (r - 1) / 4."""
    return math.floor(4 * stated / total + 0.5) / 4


def run(algo, k, lr, seed, marked=MARKED, arg=False):
    """The call probability (with `arg`: the wrong-argument probability) after each RL step, for one seed."""
    g = torch.Generator().manual_seed(seed)
    theta = torch.tensor([math.log(START_CALL / (1 - START_CALL)), math.log(START_STATE / (1 - START_STATE))])  # call, state
    m, v, rates = torch.zeros(2), 0.0, []
    for step in range(1, STEPS + 1):
        n = int(torch.binomial(torch.tensor(float(PROMPTS)), torch.tensor(marked), generator=g))
        if n:
            B = n * G
            gids = torch.arange(n).repeat_interleave(G)                                  # (B,)
            p_call, p_state = torch.sigmoid(theta).tolist()
            call = (torch.rand(B, generator=g) < p_call).float()                        # (B,)
            state = (torch.rand(B, generator=g) < p_state).float() * call               # (B,)
            gold = 1 + (torch.rand(n, generator=g) < 0.4).long().repeat_interleave(G)   # (B,) 1 or 2 gold calls
            f1 = torch.where(call > 0, 2 * gold / (2 * gold + 1), torch.ones(B))        # Name F1 with the extra call
            if arg:  # all names right; a wrong value costs half the value weight
                f1, state = torch.ones(B), torch.zeros(B)
            process = (0.70 + 0.05 * torch.randn(B, generator=g)).clamp(0, 0.75) + 0.25 * f1 - 0.1 * call * arg  # (B,)
            stated = torch.binomial(torch.full((B,), float(FACTS)), torch.full((B,), STATE_P), generator=g)
            if arg:  # the summary's facts are those of the response it got; they count when they are the reference's
                summary = torch.tensor([level_score(s * (c == k), FACTS) for s, c in zip(stated.tolist(), call.tolist())])
            else:
                summary = torch.tensor([level_score(s + k * st, FACTS + k) for s, st in zip(stated.tolist(), state.tolist())])
            present = torch.ones(B, dtype=torch.bool)
            if algo == "grpo":
                a_dec = a_state = grpo_advantages(process + summary, gids)               # Eq. 6: one Â everywhere
            else:
                a_tool, a_state = slca_advantages(process, summary, present, present, gids)  # Eqs. 7-8: Â_tool, Â_sum
                # a caller's decision opens a tool turn, a non-caller's the summary; --arg: inside the call either way
                a_dec = a_tool if arg or algo == "slca-decision" else torch.where(call > 0, a_tool, a_state)
            grad = torch.stack([(a_dec * (call - p_call)).mean(),                       # ∇ log π(decision) = call - p
                                (a_state * (state - p_state) * call).sum() / B * (not arg)])  # callers' statement only
            m = BETAS[0] * m + (1 - BETAS[0]) * grad
            v = BETAS[1] * v + (1 - BETAS[1]) * float((grad ** 2).mean())              # one scale for both decisions
            theta = theta + lr * (m / (1 - BETAS[0] ** step)) / ((v / (1 - BETAS[1] ** step)) ** 0.5 + EPS)
        rates.append(torch.sigmoid(theta[0]).item())
    return rates


def main(argv=None):
    p = argparse.ArgumentParser(description="the diagnostic's prediction on a two-decision toy")
    p.add_argument("--seeds", type=int, default=20)
    p.add_argument("--lr", type=float, nargs="+", default=[0.01, 0.03, 0.1])
    p.add_argument("--marked", type=float, default=MARKED, help="share of marked RL prompts (--bonus's runs: 0.147)")
    p.add_argument("--arg", action="store_true", help="the other direction: a wrong argument value, K = 0, 1")
    a = p.parse_args(argv)
    ks = (0, 1) if a.arg else (0, 2)
    last = STEPS - STEPS // 3
    print(f"{'wrong-argument' if a.arg else 'call'} probability over the last third of {STEPS} steps (start "
          f"{START_CALL}), marked share {a.marked}, mean ± std over {a.seeds} seeds; effect = K{ks[1]} - K0 paired by seed")
    print("| lr | " + " | ".join(f"{algo} K=0 | {algo} K={ks[1]} | {algo} effect" for algo in ALGOS) + " |\n"
          + "|---" * (1 + 3 * len(ALGOS)) + "|")
    out = {}
    for lr in a.lr:
        cells = []
        for algo in ALGOS:
            rate = {k: torch.tensor([sum(r[last:]) / len(r[last:]) for r in (run(algo, k, lr, s, a.marked, a.arg)
                                                                             for s in range(a.seeds))]) for k in ks}
            out[(lr, algo)] = rate
            cells += [f"{x.mean():.3f} ± {x.std():.3f}" for x in (rate[0], rate[ks[1]], rate[ks[1]] - rate[0])]
        print(f"| {lr} | " + " | ".join(cells) + " |")
    return out


if __name__ == "__main__":
    main()
