"""The diagnostic's prediction, before any real run (README "Credit misattribution, constructed").

    python scripts/bonus_sim.py [--seeds 20] [--lr 0.1 0.3 1.0]

A toy of the demo's RL on the diagnostic world's marked prompts (scripts/make_world.py --bonus K):
the policy is two Bernoulli choices, each a logit. `call`: make the bonus call (its tokens are
in the tool segment); `state`: once the call was made, state its values in the summary (the
summary segment). Rewards follow the world's arithmetic (tests/test_data.py checks it on the
real scorer): the call costs S_process its Name F1 share, and S_sum is the facts judge's level
for the share of reference facts stated (Eq. 3), where K of the call's values are reference
facts. The rest of each rollout varies as in the demo (a noisy process base, a binomial count
of the ordinary facts stated). Advantages come from advantage.py itself, at the demo's G,
prompts per step and steps: Eq. 6 (`grpo`, one advantage for both choices) or Eqs. 7-8
(`slca`: the call gets the tool advantage, the statement the summary one), then one
REINFORCE step on the logits per RL step.

What it predicts is a direction, not a size: the learning rate of two logits has no exact
counterpart in a network, so it is swept. Prediction: with K = 1 GRPO raises the call rate
from the SFT start (the summary pays for the call through the shared advantage) and SLCA
lowers it, as both do with K = 0.
"""
import argparse
import math
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the repo root
from advantage import group_normalize, slca_advantages  # noqa: E402

G, PROMPTS, STEPS = 8, 16, 60  # the demo's (train.py's TINY preset)
MARKED = 0.147                  # share of RL prompts of a bonus kind (scripts/make_world.py BONUS, measured)
START_CALL = 0.5                # make_world.BONUS_SHARE: half the teacher's demonstrations make the call
START_STATE = 0.9               # the teacher always states the values after the call; a little slack
FACTS = 2                       # ordinary reference facts of a bonus kind's task
STATE_P = 0.85                  # chance that the summary states one ordinary fact


def level_score(stated, total):
    """The facts judge (rewards.FactsJudge) as S_sum: r = 1 + round_half_up(4·share), (r - 1) / 4."""
    return math.floor(4 * stated / total + 0.5) / 4


def run(algo, k, lr, seed):
    """The call rate after each RL step, for one seed."""
    g = torch.Generator().manual_seed(seed)
    logit = {"call": math.log(START_CALL / (1 - START_CALL)), "state": math.log(START_STATE / (1 - START_STATE))}
    rates = []
    for _ in range(STEPS):
        n = int(torch.binomial(torch.tensor(float(PROMPTS)), torch.tensor(MARKED), generator=g))
        if n == 0:
            rates.append(torch.sigmoid(torch.tensor(logit["call"])).item())
            continue
        B = n * G
        gids = torch.arange(n).repeat_interleave(G)                                      # (B,)
        p_call, p_state = (torch.sigmoid(torch.tensor(logit[x])) for x in ("call", "state"))
        call = (torch.rand(B, generator=g) < p_call).float()                            # (B,)
        state = (torch.rand(B, generator=g) < p_state).float() * call                   # (B,)
        gold = 1 + (torch.rand(n, generator=g) < 0.4).long().repeat_interleave(G)       # (B,) 1 or 2 gold calls
        f1 = torch.where(call > 0, 2 * gold / (2 * gold + 1), torch.ones(B))            # Name F1 with the extra call
        process = (0.70 + 0.05 * torch.randn(B, generator=g)).clamp(0, 0.75) + 0.25 * f1  # (B,)
        stated = torch.binomial(torch.full((B,), float(FACTS)), torch.full((B,), STATE_P), generator=g)
        summary = torch.tensor([level_score(s + k * st, FACTS + k) for s, st in zip(stated.tolist(), state.tolist())])
        present = torch.ones(B, dtype=torch.bool)
        if algo == "grpo":
            a_call = a_state = group_normalize(process + summary, present, gids)        # Eq. 6
        else:
            a_call, a_state = slca_advantages(process, summary, present, present, gids)  # Eqs. 7-8
        logit["call"] += lr * float((a_call * (call - p_call)).mean())                  # ∇ log π(call) = call - p
        logit["state"] += lr * float((a_state * (state - p_state) * call).sum() / call.sum().clamp(min=1))
        rates.append(torch.sigmoid(torch.tensor(logit["call"])).item())
    return rates


def main(argv=None):
    p = argparse.ArgumentParser(description="the diagnostic's prediction on a two-logit toy")
    p.add_argument("--seeds", type=int, default=20)
    p.add_argument("--lr", type=float, nargs="+", default=[0.1, 0.3, 1.0])
    a = p.parse_args(argv)
    print(f"call rate after {STEPS} steps (start {START_CALL}), mean ± std over {a.seeds} seeds")
    print("| lr | K | slca | grpo |\n|---|---|---|---|")
    out = {}
    for lr in a.lr:
        for k in (0, 1, 2):
            cells = []
            for algo in ("slca", "grpo"):
                final = torch.tensor([run(algo, k, lr, s)[-1] for s in range(a.seeds)])
                out[(lr, k, algo)] = final
                cells.append(f"{final.mean():.3f} ± {final.std():.3f}")
            print(f"| {lr} | {k} | {cells[0]} | {cells[1]} |")
    return out


if __name__ == "__main__":
    main()
