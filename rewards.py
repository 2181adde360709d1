"""HierR: the hierarchical rewards of SLCA-GRPO (SPEC §2, Eqs. 2-5 in the README).

Each trajectory gets two scores, one per segment (see segment.py):

    S_process = w_f·format + w_n·name + w_k·key + w_v·value + w_p·parallel        (Eq. 2)
    S_sum     = (r - 1) / 4,  r in 1..5 from a judge of the final response         (Eq. 3)
    score     = λ_tool·S_process + λ_sum·S_sum,  or -0.5 on an omission           (Eq. 4)
    R_tool, R_sum = (0, score) if omission or score < 0 else (S_process, S_sum)   (Eq. 5)

The process score compares every valid call of the whole trajectory, pooled over turns, with
the gold calls (no temporal alignment). The summary score is 0 when the trajectory received
no tool response at all (so irrelevant prompts never earn summary credit, as in the released
code) or when the final response is shorter than 10 characters; otherwise a judge rates it.
A judge is any object with `rate(question, tool_responses, response, facts) -> int | None`;
`FactsJudge` here is the offline one, the LLM judge lives in llm.py. A failed rating scores 0.

All process weights 0 is the "w/o HierR" ablation. Nothing here loads a model or touches disk.
"""
import json
import math
import re
from collections import Counter

from segment import CLOSE, OPEN, find_blocks, parse_block, strip_think

WEIGHTS = {"format": 0.10, "name": 0.25, "key": 0.15, "value": 0.20, "parallel": 0.30}  # SPEC §2.1
OMISSION_SCORE = -0.5      # SPEC §2.3: gold has calls, the response makes none
MIN_SUMMARY_CHARS = 10     # SPEC §2.2: shorter final responses score 0
BOOLS = {"true": True, "false": False, "1": True, "0": False}  # SPEC §2.1 loose_equal


def normalize_gold(gold):
    """Gold calls in any released form -> nested steps [[{"name", "arguments"}, ...], ...].

    Accepts a JSON string (unparsable: no gold), a nested list of steps, one flat step, and
    bare names ("f" means {"name": "f"}). Non-list steps are skipped, items that are neither
    dicts nor strings dropped, empty steps dropped; arguments given as a JSON string parsed.
    """
    if isinstance(gold, str):
        try:
            gold = json.loads(gold)
        except json.JSONDecodeError:
            return []
    if not gold:
        return []
    if isinstance(gold, dict):
        gold = [gold]
    if not isinstance(gold, list):
        return []
    steps = [s for s in gold if isinstance(s, list)] if isinstance(gold[0], list) else [gold]
    steps = [[_gold_call(c) for c in s if isinstance(c, (dict, str))] for s in steps]
    return [s for s in steps if s]


def _gold_call(c):
    if isinstance(c, str):
        return {"name": c, "arguments": {}}
    args = c.get("arguments", c.get("parameters", {}))
    if isinstance(args, str):
        try:
            args = json.loads(args)
        except json.JSONDecodeError:
            args = {}
    return {"name": str(c.get("name", "")), "arguments": args if isinstance(args, dict) else {}}


def loose_equal(x, y):
    """Argument-value equality of SPEC §2.1, tried in order."""
    if x is None or y is None:
        return x is None and y is None
    sx, sy = str(x).strip().lower(), str(y).strip().lower()
    if sx == sy:
        return True
    try:
        if abs(float(x) - float(y)) < 1e-9:
            return True
    except (TypeError, ValueError, OverflowError):
        pass
    if sx in BOOLS and sy in BOOLS:
        return BOOLS[sx] == BOOLS[sy]
    if isinstance(x, (list, dict)) and isinstance(y, (list, dict)):
        return json.dumps(x, sort_keys=True) == json.dumps(y, sort_keys=True)
    return False


def predicted_calls(text, allowed_tools=None):
    """Valid blocks of `text` (think stripped) under the format rule, and the block count.

    Returns (blocks, denom): blocks is a list of call lists, one per valid block, in order;
    denom = max(#"<tool_call>", #"</tool_call>"). `allowed_tools=None` allows any name.
    """
    text = strip_think(text)
    denom = max(text.count(OPEN), text.count(CLOSE))
    blocks = []
    for body in find_blocks(text):
        calls = parse_block(body, string_args=False)
        if all(not c.error and (allowed_tools is None or c.name in allowed_tools) for c in calls):
            blocks.append(calls)
    return blocks, denom


