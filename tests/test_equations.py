"""The README's numbered equations equal the code, and docs/method.md states them as the README does.

Each test reads one equation from the README as written (a pattern of its text: a reworded equation
fails here, naming itself) and takes its constants, clamps, weights and counts from that text alone;
then it probes the function train.py runs for that equation with inputs where each of them shows,
against a plain statement of the equation in this file. So a change to either side alone fails: the
README's text no longer gives what the code computes, or the code no longer computes what the text
says. docs/method.md marks its formula lines `(Eq. n)`; each must be the README's Eq. n, whitespace
aside. Every numbered equation of the README has a probe here (test_every_equation_is_probed).
"""
import inspect
import math
import re
import statistics
from pathlib import Path

import pytest
import torch

import loss
import rewards
import train
from advantage import Credit, grpo_advantages, token_advantages
from lib.inputs.data import Task
from lib.runs import config
from loss import Clip, normaliser, policy_loss
from segment import segment_masks

ROOT = Path(__file__).resolve().parent.parent
PROBED = set(range(1, 17))  # the equations the tests below probe
NUM = r"(-?\d[\d.]*(?:e-?\d+)?)"


def flat(text):
    """Whitespace collapsed, the typographic minus as '-'."""
    return " ".join(text.replace("−", "-").split())


def readme_equations():
    """{n: text} of the README's numbered equations: an indented `(n)` line and the indented lines
    that continue it, flattened."""
    eqs, n = {}, None
    for line in (ROOT / "README.md").read_text().splitlines():
        m = re.match(r" {4}\((\d+)\)\s+(.*)", line)
        if m:
            n = int(m.group(1))
            eqs[n] = m.group(2)
        elif n is not None and line.startswith(" " * 6) and line.strip():
            eqs[n] += " " + line
        else:
            n = None
    return {k: flat(v) for k, v in eqs.items()}


EQ = readme_equations()
PROSE = flat((ROOT / "README.md").read_text())


def read(n, pattern):
    """The numbers `pattern` (the equation's text with {} for each number) captures in README Eq. n."""
    rx = "^" + NUM.join(map(re.escape, flat(pattern).split("{}"))) + "$"
    m = re.match(rx, EQ.get(n, ""))
    if not m:
        pytest.fail(f"README Eq. {n} no longer reads as {pattern!r}: {EQ.get(n)!r}; check it against the code, "
                    f"then update its probe here")
    return [float(x) for x in m.groups()]


def said(pattern):
    """The numbers `pattern` captures in the README's prose (whitespace collapsed)."""
    m = re.search(NUM.join(map(re.escape, flat(pattern).split("{}"))), PROSE)
    if not m:
        pytest.fail(f"the README no longer says {pattern!r}")
    return [float(x) for x in m.groups()]


def normalised(vals, eps, least=2):
    """Eq. 7 over one set of rewards, plainly: unbiased std; 0 with fewer than `least` or all equal."""
    if len(vals) < least or len(set(vals)) == 1:
        return [0.0] * len(vals)
    mean, std = statistics.fmean(vals), statistics.stdev(vals)
    return [(v - mean) / (std + eps) for v in vals]


def by_group(values, present, groups, eps, least=2):
    """normalised() within each group over its present members; 0 for the others."""
    out = [0.0] * len(values)
    for g in set(groups):
        rows = [i for i in range(len(values)) if groups[i] == g and present[i]]
        for i, a in zip(rows, normalised([values[i] for i in rows], eps, least)):
            out[i] = a
    return out


def runs_of(row):
    """The (start, end) of each maximal run of 1s."""
    out, start = [], None
    for t, v in enumerate(list(row) + [0]):
        if v and start is None:
            start = t
        elif not v and start is not None:
            out.append((start, t))
            start = None
    return out


def test_every_equation_is_probed():
    assert sorted(EQ) == sorted(PROBED), "a README equation without a probe here, or a probe without its equation"


def test_docs_method_states_the_readme_equations():
    tagged = {}
    for line in (ROOT / "docs" / "method.md").read_text().splitlines():
        m = re.match(r"\s{4,}(\S.*?)\s+\(Eq\. (\d+)\)$", line)
        if m:
            tagged[int(m.group(2))] = flat(m.group(1))
    assert sorted(tagged) == [2, 6, 7, 8, 9, 10, 11, 13, 14, 15]
    for n, text in tagged.items():
        readme = re.sub(r"^(GRPO|SLCA): ", "", EQ[n])
        assert text == readme, f"docs/method.md Eq. {n}: {text!r}; README: {readme!r}"


