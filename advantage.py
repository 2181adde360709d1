"""Group-relative advantages: plain GRPO, segment-locked SLCA, and the ToolPO baseline (docs/method.md §3).

    Â_i = (score_i - mean_g score) / (std_g score + ε)                                      (Eq. 6, GRPO)
    Â_i^seg = (R_i^seg - mean_{P_seg} R^seg) / (std_{P_seg} R^seg + ε),  i in P_seg           (Eq. 7, SLCA)
    A_{i,t} = λ_tool·Â_i^tool·tool_mask_{i,t} + λ_sum·Â_i^sum·summary_mask_{i,t}            (Eq. 8)
    A_{i,t} = A_i^succ + λ_action·A_i^action·M_{i,t}                                        (Eq. 13, ToolPO)
    A_{i,t} = λ_tool·(Â_i^tool + ω·Â_{i,k(t)})·tool_mask_{i,t} + λ_sum·Â_i^sum·summary_mask_{i,t}   (Eq. 14)
    A_{i,t} = λ_tool·Â_i^tool·(tool_mask + d)_{i,t} + λ_sum·Â_i^sum·(summary_mask − d)_{i,t}           (Eq. 15)

P_seg holds the group's rollouts that have the segment (the presence filter); a rollout outside
it, or in a group with |P_seg| < 2, gets 0; λ applies after normalisation, so tool-token
advantages never depend on any R^sum. std is unbiased, ε = 1e-6; statistics are float64 and
equal rewards give exactly 0 (`stats="release"`: the release's float32). A non-finite present
reward zeroes its group for that segment. ToolPO's M is SLCA's tool_mask; Eq. 14's per-turn
credit (`--turn-credit ω`, off by default) normalises turn k over the group's rollouts that
have a turn k. Eq. 15's decision credit (`--decision-credit tool`, off by default) pays the
tokens d that decide to stop calling (segment.decision_mask) with Â^tool, not Â^sum; beside
Eq. 14 they get Â^tool alone (they open no tool turn). The rules in full: docs/method.md §3.

`token_advantages` is what train.py trains on for each `--algo`, under `Credit`, the knobs this
module owns (train.py's flags of the same names); `slca_terms` and `log_sums` give the training
logs' SLCA sums, whatever the algorithm. `group_normalize` states Eq. 7 one
group at a time; the functions here run its vectorised twin, lib/training/groups.py, which
tests/test_advantage.py pins to it bit for bit.
"""
from dataclasses import dataclass, field

import torch

from rewards import lam  # λ_tool and λ_sum of Eqs. 4 and 8: one pair of flags sets both
from segment import run_index

from lib.training.groups import normalize

EPS = 1e-6  # docs/method.md §3: ε of the released code
ALGOS = ("slca", "grpo", "toolpo")  # train.py --algo: SLCA (Eqs. 7-8, 14), GRPO (Eq. 6, "w/o SLCA"), ToolPO (Eq. 13)
STATS = ("exact", "release")  # group statistics: float64, equal values give 0; or float32 as the release computes them


def group_normalize(x, present, group_ids, eps=EPS, norm_by_std=True, stats=STATS[0]):
    """Eq. 7 in each group: (x - group mean) / (group std + ε) over the group's present members.

    x: (B,) float, present: (B,) bool, group_ids: (B,) int. Returns (B,) in x's dtype, 0 where
    absent, where the group has fewer than two present members, where their values are all
    equal (stats "exact" only), or where a present member's value is not finite. The plain
    statement, one group at a time; the functions below run lib/training/groups.py's vectorised
    `normalize`, which tests/test_advantage.py pins to this one bit for bit.
    """
    xs = x.double() if stats == "exact" else x.float()         # (B,) statistics in float64, or the release's float32
    out = torch.zeros_like(xs)                                  # (B,)
    for g in group_ids.unique():
        rows = (group_ids == g) & present                       # (B,) the group's present members
        vals = xs[rows]                                         # (n,)
        if len(vals) < 2 or not vals.isfinite().all():
            continue
        if stats == "release":
            mean, std = vals.mean(), vals.std()                 # torch's float32 estimators (core_algos.py)
        elif vals.min() == vals.max():
            continue                                            # equal values give exactly 0
        else:
            mean = _sum(vals) / len(vals)
            var = _sum((vals - mean) ** 2) / (len(vals) - 1)    # unbiased
            std = vals.new_tensor(var).sqrt()                   # torch's sqrt (math.sqrt's differs by an ulp at times)
        out[rows] = (vals - mean) / (std + eps) if norm_by_std else vals - mean
    return out.to(x.dtype)


def _sum(vals):
    """The sum of a float64 vector, added left to right (the order lib/training/groups.py's index_add adds in)."""
    total = 0.0
    for v in vals.tolist():
        total += v
    return total