def process_score(response_text, gold_tool_calls, allowed_tools, weights=None):
    """S_process (Eq. 2) and its five parts, for the policy text of one trajectory."""
    w = WEIGHTS if weights is None else weights
    gold = normalize_gold(gold_tool_calls)
    gold_flat = [c for step in gold for c in step]
    blocks, denom = predicted_calls(response_text, allowed_tools)
    pred = [c for b in blocks for c in b]
    s = {"format": len(blocks) / denom if denom else 0.0}
    # name: multiset F1 of call names
    if not pred and not gold_flat:
        s["name"] = 1.0
    elif not pred or not gold_flat:
        s["name"] = 0.0
    else:
        hits = sum((Counter(c.name for c in pred) & Counter(c["name"] for c in gold_flat)).values())
        s["name"] = 2 * hits / (len(pred) + len(gold_flat))
    s["key"], s["value"] = _key_value(pred, [c for c in gold_flat if c["arguments"]])
    # parallel: the first valid block has as many calls as the first gold step
    s["parallel"] = float(len(blocks[0] if blocks else []) == len(gold[0] if gold else []))
    s["process"] = sum(w[k] * s[k] for k in WEIGHTS)
    return s


def _key_value(pred, gold_with_args):
    """Greedy per-gold-call matching of keys (Jaccard) and values (loose_equal share)."""
    if not gold_with_args:
        return 1.0, 1.0
    if not pred:
        return 0.0, 0.0
    used, keys, values = set(), [], []
    for g in gold_with_args:
        gk = set(g["arguments"])
        best, best_sum, best_kv = None, 0.0, (0.0, 0.0)
        for i, p in enumerate(pred):
            if i in used or p.name != g["name"]:
                continue
            pk = set(p.arguments)
            k = len(pk & gk) / len(pk | gk)
            v = sum(loose_equal(p.arguments[a], g["arguments"][a]) for a in pk & gk) / len(gk)
            if k + v > best_sum:  # strict: the earliest wins ties
                best, best_sum, best_kv = i, k + v, (k, v)
        if best is not None:
            used.add(best)
        keys.append(best_kv[0])
        values.append(best_kv[1])
    return sum(keys) / len(keys), sum(values) / len(values)


def summary_score(final_response, question, tool_responses, judge, facts=None):
    """S_sum (Eq. 3) with the gating rules of SPEC §2.2. A judge failure scores 0."""
    final_response = strip_think(final_response).strip()
    if not tool_responses or len(final_response) < MIN_SUMMARY_CHARS:
        return 0.0
    r = judge.rate(question, tool_responses, final_response, facts)
    return (r - 1) / 4 if r in (1, 2, 3, 4, 5) else 0.0


def score(response_text, final_response, tool_responses, task, judge,
          weights=None, lam_tool=1.0, lam_sum=1.0):
    """Everything HierR gives one trajectory: parts, S_sum, score (Eq. 4), R_tool, R_sum (Eq. 5).

    `task` needs .gold, .allowed_tools, .question and .facts (data.Task has them).
    response_text is the policy's own text over all turns; final_response the last turn's
    text when it holds no tool call, else "".
    """
    gold = normalize_gold(task.gold)
    s = process_score(response_text, gold, task.allowed_tools, weights)
    omission = bool(gold) and OPEN not in strip_think(response_text)
    if omission:  # the judge is not called
        s.update(process=0.0, summary=0.0, score=OMISSION_SCORE)
    else:
        s["summary"] = summary_score(final_response, task.question, tool_responses, judge, task.facts)
        s["score"] = lam_tool * s["process"] + lam_sum * s["summary"]
    s["omission"] = float(omission)
    penalised = omission or s["score"] < 0
    s["r_tool"] = 0.0 if penalised else s["process"]
    s["r_sum"] = s["score"] if penalised else s["summary"]
    return s


NUMBER_RE = re.compile(r"-?\d[\d,]*(?:\.\d+)?")


class FactsJudge:
    """Offline, deterministic judge: rates by the share of reference facts the response states.

    A fact is stated when its text appears in the response (case and spacing ignored), or,
    for a numeric fact, when the response holds the same number (within 1e-6, commas ignored).
    Share s in [0, 1] maps onto the five levels as r = 1 + round_half_up(4·s). A row without facts
    cannot be rated (None, which scores 0).
    """

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