# ---------------------------------------------------------------------------------------------
# Eq. 1, segment.py
def test_eq1_segments():
    read(1, "summary_mask = the last run of m; tool_mask = m - summary_mask")
    m = torch.tensor([[0, 1, 1, 0, 1, 0, 1, 1], [1, 1, 1, 0, 0, 0, 0, 0], [0] * 8, [0, 1, 0, 1, 0, 1, 0, 0]])
    tool, summary, _, _ = segment_masks(m)
    for i, row in enumerate(m.tolist()):
        want = [0] * 8
        if runs_of(row):
            s, e = runs_of(row)[-1]
            want[s:e] = [1] * (e - s)
        assert summary[i].tolist() == want and (tool[i] + summary[i]).tolist() == row


# ---------------------------------------------------------------------------------------------
# Eqs. 2-5, rewards.py
GOLD = [[{"name": "a", "arguments": {"x": 1, "y": 2}}, {"name": "b", "arguments": {"u": 1}}],
        [{"name": "c", "arguments": {"z": 3}}]]
CALLS = ('<tool_call>[{"name": "a", "arguments": {"x": 1, "w": 5}}, {"name": "b", "arguments": {"u": 1}}]</tool_call>'
         '<tool_call>{"name": "a", "arguments": {"y": 3}}</tool_call>' + '<tool_call>oops</tool_call>' * 3)


def task(facts=("42",)):
    return Task(messages=[], tools=[], allowed_tools=["a", "b", "c"], gold=GOLD, question="q", facts=list(facts))


class Judge:
    def __init__(self, r):
        self.r = r

    def rate(self, question, tool_responses, response, facts=None):
        return self.r


def test_eq2_process_score_weights():
    w = read(2, "S_process = {}·format + {}·name + {}·key + {}·value + {}·parallel")
    s = rewards.process_score(CALLS, GOLD, ["a", "b", "c"])
    parts = [s[k] for k in ("format", "name", "key", "value", "parallel")]
    assert len(set(parts)) == 5 and 0 not in parts, parts                # each weight shows in the sum
    assert s["process"] == pytest.approx(sum(x * y for x, y in zip(w, parts)), abs=1e-12)


def test_eq3_summary_score():
    one, four = read(3, "S_sum = (r - {}) / {}, r ∈ {1..5} from a judge of the final response")
    for r in range(1, 6):
        assert rewards.summary_score("the answer is here", "q", ["{}"], Judge(r)) == (r - one) / four
    assert rewards.summary_score("the answer is here", "q", ["{}"], Judge(6)) is None   # unrated: scored 0


def test_eq4_and_eq5_score_and_segment_rewards():
    (omission,) = read(4, "score = λ_tool·S_process + λ_sum·S_sum, or {} (every part 0) when gold has calls and "
                          "the response holds no `<tool_call>` tag")
    read(5, "(R_tool, R_sum) = (0, score) if omission or score < 0, else (S_process, S_sum)")
    final, responses = "the answer is 42 and more", ['{"v": 42}']
    s = rewards.score(CALLS, final, responses, task(), rewards.FactsJudge(), rewards.HierR(lam_tool=2.0, lam_sum=3.0))
    assert s["summary"] == 1.0 and 0 < s["process"] < 1
    assert s["score"] == pytest.approx(2.0 * s["process"] + 3.0 * s["summary"])
    assert (s["r_tool"], s["r_sum"]) == (s["process"], s["summary"])
    s = rewards.score("I will not call anything", final, responses, task(), rewards.FactsJudge())
    parts = [s[k] for k in ("format", "name", "key", "value", "parallel", "summary")]
    assert (s["score"], s["r_tool"], s["r_sum"], s["omission"], parts) == (omission, 0.0, omission, 1.0, [0.0] * 6)
    s = rewards.score(CALLS, final, responses, task(), rewards.FactsJudge(), rewards.HierR(lam_tool=-1.0, lam_sum=-1.0))
    assert s["score"] < 0 and (s["r_tool"], s["r_sum"]) == (0.0, s["score"])