def alone(adv, x, present, group_ids, eps=EPS, norm_by_std=True):
    """adv with verl's rule for a group of one present member: mean 0, std 1, so x, or
    x / (1 + ε) with std. All (B,)."""
    _, g = torch.unique(group_ids, return_inverse=True)        # (B,) dense ids
    count = torch.bincount(g, weights=present.double())         # (NG,) present members
    lone = x / (1 + eps) if norm_by_std else x                  # (B,)
    return torch.where(present & (count[g] == 1) & x.isfinite(), lone, adv)


def grpo_advantages(scores, group_ids, eps=EPS, norm_by_std=True, present=None, stats=STATS[0]):
    """Eq. 6: one advantage per rollout, (B,), over the `present` rollouts (all if None).
    Broadcast it with `response_mask`. stats "release" adds verl's group-of-one rule."""
    present = torch.ones_like(scores, dtype=torch.bool) if present is None else present
    adv = normalize(scores, present, group_ids, eps, norm_by_std, stats)
    return alone(adv, scores, present, group_ids, eps, norm_by_std) if stats == "release" else adv


def slca_advantages(r_tool, r_sum, tool_present, summary_present, group_ids, *,
                    eps=EPS, lam_tool=1.0, lam_sum=1.0, norm_by_std=True, stats=STATS[0]):
    """Eq. 7 with λ applied after normalisation: (adv_tool, adv_sum), each (B,)."""
    adv_tool = lam_tool * normalize(r_tool, tool_present, group_ids, eps, norm_by_std, stats)
    adv_sum = lam_sum * normalize(r_sum, summary_present, group_ids, eps, norm_by_std, stats)
    return adv_tool, adv_sum


def toolpo_advantages(r_succ, r_action, present, tool_present, group_ids, *, lam_action=1.0, norm_by_std=False,
                      eps=EPS, stats=STATS[0]):
    """Eq. 13: (adv_succ, adv_action), each (B,), adv_action already scaled by λ_action.

    present: (B,) bool, the rollouts that enter A^succ (all of them in the release; a caller
    may leave out failed ones); tool_present: (B,) bool, P_tool for A^action (include only
    present rollouts). Per token: `route(adv_succ + adv_action, adv_succ, tool_mask,
    summary_mask)`, i.e. adv_succ on every response token plus adv_action on the tool tokens.
    """
    adv_succ = alone(normalize(r_succ, present, group_ids, eps, norm_by_std, stats), r_succ, present,
                     group_ids, eps, norm_by_std)
    adv_action = lam_action * normalize(r_action, tool_present, group_ids, eps, norm_by_std, stats)
    return adv_succ, adv_action


TURN_CREDIT = 0.0  # ω of README Eq. 14: no per-turn credit, Eq. 8 exactly (train.py --turn-credit)


def turn_advantages(r_turn, turn_present, group_ids, eps=EPS, norm_by_std=True):
    """Eq. 14's Â_{i,k}: r_turn (B, K) per-turn rewards, turn_present (B, K) bool; each turn
    position k of each group is its own group of Eq. 7's statistics. Returns (B, K)."""
    B, K = r_turn.shape
    _, g = torch.unique(group_ids, return_inverse=True)        # (B,) dense ids
    ids = (g[:, None] * K + torch.arange(K)).reshape(-1)       # (B·K,) one group per (group, k)
    return normalize(r_turn.reshape(-1), turn_present.reshape(-1), ids, eps, norm_by_std, STATS[0]).reshape(B, K)


def route_turns(adv_tool, adv_sum, adv_turn, runs, tool_mask, summary_mask, *, omega, lam_tool=1.0):
    """Eq. 14: per-token advantages (B, T). adv_tool and adv_sum as `route` (λ applied);
    adv_turn (B, K) from turn_advantages; runs (B, T) from segment.run_index (turn k = run k).
    ω = 0 returns `route` itself, bit for bit."""
    if omega == 0 or adv_turn.shape[1] == 0:
        return route(adv_tool, adv_sum, tool_mask, summary_mask)
    k = runs.clamp(0, adv_turn.shape[1] - 1)                   # (B, T) turn of each token
    per_token = adv_turn.gather(1, k)                          # (B, T)
    tool = adv_tool[:, None] + lam_tool * omega * per_token    # (B, T)
    return torch.where(tool_mask.bool(), tool, 0.0) + torch.where(summary_mask.bool(), adv_sum[:, None], 0.0)


def route(adv_tool, adv_sum, tool_mask, summary_mask):
    """Eq. 8: per-token advantages (B, T); 0 on prompt, observation and padding tokens,
    whatever a row's advantage holds (where, not a product: NaN·0 = NaN)."""
    return (torch.where(tool_mask.bool(), adv_tool[:, None], 0.0)
            + torch.where(summary_mask.bool(), adv_sum[:, None], 0.0))  # (B, T)


