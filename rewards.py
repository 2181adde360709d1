"""HierR: the hierarchical rewards of SLCA-GRPO (README Eqs. 2-5, docs/method.md §2), and ToolPO's.

Each trajectory gets two scores, one per segment (see segment.py):

    S_process = w_f·format + w_n·name + w_k·key + w_v·value + w_p·parallel        (Eq. 2)
    S_sum     = (r - 1) / 4,  r in 1..5 from a judge of the final response         (Eq. 3)
    score     = λ_tool·S_process + λ_sum·S_sum,  or -0.5 on an omission           (Eq. 4)
    R_tool, R_sum = (0, score) if omission or score < 0 else (S_process, S_sum)   (Eq. 5)

The five parts are the released reward's (rl/slca_grpo/reward_fn.py) on every input it does
not crash on; tests/test_release_parity.py checks that against tests/release_reward.py, a
plain statement of the released rules. The process score compares every valid call of the
whole trajectory, pooled over turns, with the gold calls (no temporal alignment). The
release's rules, in more detail than docs/method.md §2 gives them:

- think blocks: segment.strip_think, the release's `<think(?:ing)?>.*?</think(?:ing)?>`
  (`<think>` may close with `</thinking>` and back). A block needs its closing tag: an
  unclosed `<think>` strips nothing, so a call written after it (or inside it) is scored as a
  full call (process 1.0 when it matches gold), while a call inside a closed think block is no
  call (an omission if it was the only one). Kept as the release has it; the rollout and the
  simulator read calls the same way, so what is scored is what was answered.
- a predicted call's arguments are `arguments or parameters or {}` (Python `or`); a block
  `[]` is a valid block with no call (so `<tool_call>[]</tool_call>` scores format 1).
- gold: a JSON string, a nested list of steps, or one flat step of dicts and bare names. A
  bare dict is no gold; in nested steps an empty dict is dropped; a gold call's arguments are
  its `arguments` only (a dict, or a JSON string of one; `parameters` is ignored); a name
  that is not a string matches nothing.
- omission: gold has calls and the text (think stripped) holds no `<tool_call>` tag. Every
  part is then 0 and score = -0.5; the judge is not called. A tag with garbage or `[]` in it
  is not an omission.
- no allowed tools (empty or None): every part 0, score 0, no omission.
- bounds the release lacks (lib.text.loads): a block body or gold string over 1,000,000
  characters or nested deeper than 64 levels is invalid / no gold; the release parses it
  (or raises, past ~1,000 levels or on a 4,300-digit integer).

`strict=True` is a project deviation (off by default): a block with no call is invalid, and
an omission is gold with calls but no valid call, so neither `<tool_call>[]</tool_call>` nor
garbage between the tags escapes the -0.5 or beats a direct answer on an irrelevant prompt.

The summary score is 0 when the trajectory received no tool response or when the final
response is shorter than 10 characters; otherwise a judge rates it. Which tool responses
count is the summary gate (GATES, chosen by the caller): "real" passes only the responses of
calls that passed the simulator's checks and got an answer, so irrelevant prompts and failed
calls never earn summary credit; "release" is the released reward's summary rule on the
decoded trajectory: `release_responses`, the body of every `<tool_response>` block, error
observations and blocks the policy wrote itself included (its `_extract_tool_responses`),
and `release_final`, the text after the last tool response, even a turn cut at the cap (its
`_extract_final_response`; summary_score drops think blocks once more, which changes the
text only where dropping one block joins the halves of a new one). A judge is any object with
`rate(question, tool_responses, response, facts) -> int | None`; it gets at most
MAX_JUDGE_CHARS of each text. A rating that is not 1..5 (None: the judge cannot rate it) scores
0 and sets `unrated` (`judged` counts the summaries the judge was asked about); a ConnectionError
(transport failure after retries) scores 0 and sets `judge_failed` so the trainer can drop
the rollout. `FactsJudge` here is the offline judge, the LLM judge lives in lib/llm.py;
`summary_judge` builds one or the other.

ToolPO (docs/method.md §3.3, baselines/toolpo/reward_fn_toolpo.py) needs two more rewards, in every
score dict: r_action = gold calls strictly matched / |gold calls| (greedy one-to-one in gold
order: same name, every gold key present, every value loose_equal; 1 with no gold) and
r_succ in {0, 1}. With `succ_judge=True` and a judge that has
`solved(question, tool_responses, response) -> bool | None`, r_succ is its verdict (0 for a
final response under 10 characters, None, or a transport failure). Otherwise r_succ comes
from a rule, the project's since the release does not ship its "reference rule": every gold
call strictly matched, and no call made when there is no gold. On an omission both are 0.

The training reward of a batch of rollouts is `score_rollouts` (train.py's and eval.py's): `score`
for each rollout, on threads, with the summary gate and the reward input chosen by the caller.

All process weights 0 is the "w/o HierR" ablation (`--hierr-weights 0 0 0 0 0`). Nothing here loads a model or touches
disk. No function raises on hostile text, and the time is linear in it (times the number of
gold calls for the matching): a megabyte scores in well under a second.

    python -m pytest -q tests/test_rewards.py tests/test_release_parity.py
"""
import json
import math
import random
import re
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