# ---------------------------------------------------------------------------------------------
# Eqs. 6-8, 13-15, advantage.py (token_advantages: what train.py trains on)
def advantage_eps():
    eps, = said("**Advantages** — `advantage.py`. Per group g, ε = {}, std unbiased:")
    return eps


def batch(rows):
    m = torch.tensor(rows)
    tool, summary, _, _ = segment_masks(m)
    return {"response_mask": m, "tool_mask": tool, "summary_mask": summary}


def f32(xs):
    """Rewards as train.py hands them to advantage.py: float32."""
    return torch.tensor(xs, dtype=torch.float32).tolist()


# two groups of four (three and two with a tool segment) and a group of one; group 1's summary rewards 1e-6
# apart, so that ε shows
ROWS = [[1, 1, 0, 1, 1, 0, 1, 1], [1, 0, 1, 1, 0, 0, 0, 0], [0, 1, 1, 1, 0, 0, 0, 0], [1, 0, 1, 0, 1, 1, 0, 0],
        [1, 1, 0, 0, 0, 0, 0, 0], [0, 1, 0, 1, 1, 1, 0, 0], [1, 1, 1, 1, 0, 0, 0, 0], [1, 0, 1, 1, 0, 0, 0, 0],
        [1, 0, 1, 1, 0, 0, 0, 0]]
GIDS = [0, 0, 0, 0, 1, 1, 1, 1, 2]
R_TOOL = f32([0.9, 0.8, 0.5, 0.25, 0.3, 0.7, 0.1, 0.2, 0.6])
R_SUM = f32([0.25, 1.0, 0.0, 0.75, 0.5, 0.5 + 2e-6, 0.5 + 1e-6, 0.5, 0.6])
TURN_R = [f32(x) for x in ([0.3, 0.8], [0.5], [], [0.2, 0.4], [], [0.9], [], [], [0.1])]


def scores():
    return [{"r_tool": t, "r_sum": s, "score": t + s, "r_succ": float(s > 0.5), "r_action": t}
            for t, s in zip(R_TOOL, R_SUM)]


def advantages(algo, **kw):
    b = batch(ROWS)
    keep = torch.ones(len(ROWS), dtype=torch.bool)
    turn_r, decision = kw.pop("turn_r", [[] for _ in ROWS]), kw.pop("decision", None)
    credit = Credit(algo=algo, decision_credit="summary" if decision is None else "tool", **kw)
    A = token_advantages(scores(), turn_r, b, keep, torch.tensor(GIDS), credit, decision=decision)
    return A.double().tolist(), b


def per_token(b, tool_value, summary_value):
    """tool_value(i, t) on row i's tool tokens, summary_value(i, t) on its summary tokens, 0 elsewhere."""
    return [[tool_value(i, t) if b["tool_mask"][i, t] else summary_value(i, t) if b["summary_mask"][i, t] else 0.0
             for t in range(len(ROWS[0]))] for i in range(len(ROWS))]


def close(got, want):
    for i, (g, w) in enumerate(zip(got, want)):
        assert g == pytest.approx(w, rel=1e-5, abs=1e-6), f"row {i}: {g} != {w}"


def segment_advantages(eps, b):
    """Eq. 7 for both segments: P_seg holds the rows that have the segment, |P_seg| < least gives 0."""
    (least,) = said("a rollout outside it, or a group with |P_seg| < {}, gets 0")
    has_tool, has_sum = b["tool_mask"].any(1).tolist(), b["summary_mask"].any(1).tolist()
    return by_group(R_TOOL, has_tool, GIDS, eps, least), by_group(R_SUM, has_sum, GIDS, eps, least)


def test_eq6_grpo():
    read(6, "GRPO: Â_i = (score_i - mean_g score) / (std_g score + ε), A_{i,t} = Â_i")
    eps = advantage_eps()
    sc = [t + s for t, s in zip(R_TOOL, R_SUM)]
    near = [1.0, 1.0 + 1e-6, 1.0 + 2e-6, 1.0]                      # std about ε, so that ε shows
    got = grpo_advantages(torch.tensor(near, dtype=torch.float64), torch.tensor([0] * 4)).tolist()
    assert got == pytest.approx(normalised(near, eps), rel=1e-6)
    assert got != pytest.approx(normalised(near, 10 * eps), rel=0.1)
    got = grpo_advantages(torch.tensor(sc, dtype=torch.float32), torch.tensor(GIDS)).tolist()
    assert got == pytest.approx(by_group(f32(sc), [True] * len(sc), GIDS, eps), rel=1e-5, abs=1e-6)
    A, b = advantages("grpo")
    close(A, per_token(b, lambda i, t: got[i], lambda i, t: got[i]))