DECISION_CREDIT = ("summary", "tool")  # train.py --decision-credit: Eq. 8's (the paper's), or Eq. 15's


def route_decision(A, adv_tool, decision):
    """Eq. 15: A (B, T) from `route` or `route_turns`, with the decision tokens (decision (B, T),
    segment.decision_mask) paid adv_tool (B,) (λ_tool applied) instead of the summary's advantage."""
    return torch.where(decision.bool(), adv_tool[:, None], A)                           # (B, T)


# ---------------------------------------------------------------------------------------------
# the per-token advantage of each --algo (what train.py trains on), and its logged diagnostics
@dataclass(frozen=True)
class Credit:
    """Who gets which advantage: train.py's flags of the same names ("rewards and advantages")."""
    algo: str = field(default=ALGOS[0], metadata={
        "choices": ALGOS, "help": "grpo = the 'w/o SLCA' ablation; toolpo = the release's additive baseline (Eq. 13)"})
    lam_tool: float = lam("tool")
    lam_sum: float = lam("sum")
    turn_credit: float = field(default=TURN_CREDIT, metadata={
        "metavar": "OMEGA", "range": "[0, 100]",
        "help": "ω of README Eq. 14 (--algo slca only, a project extension): tool turn k's tokens also get ω x the "
                "group-normalised reward of turn k against gold step k; 0 = SLCA exactly"})
    decision_credit: str = field(default=DECISION_CREDIT[0], metadata={
        "choices": DECISION_CREDIT,
        "help": "who pays the tokens that decide to stop calling (the summary turn's first, README Eq. 15; --algo "
                "slca only, a project extension): summary = Â_sum, SLCA exactly; tool = Â_tool"})
    norm_by_std: bool = field(default=True, metadata={"help": "--no-norm-by-std subtracts the group mean only (Dr. GRPO)"})
    group_stats: str = field(default=STATS[0], metadata={
        "choices": STATS, "hidden": True,
        "help": "exact = float64, equal rewards give exactly 0, a GRPO group of one gets 0; release = the release's "
                "float32 torch statistics (sixteen equal 0.9s get a nonzero advantage) and verl's mean 0, std 1 for a "
                "GRPO group of one"})
    toolpo_norm_by_std: bool = field(default=False, metadata={
        "hidden": True, "help": "ToolPO divides by the group std too (what the release's ToolPO launchers ran, "
                                "verl's default; the paper says no std, docs/method.md §3.3)"})


def turn_table(turn_r, response_mask):
    """Per-turn rewards as (B, K) with their presence (B, K) bool, K the most tool turns of a row.
    turn_r: per rollout, its tool turns' rewards (rewards.turn_rewards of every turn but the
    last). Turn k of row i is present when the row's loss mask holds one run per turn, its tool
    turns and the summary (Eq. 1); a row whose mask holds another number of runs (a dropped
    rollout, whose mask is all 0, or a turn that sampled no token) has no turn present, since
    its runs cannot be matched to its turns."""
    B, K = len(turn_r), max(map(len, turn_r), default=0)
    r, present = torch.zeros(B, K), torch.zeros(B, K, dtype=torch.bool)              # (B, K)
    runs = (run_index(response_mask).amax(1) + 1).tolist()                           # (B,) runs in the mask
    for i, x in enumerate(turn_r):
        if x and runs[i] == len(x) + 1:
            r[i, :len(x)], present[i, :len(x)] = torch.tensor(x), True
    return r, present


def slca_terms(scores, turn_r, batch, keep, group_ids, credit=Credit()):
    """SLCA's per-rollout terms on the CPU: (adv_tool, adv_sum, adv_turn, tool_present, summary_present),
    under `credit`'s λs, std division and statistics.

    scores: per rollout, a dict with r_tool, r_sum (rewards.score); turn_r: per rollout, its tool
    turns' rewards (see turn_table); batch: response_mask, tool_mask, summary_mask (B, L) as
    rollout.collate makes them, 0 on dropped rows; keep (B,) bool, the rollouts that enter the
    group statistics (the others get 0); group_ids (B,) int. Eq. 7 (B,) each, Eq. 14's Â_{i,k}
    (B, K), and each segment's presence (B,) bool."""
    col = lambda k: torch.tensor([s[k] for s in scores], dtype=torch.float32)  # noqa: E731  (B,)
    tp = batch["tool_mask"].bool().any(1).cpu() & keep                                  # (B,)
    sp = batch["summary_mask"].bool().any(1).cpu() & keep
    adv_tool, adv_sum = slca_advantages(col("r_tool"), col("r_sum"), tp, sp, group_ids, lam_tool=credit.lam_tool,
                                        lam_sum=credit.lam_sum, norm_by_std=credit.norm_by_std,
                                        stats=credit.group_stats)                       # (B,) each
    adv_turn = turn_advantages(*turn_table(turn_r, batch["response_mask"].cpu()), group_ids,
                               norm_by_std=credit.norm_by_std)                          # (B, K)
    return adv_tool, adv_sum, adv_turn, tp, sp