from segment import CLOSE, OPEN, drop_blocks, find_blocks, parse_block, strip_think
from lib.data import normalize_gold
from lib.llm import JUDGE_PROMPT, SOLVED_PROMPT, LLMJudge


WEIGHTS = {"format": 0.10, "name": 0.25, "key": 0.15, "value": 0.20, "parallel": 0.30}  # docs/method.md §2.1
OMISSION_SCORE = -0.5      # docs/method.md §2.3: gold has calls, the response makes none
LAM = 1.0                  # λ_tool = λ_sum of Eq. 4 (train.py's --lam-tool, --lam-sum; Eq. 8 applies the same)
MIN_SUMMARY_CHARS = 10     # docs/method.md §2.2: shorter final responses score 0
MAX_JUDGE_CHARS = 32_768   # per judged text: 8,192 response tokens (docs/method.md §6) at ~4 characters each
BOOLS = {"true": True, "false": False, "1": True, "0": False}  # docs/method.md §2.1 loose_equal
GATES = ("real", "release")  # what opens S_sum: real tool responses only, or any <tool_response> block (the release's)
INPUTS = ("policy", "decoded")  # the process score reads: the policy's own text, or the decoded trajectory (release)
RESP_OPEN, RESP_CLOSE = "<tool_response>", "</tool_response>"


def loose_equal(x, y):
    """Argument-value equality of docs/method.md §2.1, tried in order. Never raises: a value that cannot
    be compared (a huge int, a list nested too deep to print) is not equal."""
    try:
        return _loose_equal(x, y)
    except (ValueError, TypeError, OverflowError, RecursionError):
        return False


def _loose_equal(x, y):
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


def predicted_calls(text, allowed_tools=None, strict=False):
    """Valid blocks of `text` (think stripped) under the format rule, and the block count.

    Returns (blocks, denom): blocks is a list of call lists, one per valid block, in order;
    denom = max(#"<tool_call>", #"</tool_call>"). `allowed_tools=None` allows any name (the
    benchmarks); names are compared as strings. `strict`: a block with no call is invalid.
    """
    text = strip_think(text)
    denom = max(text.count(OPEN), text.count(CLOSE))
    allowed = None if allowed_tools is None else _names(allowed_tools)
    blocks = []
    for body in find_blocks(text):
        calls = parse_block(body, string_args=False)
        if (calls or not strict) and all(not c.error and (allowed is None or c.name in allowed) for c in calls):
            blocks.append(calls)
    return blocks, denom