def test_eq7_and_eq8_slca():
    read(7, "SLCA: Â_i^seg = (R_i^seg - mean_{P_seg} R^seg) / (std_{P_seg} R^seg + ε) for seg ∈ {tool, sum}")
    read(8, "A_{i,t} = λ_tool·Â_i^tool·tool_mask_{i,t} + λ_sum·Â_i^sum·summary_mask_{i,t}")
    A, b = advantages("slca", lam_tool=2.0, lam_sum=3.0)
    eps = advantage_eps()
    tool, summary = segment_advantages(eps, b)
    assert tool[5] != 0 and tool[2] == tool[4] == tool[8] == 0    # P_tool: 2 rows in group 1, 1 in group 2
    assert abs(segment_advantages(10 * eps, b)[1][5] / summary[5] - 1) > 0.1   # ε shows in group 1's summaries
    close(A, per_token(b, lambda i, t: 2.0 * tool[i], lambda i, t: 3.0 * summary[i]))


def test_eq13_toolpo():
    read(13, "A_{i,t} = (R_succ,i - mean_g R_succ) + λ_action·M_{i,t}·(R_action,i - mean_{P_tool} R_action)")
    lam, = said("λ_action = {} (the release's λ)")
    A, b = advantages("toolpo")
    has_tool = b["tool_mask"].any(1).tolist()
    succ = [s["r_succ"] for s in scores()]
    a_succ = []
    for i, g in enumerate(GIDS):
        group = [succ[j] for j in range(len(GIDS)) if GIDS[j] == g]
        a_succ.append(succ[i] - (statistics.fmean(group) if len(group) > 1 else 0.0))  # a group of one: mean 0
    a_action = [0.0] * len(GIDS)
    for g in set(GIDS):
        rows = [i for i in range(len(GIDS)) if GIDS[i] == g and has_tool[i]]
        if len(rows) >= 2:
            mean = statistics.fmean(R_TOOL[i] for i in rows)
            for i in rows:
                a_action[i] = R_TOOL[i] - mean
    assert a_succ[-1] == succ[-1] == 1.0 and a_action[-1] == 0.0   # a group of one: mean 0, and no P_tool pair
    close(A, per_token(b, lambda i, t: a_succ[i] + lam * a_action[i], lambda i, t: a_succ[i]))


def test_eq14_turn_credit():
    read(14, "A_{i,t} = λ_tool·(Â_i^tool + ω·Â_{i,k(t)})·tool_mask_{i,t} + λ_sum·Â_i^sum·summary_mask_{i,t}")
    eps, omega = advantage_eps(), 0.5
    A, b = advantages("slca", lam_tool=2.0, lam_sum=3.0, turn_credit=omega, turn_r=TURN_R)
    tool, summary = segment_advantages(eps, b)
    runs = [runs_of(r) for r in ROWS]
    has = [[len(runs[i]) == len(TURN_R[i]) + 1 and k < len(TURN_R[i]) for k in range(2)] for i in range(len(ROWS))]
    turn = [[0.0, 0.0] for _ in ROWS]
    for k in range(2):
        col = by_group([x[k] if k < len(x) else 0.0 for x in TURN_R], [h[k] for h in has], GIDS, eps)
        for i in range(len(ROWS)):
            turn[i][k] = col[i]
    assert any(v for row in turn for v in row)

    def turn_of(i, t):
        return next(k for k, (s, e) in enumerate(runs[i]) if s <= t < e)
    close(A, per_token(b, lambda i, t: 2.0 * (tool[i] + omega * turn[i][turn_of(i, t)]), lambda i, t: 3.0 * summary[i]))


def test_eq15_decision_credit():
    read(15, "A_{i,t} = λ_tool·Â_i^tool·(tool_mask + d)_{i,t} + λ_sum·Â_i^sum·(summary_mask - d)_{i,t}")
    b = batch(ROWS)
    d = torch.zeros_like(b["response_mask"])
    for i, row in enumerate(ROWS):
        if b["tool_mask"][i].any():
            d[i, runs_of(row)[-1][0]] = 1                                # the summary turn's first token
    A, b = advantages("slca", lam_tool=2.0, lam_sum=3.0, decision=d)
    tool, summary = segment_advantages(advantage_eps(), b)
    close(A, [[2.0 * tool[i] * (b["tool_mask"][i, t] + d[i, t]).item()
               + 3.0 * summary[i] * (b["summary_mask"][i, t] - d[i, t]).item() for t in range(len(ROWS[0]))]
              for i in range(len(ROWS))])


