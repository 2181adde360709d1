"""The summary judges of HierR's S_sum (README Eq. 3, docs/method.md §2.2): the offline FactsJudge,
NoisyJudge (train.py --judge-noise), and `summary_judge`, which builds the LLM judge (lib/llm.py)
on a client or, without one, the facts judge.

A judge is any object with `rate(question, tool_responses, response, facts) -> int | None` (and,
for ToolPO's --succ-judge, `solved(question, tool_responses, response) -> bool | None`);
rewards.score gives it at most MAX_JUDGE_CHARS of each text. A rating that is not 1..5 (None:
the judge cannot rate it) scores 0; a ConnectionError (a transport failure after retries) scores
0 and marks the rollout `judge_failed`.
"""
import json
import math
import random
import re

from lib.llm import JUDGE_PROMPT, SOLVED_PROMPT, LLMJudge

NUMBER_RE = re.compile(r"-?\d[\d,]*(?:\.\d+)?")


def summary_judge(client=None, prompt=JUDGE_PROMPT, solved_prompt=SOLVED_PROMPT):
    """The summary judge: the LLM judge on `client` (lib/llm.py, rating with the templates `prompt` and
    `solved_prompt`), else, without a client, the offline FactsJudge."""
    return LLMJudge(client, prompt=prompt, solved_prompt=solved_prompt) if client is not None else FactsJudge()


class FactsJudge:
    """Offline, deterministic judge: rates by the share of reference facts the response states.

    A fact is stated when its text appears in the response (case and spacing ignored), or,
    for a numeric fact, when the response holds the same number (within 1e-6, commas ignored).
    Share s in [0, 1] maps onto the five levels as r = 1 + round_half_up(4·s). A row without facts
    cannot be rated (None, which scores 0): `can_rate(task)` says so before a run.
    """

    def can_rate(self, task):
        return bool(task.facts)

    def rate(self, question, tool_responses, response, facts=None):
        if not facts:
            return None
        text = " ".join(response.lower().split())
        numbers = [float(n.replace(",", "")) for n in NUMBER_RE.findall(response)]
        share = sum(_states(text, numbers, f) for f in facts) / len(facts)
        return 1 + int(4 * share + 0.5)  # round half up onto 1..5


def _states(text, numbers, fact):
    fact = " ".join(str(fact).lower().split())
    if fact in text:
        return True
    try:
        x = float(fact.replace(",", ""))
    except ValueError:
        return False
    return any(math.isclose(x, n, rel_tol=1e-6, abs_tol=1e-9) for n in numbers)


class NoisyJudge:
    """The judge-noise control (train.py --judge-noise P): with probability `p` the rating of
    `judge` is replaced by a level drawn uniformly from 1..5 (the judge is then not asked).

    Noise on R_sum is what SLCA is built to contain: under GRPO it reaches the tool tokens
    through the shared advantage, under SLCA only the summary tokens. The draws are a pure
    function of (seed, question, tool responses, response), so a run is reproducible even
    though rewards.score is called from several threads in any order.
    """

    def __init__(self, judge, p, seed=0):
        assert 0.0 <= p <= 1.0, "the noise probability must be in [0, 1]"
        self.judge, self.p, self.seed = judge, p, seed

    def rate(self, question, tool_responses, response, facts=None):
        r = random.Random(json.dumps([self.seed, question, list(tool_responses), response]))
        if r.random() < self.p:
            return r.randint(1, 5)
        return self.judge.rate(question, tool_responses, response, facts)