def token_advantages(scores, turn_r, batch, keep, group_ids, credit=Credit(), *, decision=None):
    """The per-token advantages A (B, L) that `credit.algo` trains on (one of ALGOS), on the masks' device.

    Arguments as slca_terms; scores also hold score, r_succ, r_action. credit.turn_credit is Eq. 14's
    ω (slca only); credit.toolpo_norm_by_std is Eq. 13's std division (norm_by_std is the others');
    decision (B, L), segment.decision_mask of the batch's masks, is Eq. 15's d, needed when
    credit.decision_credit is "tool" (slca only; "summary": Eq. 8)."""
    algo, stats = credit.algo, credit.group_stats
    tool_mask, summary_mask = batch["tool_mask"], batch["summary_mask"]
    dev = lambda x: x.to(tool_mask.device)  # noqa: E731
    col = lambda k: torch.tensor([s[k] for s in scores], dtype=torch.float32)  # noqa: E731  (B,)
    if credit.decision_credit == "tool" and (algo != "slca" or decision is None):
        raise ValueError(f"decision credit (Eq. 15) is SLCA's, on the decision mask: algo slca with `decision`, "
                         f"not {algo!r}{' without it' if decision is None else ''}")
    if algo == "slca":                                                                  # Eqs. 7-8, 14
        adv_tool, adv_sum, adv_turn, _, _ = slca_terms(scores, turn_r, batch, keep, group_ids, credit)
        A = route_turns(dev(adv_tool), dev(adv_sum), dev(adv_turn), run_index(batch["response_mask"]),
                        tool_mask, summary_mask, omega=credit.turn_credit, lam_tool=credit.lam_tool)  # (B, L)
        return route_decision(A, dev(adv_tool), decision) if credit.decision_credit == "tool" else A  # Eq. 15
    if algo == "grpo":                                                                  # Eq. 6
        adv = grpo_advantages(col("score"), group_ids, norm_by_std=credit.norm_by_std, present=keep,
                              stats=stats)  # (B,)
        return route(dev(adv), dev(adv), tool_mask, summary_mask)
    if algo == "toolpo":                                                                # Eq. 13
        tp = tool_mask.bool().any(1).cpu() & keep                                       # (B,)
        a_succ, a_action = toolpo_advantages(col("r_succ"), col("r_action"), keep, tp, group_ids,
                                             norm_by_std=credit.toolpo_norm_by_std, stats=stats)
        return route(dev(a_succ + a_action), dev(a_succ), tool_mask, summary_mask)
    raise ValueError(f"algo must be one of {ALGOS}, not {algo!r}")


def log_sums(adv_tool, adv_sum, adv_turn, tool_present, summary_present, group_ids):
    """The training logs' sums over slca_terms' output (seg_stats of each segment, the rollouts whose
    two segment advantages have opposite signs, turn_stats)."""
    return {**seg_stats(adv_tool, tool_present, group_ids, "tool"),
            **seg_stats(adv_sum, summary_present, group_ids, "sum"),
            "sign_conflict": float(((adv_tool * adv_sum) < 0).sum()), **turn_stats(adv_turn, adv_tool)}


def turn_stats(adv_turn, adv_tool):
    """Sums for the per-turn sign-conflict rate: the tool turns with a nonzero Â_{i,k} (only a
    present turn in a group of two or more with unequal rewards has one), and those of them
    whose sign is opposite to their rollout's segment advantage Â_i^tool."""
    live = adv_turn != 0                                                               # (B, K)
    return {"turn_n": float(live.sum()), "turn_conflict": float((live & (adv_turn * adv_tool[:, None] < 0)).sum())}


def seg_stats(adv, present, gids, name):
    """Sums for the mean and std of a segment's advantages over present rollouts, and the
    groups whose advantages are all zero for that segment (no learning signal)."""
    x = adv[present].double()
    zero = [bool((adv[gids == g] == 0).all()) for g in gids.unique()]
    return {f"adv_{name}_n": float(x.numel()), f"adv_{name}_sum": float(x.sum()), f"adv_{name}_sq": float((x * x).sum()),
            f"adv_{name}_zero": float(sum(zero)), f"adv_{name}_groups": float(len(zero))}