# ---------------------------------------------------------------------------------------------
# Eqs. 9-12, loss.py
def loss_constants():
    return said("**Loss** — `loss.py`. ε = {}, c = {}, β = {}:")


def ppo_term(A, r, eps, c):
    """Eq. 10, plainly."""
    clipped = max(-A * r, -A * min(max(r, 1 - eps), 1 + eps))
    return min(clipped, -A * c) if A < 0 else clipped


def k3(d, lo, hi, dlo, dhi):
    """Eq. 11, plainly."""
    d = min(max(d, dlo), dhi)
    return min(max(math.exp(d) - d - 1, lo), hi)


def one_token(logp, old, ref, A, **kw):
    t = lambda x: torch.tensor([[x]], dtype=torch.float32)  # noqa: E731
    return policy_loss(t(logp), t(old), t(ref), t(A), torch.ones(1, 1), 1, clip=Clip(loss_agg="token-mean", **kw))


def test_eq16_extra_call_and_block_charge():
    read(16, "S_process,i ← max(0, S_process,i - c·e_i - b·u_i) in Eqs. 4-5")
    more = CALLS + ('<tool_call>{"name": "c", "arguments": {"z": 3}}</tool_call>'
                    '<tool_call>[{"name": "c", "arguments": {"z": 3}}, {"name": "a", "arguments": {}}]</tool_call>')
    e, u = 6 - 3, 4 - 2          # valid calls and blocks (the three "oops" blocks are not) against GOLD's calls, steps
    final, responses = "the answer is 42 and more", ['{"v": 42}']
    off = rewards.score(more, final, responses, task(), rewards.FactsJudge())
    for c, b in ((0.05, 0.0), (0.0, 0.1), (0.05, 0.1), (1.0, 1.0)):
        s = rewards.score(more, final, responses, task(), rewards.FactsJudge(),
                          rewards.HierR(lam_tool=2.0, extra_call_cost=c, extra_block_cost=b))
        tool = max(0.0, off["process"] - c * e - b * u)
        assert (s["process"], s["extra"], s["extra_blocks"]) == (off["process"], e, u)
        assert s["r_tool"] == pytest.approx(tool) and s["score"] == pytest.approx(2.0 * tool + s["summary"])


def test_eq9_ratio_clamp():
    lo, hi = read(9, "r_{i,t} = exp(clamp(log π_θ - log π_old, {}, {}))")
    for gap, want in ((30.0, hi), (-30.0, lo), (0.5, 0.5)):
        _, st = one_token(gap, 0.0, 0.0, 1.0, kl_beta=0.0)
        assert st["ratio"] == pytest.approx(math.exp(want), rel=1e-5)


def test_eq10_clipped_and_dual_clipped_objective():
    read(10, "L_{i,t} = max(-A·r, -A·clip(r, 1-ε, 1+ε)), and min(L_{i,t}, -A·c) where A < 0")
    eps, c, _ = loss_constants()
    for A in (1.0, -1.0, 0.5, -2.0):
        for r in (0.1, 0.7, 0.85, 1.0, 1.1, 1.3, 2.5, 5.0):
            value, _ = one_token(math.log(r), 0.0, 0.0, A, kl_beta=0.0)
            assert value.item() == pytest.approx(ppo_term(A, r, eps, c), rel=1e-5), (A, r)
    assert ppo_term(-1.0, 5.0, eps, c) == c and ppo_term(1.0, 1.5, eps, c) == -(1 + eps)   # both clips probed