def _names(allowed_tools):
    try:
        return {str(t) for t in allowed_tools}
    except (TypeError, ValueError):  # not iterable, or an int too long to print
        return set()


def process_score(response_text, gold_tool_calls, allowed_tools, weights=None, strict=False):
    """S_process (Eq. 2), its five parts and the omission flag, for the policy text of one trajectory."""
    return _process(response_text, normalize_gold(gold_tool_calls), allowed_tools, weights, strict)[0]


def _process(text, gold, allowed_tools, weights, strict):
    """(parts, predicted calls, gold calls flat); parts all 0 without allowed tools or on an omission."""
    w = WEIGHTS if weights is None else weights
    gold_flat = [c for step in gold for c in step]
    zero = dict.fromkeys(WEIGHTS, 0.0)
    if not allowed_tools:
        return dict(zero, process=0.0, omission=0.0), [], gold_flat
    blocks, denom = predicted_calls(text, allowed_tools, strict)
    pred = [c for b in blocks for c in b]
    if gold_flat and (not pred if strict else OPEN not in strip_think(text)):
        return dict(zero, process=0.0, omission=1.0), [], gold_flat
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
    s["omission"] = 0.0
    return s, pred, gold_flat


def turn_rewards(turn_texts, gold_tool_calls, allowed_tools, weights=None, strict=False):
    """Per-turn tool rewards for `--turn-credit` (README Eq. 14): one S_process per tool turn.

    turn_texts: the policy's text of each tool-segment turn, in order (every assistant turn but
    the last, Eq. 1). Turn k is scored by Eq. 2's five parts, with the same weights, against gold
    step k alone: its format, the Name F1 of its calls against step k's, the keys and values of
    step k's calls, and whether its first valid block holds as many calls as step k (the
    parallel part, so a later parallel step is judged too). A turn with no `<tool_call>` tag
    where step k has calls is an omission there (0). A turn past the last gold step scores 0:
    the gold asks for nothing there. A gold step that no turn reached gets no turn reward (the
    segment's S_process already counts its missing calls). Returns a list of floats.
    """
    gold = normalize_gold(gold_tool_calls)
    out = []
    for k, text in enumerate(turn_texts):
        if k >= len(gold):
            out.append(0.0)
            continue
        out.append(process_score(text, [gold[k]], allowed_tools, weights, strict)["process"])
    return out


def _key_value(pred, gold_with_args):
    """Greedy per-gold-call matching of keys (Jaccard) and values (loose_equal share)."""
    if not gold_with_args:
        return 1.0, 1.0
    if not pred:
        return 0.0, 0.0
    used, keys, values = set(), [], []
    pred_keys = [set(p.arguments) for p in pred]
    for g in gold_with_args:
        ga = g["arguments"]
        gk = set(ga)
        best, best_kv = None, (0.0, 0.0)
        for i, p in enumerate(pred):
            if p.name != g["name"] or i in used:
                continue
            both = pred_keys[i] & gk
            k = len(both) / len(pred_keys[i] | gk)
            v = sum(loose_equal(p.arguments[a], ga[a]) for a in both) / len(gk)
            if k + v > best_kv[0] + best_kv[1]:  # strict: the earliest wins ties
                best, best_kv = i, (k, v)
                if k + v == 2.0:  # a perfect match: nothing later can win
                    break
        if best is not None:
            used.add(best)
        keys.append(best_kv[0])
        values.append(best_kv[1])
    return sum(keys) / len(keys), sum(values) / len(values)


def _strict_hits(pred, gold_flat):
    """ToolPO's C(a): how many gold calls a distinct predicted call strictly matches (greedy, gold order)."""
    used, hits = set(), 0
    for g in gold_flat:
        for i, p in enumerate(pred):
            if i not in used and p.name == g["name"] and all(
                    k in p.arguments and loose_equal(p.arguments[k], v) for k, v in g["arguments"].items()):
                used.add(i)
                hits += 1
                break
    return hits