def test_eq11_k3_kl_and_its_clamps():
    lo, hi, dlo, dhi = read(11, "KL_{i,t} = clamp(e^d - d - 1, {}, {}), d = clamp(log π_ref - log π_θ, {}, {})")
    for d in (-30.0, -12.0, -3.0, -0.5, 0.0, 0.5, 2.0, 3.0, 30.0):
        _, st = one_token(0.0, 0.0, d, 0.0)
        assert st["kl"] == pytest.approx(k3(d, lo, hi, dlo, dhi), rel=1e-5), d
    _, st = one_token(-math.inf, 0.0, 0.0, 0.0)                         # d = +inf: finite only with d clamped
    assert st["kl"] == k3(dhi, lo, hi, dlo, dhi)
    # the bound on d shows in the value only below 11 (any bound in [11, 88] gives the same KL in float32),
    # so the line that clamps d is read for it
    line = next(x for x in inspect.getsource(loss.policy_loss).splitlines() if x.strip().startswith("d = "))
    assert [float(x) for x in re.findall(r"clamp\((-?[\d.]+), (-?[\d.]+)\)", line)[0]] == [dlo, dhi], line


COUNTS = {"rollouts of the mini-batch with n_i > 0": lambda m: sum(1 for row in m if any(row)),
          "masked tokens of the mini-batch": lambda m: sum(map(sum, m))}


def test_eq12_aggregation_and_its_N():
    eq = re.fullmatch(r"loss = Σ_i \(Σ_t x_\{i,t\} / n_i\) / N \(seq-mean-token-mean: N = (.+?)\) "
                      r"loss = Σ_\{i,t\} x_\{i,t\} / N \(token-mean: N = (.+?)\) with x_\{i,t\} = L_\{i,t\} \+ "
                      r"β·KL_\{i,t\} over masked tokens, n_i = rollout i's masked tokens", EQ[12])
    assert eq, f"README Eq. 12 no longer reads as this test's pattern: {EQ[12]!r}"
    assert set(eq.groups()) <= COUNTS.keys(), f"README Eq. 12 counts N as {eq.groups()}: not a count this test knows"
    eps, c, beta = loss_constants()
    lo, hi, dlo, dhi = read(11, "KL_{i,t} = clamp(e^d - d - 1, {}, {}), d = clamp(log π_ref - log π_θ, {}, {})")
    g = torch.Generator().manual_seed(0)
    logp, old, ref = (torch.randn(4, 6, generator=g) * 0.6 for _ in range(3))
    A = torch.randn(4, 6, generator=g)
    mask = torch.tensor([[1, 1, 1, 0, 0, 0], [1, 1, 1, 1, 1, 1], [0] * 6, [0, 1, 0, 0, 0, 0]])
    m = mask.tolist()
    x = [[ppo_term(A[i, t].item(), math.exp(logp[i, t].item() - old[i, t].item()), eps, c)
          + beta * k3(ref[i, t].item() - logp[i, t].item(), lo, hi, dlo, dhi) for t in range(6)] for i in range(4)]
    for agg, phrase in zip(("seq-mean-token-mean", "token-mean"), eq.groups()):
        N = normaliser(mask, agg)
        assert N == COUNTS[phrase](m), agg
        n = [sum(row) for row in m]
        if agg == "seq-mean-token-mean":
            want = sum(sum(x[i][t] for t in range(6) if m[i][t]) / n[i] for i in range(4) if n[i]) / N
        else:
            want = sum(x[i][t] for i in range(4) for t in range(6) if m[i][t]) / N
        value, _ = policy_loss(logp, old, ref, A, mask, N, clip=Clip(loss_agg=agg))
        assert value.item() == pytest.approx(want, rel=1e-5), agg


def test_train_py_runs_the_readme_constants_in_both_presets():
    eps, c, beta = loss_constants()
    w = read(2, "S_process = {}·format + {}·name + {}·key + {}·value + {}·parallel")
    agg = re.search(r"`--loss-agg ([\w-]+)` \(the default in both presets\)", PROSE)
    assert agg, "the README no longer names the presets' --loss-agg"
    p = train.parser()
    defaults = {a.dest: a.default for a in p._actions}
    for name in ("demo", "paper"):
        preset = config.read_preset(name)
        run = {k: preset.get(k, defaults[k]) for k in ("clip_eps", "clip_c", "kl_beta", "hierr_weights", "lam_tool",
                                                       "lam_sum", "turn_credit", "decision_credit", "loss_agg")}
        assert run == {"clip_eps": eps, "clip_c": c, "kl_beta": beta, "hierr_weights": w, "lam_tool": 1.0,
                       "lam_sum": 1.0, "turn_credit": 0.0, "decision_credit": "summary", "loss_agg": agg.group(1)}, name