def release_responses(text):
    """The stripped bodies of the `<tool_response>…</tool_response>` blocks of a decoded
    trajectory, in order, in linear time: what the release's non-greedy regex finds (each
    block ends at the first closing tag after its opening one)."""
    out, pos = [], 0
    while (i := text.find(RESP_OPEN, pos)) >= 0 and (j := text.find(RESP_CLOSE, i + len(RESP_OPEN))) >= 0:
        out.append(text[i + len(RESP_OPEN):j].strip())
        pos = j + len(RESP_CLOSE)
    return out


def release_final(text):
    """The release's final response of a decoded trajectory, in linear time: think blocks
    dropped, then the text after the last `</tool_response>`; when that is empty, the text
    after the last `</tool_call>` ("" if it holds a `<tool_response>` or starts with a
    `<tool_call>`); with neither tag, the text without its `<tool_call>` blocks."""
    text = strip_think(text)
    end = text.rfind(RESP_CLOSE)
    if end >= 0 and (final := text[end + len(RESP_CLOSE):].strip()):
        return final
    end = text.rfind(CLOSE)
    if end >= 0:
        final = text[end + len(CLOSE):].strip()
        return "" if RESP_OPEN in final or final.startswith(OPEN) else final
    return drop_blocks(text).strip()


def summary_score(final_response, question, tool_responses, judge, facts=None):
    """S_sum (Eq. 3) with the gating rules of docs/method.md §2.2; None when the judge gave no usable
    rating (score() counts it and scores 0). A ConnectionError from the judge propagates (score() catches it)."""
    final_response = strip_think(final_response).strip()
    if not gated(final_response, tool_responses):
        return 0.0
    r = judge.rate(question[:MAX_JUDGE_CHARS], _bounded(tool_responses), final_response[:MAX_JUDGE_CHARS], facts)
    return (r - 1) / 4 if r in (1, 2, 3, 4, 5) else None


def gated(final_response, tool_responses):
    """Whether a summary reaches the judge (docs/method.md §2.2): a tool response came, and the final
    response, think blocks dropped, has MIN_SUMMARY_CHARS at least."""
    return bool(tool_responses) and len(strip_think(final_response).strip()) >= MIN_SUMMARY_CHARS


def _bounded(texts):
    """The texts in order, the last ones cut or dropped so that they total MAX_JUDGE_CHARS at most."""
    out, room = [], MAX_JUDGE_CHARS
    for t in texts:
        if room <= 0:
            break
        out.append(t[:room])
        room -= len(out[-1])
    return out


def score(response_text, final_response, tool_responses, task, judge,
          weights=None, lam_tool=LAM, lam_sum=LAM, strict=False, succ_judge=False):
    """Everything one trajectory gets: the parts, S_sum, score (Eq. 4), R_tool, R_sum (Eq. 5),
    judge_failed, judged and unrated (module doc), and ToolPO's r_action and r_succ.

    `task` needs .gold, .allowed_tools, .question and .facts (data.Task has them).
    response_text is the policy's own text over all turns; final_response the last turn's
    text when it holds no tool call, else ""; tool_responses the real tool responses only.
    """
    s, pred, gold_flat = _process(response_text, normalize_gold(task.gold), task.allowed_tools, weights, strict)
    s.update(summary=0.0, judge_failed=0.0, judged=0.0, unrated=0.0, r_action=0.0, r_succ=0.0)
    if s["omission"]:  # the judge is not called
        s["score"] = OMISSION_SCORE
    elif not task.allowed_tools:  # the release scores such a row 0 throughout
        s["score"] = 0.0
    else:
        try:
            summary = summary_score(final_response, task.question, tool_responses, judge, task.facts)
            s["summary"], s["unrated"] = summary or 0.0, float(summary is None)
            s["judged"] = float(gated(final_response, tool_responses))
        except ConnectionError:
            s["judge_failed"] = 1.0
        hits = _strict_hits(pred, gold_flat)
        s["r_action"] = hits / len(gold_flat) if gold_flat else 1.0
        if succ_judge and hasattr(judge, "solved"):
            s["r_succ"] = _solved(final_response, task.question, tool_responses, judge, s)
        else:
            s["r_succ"] = float(hits == len(gold_flat) and (bool(gold_flat) or not pred))
        s["score"] = lam_tool * s["process"] + lam_sum * s["summary"]
    penalised = s["omission"] or s["score"] < 0
    s["r_tool"] = 0.0 if penalised else s["process"]
    s["r_sum"] = s["score"] if penalised else s["summary"]
    return s


def _solved(final_response, question, tool_responses, judge, s):
    """ToolPO's R_succ from the judge's Solved/Unsolved verdict; a transport failure marks s."""
    final_response = strip_think(final_response).strip()
    if len(final_response) < MIN_SUMMARY_CHARS:
        return 0.0
    try:
        return float(judge.solved(question[:MAX_JUDGE_CHARS], _bounded(tool_responses),
                                  final_response[:MAX_JUDGE_CHARS]) is True)
    except ConnectionError:
        s["judge_failed"] = 1.0
        return 0.0


def score_rollouts(rs, judge, weights=None, lam_tool=LAM, lam_sum=LAM, workers=16, strict=False, succ_judge=False,
                   gate=GATES[0], tok=None, reward_input=INPUTS[0]):
    """The training reward of a batch of rollouts (rollout.Rollout): HierR for each (`score`;
    `strict` and `succ_judge` as there), plus what the logs need from the rollout. The summary
    gate: "real" judges the rollout's final turn on its real tool responses; "release" judges
    release_final on every <tool_response> block (release_responses) of its response ids
    decoded by `tok` as the release decodes them (special tokens skipped). The process score
    reads the policy's own text (reward_input "policy") or, as the release does, that decoded
    trajectory, tool turns included ("decoded": a <tool_call> or <think> inside a tool response
    counts as the policy's). Scored on `workers` threads, so a remote judge answers them
    concurrently.
    score_norm is the released code's normalised score (success_code@t)."""
    if gate not in GATES or (gate == "release" and tok is None):
        raise ValueError(f"gate must be one of {GATES} (release needs tok), not {gate!r}")
    if reward_input not in INPUTS or (reward_input == "decoded" and tok is None):
        raise ValueError(f"reward_input must be one of {INPUTS} (decoded needs tok), not {reward_input!r}")

    def one(r):
        decoded = tok.decode(r.ids, skip_special_tokens=True) if gate == "release" or reward_input == "decoded" else ""
        if gate == "real":
            final, responses = r.final, r.responses
        else:
            final, responses = release_final(decoded), release_responses(decoded)
        text = r.text if reward_input == "policy" else decoded
        s = score(text, final, tool_responses=responses, task=r.task, judge=judge,
                          weights=weights, lam_tool=lam_tool, lam_sum=lam_sum, strict=strict, succ_judge=succ_judge)
        s.update(score_norm=max(0.0, s["score"]) / (lam_tool + lam_sum) if lam_tool + lam_sum > 0 else 0.0,
                 tool_turns=r.tool_turns, stop=r.stop, length=len(r.ids), sim_failed=r.failed,
                 parallel_type=r.task.parallel_type or "unknown")
        if r.task.bonus:  # the diagnostic worlds: did the policy make the marked call (with its wrong arguments)?
            blocks, _ = predicted_calls(r.text, r.task.allowed_tools)
            s["redundant"] = float(any(c.name == r.task.bonus and all(k in c.arguments and loose_equal(c.arguments[k], v)
                                                                      for k, v in r.task.bonus_args.items())
                                       for calls in blocks for c in calls))
        return s

    with ThreadPoolExecutor(workers) as pool:
        return list(pool.map(one, rs))


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
