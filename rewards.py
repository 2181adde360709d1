"""HierR: the hierarchical rewards of SLCA-GRPO (README Eqs. 2-5, docs/method.md §2), and ToolPO's.

Each trajectory gets two scores, one per segment (see segment.py):

    S_process = w_f·format + w_n·name + w_k·key + w_v·value + w_p·parallel        (Eq. 2)
    S_sum     = (r - 1) / 4,  r in 1..5 from a judge of the final response         (Eq. 3)
    score     = λ_tool·S_process + λ_sum·S_sum,  or -0.5 on an omission           (Eq. 4)
    R_tool, R_sum = (0, score) if omission or score < 0 else (S_process, S_sum)   (Eq. 5)
    S_process <- max(0, S_process - c·e - b·u) in Eqs. 4-5                         (Eq. 16, c = b = 0: off)

The five parts are the released reward's (rl/slca_grpo/reward_fn.py) on every input it does not
crash on (tests/test_release_parity.py against tests/release_reward.py); the process score pools
the valid calls of all turns against the gold calls. `strict` (--strict-calls) is a project
deviation; `extra_call_cost` and `extra_block_cost` (--extra-call-cost, --extra-block-cost, Eq. 16) a project
extension that charges each valid call beyond the gold's calls (e) and each valid block beyond the
gold's steps (u) in the training reward only (the logged `process` and Success@0.9 stay
Eq. 2's). S_sum is 0 without a tool response or with a final response under 10 characters; which
responses count is the summary gate (GATES: "real" ones only, or the release's <tool_response>
blocks of the decoded trajectory, `release_responses` / `release_final`). ToolPO (§3.3) adds
r_action and r_succ to every score dict. The judges (the offline FactsJudge, the LLM judge,
NoisyJudge) are lib/frozen/judges.py's. `score_rollouts` is the training reward of a batch (train.py's
and eval.py's); `HierR` holds the knobs, train.py's flags of the same names. Nothing raises on
hostile text and the time is linear in it; the rules in detail: docs/method.md §2 (§2.4 for the
code's conventions).

    python -m pytest -q tests/test_rewards.py tests/test_release_parity.py
"""
import json
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from segment import CLOSE, OPEN, drop_blocks, find_blocks, parse_block, strip_think
from lib.inputs.data import normalize_gold
from lib.frozen.judges import FactsJudge, NoisyJudge, summary_judge  # noqa: F401 (reached as rewards.*)


WEIGHTS = {"format": 0.10, "name": 0.25, "key": 0.15, "value": 0.20, "parallel": 0.30}  # docs/method.md §2.1
OMISSION_SCORE = -0.5      # docs/method.md §2.3: gold has calls, the response makes none
LAM = 1.0                  # λ_tool = λ_sum of Eq. 4 (train.py's --lam-tool, --lam-sum; Eq. 8 applies the same)
EXTRA_COST = 0.0           # c of README Eq. 16 (train.py --extra-call-cost): 0 = HierR exactly, the paper's
BLOCK_COST = 0.0           # b of README Eq. 16 (train.py --extra-block-cost): 0 = HierR exactly, the paper's
MIN_SUMMARY_CHARS = 10     # docs/method.md §2.2: shorter final responses score 0
MAX_JUDGE_CHARS = 32_768   # per judged text: 8,192 response tokens (docs/method.md §6) at ~4 characters each
BOOLS = {"true": True, "false": False, "1": True, "0": False}  # docs/method.md §2.1 loose_equal
GATES = ("real", "release")  # what opens S_sum: real tool responses only, or any <tool_response> block (the release's)
INPUTS = ("policy", "decoded")  # the process score reads: the policy's own text, or the decoded trajectory (release)
RESP_OPEN, RESP_CLOSE = "<tool_response>", "</tool_response>"


def lam(segment):
    """The settings field of λ_tool or λ_sum (`segment` "tool" or "sum"): one flag sets Eq. 4's and Eq. 8's, so
    HierR and advantage.Credit both hold it, defined here once."""
    return field(default=LAM, metadata={"help": f"λ_{segment} of Eqs. 4 and 8", "range": "[0, 100]"})


@dataclass(frozen=True)
class HierR:
    """The reward's knobs: train.py's flags of the same names. The first six are the training reward's
    ("rewards and advantages"); the last three say how model output is read and scored, in training
    and in eval.py alike ("the episode and its scoring")."""
    hierr_weights: tuple = field(default=tuple(WEIGHTS.values()), metadata={
        "nargs": 5, "type": float, "metavar": ("FORMAT", "NAME", "KEY", "VALUE", "PARALLEL"), "range": "[0, 100]",
        "help": "Eq. 2's; 0 0 0 0 0 = 'w/o HierR'"})
    lam_tool: float = lam("tool")
    lam_sum: float = lam("sum")
    succ_judge: bool = field(default=False, metadata={
        "help": "ToolPO's R_succ from the judge's Solved/Unsolved (the paper's main rows) instead of the reference "
                "rule over the gold calls"})
    extra_call_cost: float = field(default=EXTRA_COST, metadata={
        "metavar": "C", "range": "[0, 100]",
        "help": "c of README Eq. 16 (a project extension): each valid call beyond the gold's count costs c of "
                "S_process in the training reward (score and R_tool; --algo slca or grpo); 0 = HierR exactly"})
    extra_block_cost: float = field(default=BLOCK_COST, metadata={
        "metavar": "B", "range": "[0, 100]",
        "help": "b of README Eq. 16 (a project extension): each valid <tool_call> block beyond the gold's steps (a "
                "parallel step split over turns, a turn no step needs) costs b of S_process in the training reward, "
                "as --extra-call-cost; 0 = HierR exactly"})
    strict_calls: bool = field(default=False, metadata={
        "help": "a block with no valid call is invalid and a response with no valid call is an omission (-0.5); the "
                "release only looks for the <tool_call> tag, so `<tool_call>[]</tool_call>` scores 1.0 on an "
                "irrelevant prompt there"})
    summary_gate: str = field(default=GATES[0], metadata={
        "choices": GATES, "hidden": True,
        "help": "what opens S_sum and what the judge rates: real = the final turn (none when it holds a call), on "
                "the tool responses of calls that passed the checks and were answered; release = the released "
                "reward's: the text after the last tool response, on every <tool_response> block of the decoded "
                "trajectory, error observations included"})
    reward_input: str = field(default=INPUTS[0], metadata={
        "choices": INPUTS, "hidden": True,
        "help": "what the process score reads: policy = the policy's own text; decoded = the released reward's, "
                "the decoded trajectory with its tool turns (a <tool_call> or <think> inside a tool response counts "
                "as the policy's)"})

    def weights(self):
        """Eq. 2's weights as a dict of the five parts."""
        return dict(zip(WEIGHTS, self.hierr_weights))


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
    """(parts, predicted calls, gold calls flat, valid blocks); parts all 0 without allowed tools or on an
    omission."""
    w = WEIGHTS if weights is None else weights
    gold_flat = [c for step in gold for c in step]
    zero = dict.fromkeys(WEIGHTS, 0.0)
    if not allowed_tools:
        return dict(zero, process=0.0, omission=0.0), [], gold_flat, 0
    blocks, denom = predicted_calls(text, allowed_tools, strict)
    pred = [c for b in blocks for c in b]
    if gold_flat and (not pred if strict else OPEN not in strip_think(text)):
        return dict(zero, process=0.0, omission=1.0), [], gold_flat, 0
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
    return s, pred, gold_flat, len(blocks)


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


def score(response_text, final_response, tool_responses, task, judge, hierr=HierR()):
    """Everything one trajectory gets under `hierr`: the parts, S_sum, score (Eq. 4), R_tool, R_sum (Eq. 5),
    judge_failed, judged and unrated (docs/method.md §2.4), and ToolPO's r_action and r_succ;
    `extra` counts the valid calls beyond the gold's and `extra_blocks` the valid blocks beyond the gold's
    steps, charged c and b each in score and R_tool (Eq. 16; `process` stays Eq. 2's).

    `task` needs .gold, .allowed_tools, .question and .facts (data.Task has them).
    response_text is the policy's own text over all turns; final_response the last turn's
    text when it holds no tool call, else ""; tool_responses the real tool responses only.
    """
    lam_tool, lam_sum = hierr.lam_tool, hierr.lam_sum
    gold = normalize_gold(task.gold)
    s, pred, gold_flat, blocks = _process(response_text, gold, task.allowed_tools, hierr.weights(), hierr.strict_calls)
    s.update(summary=0.0, judge_failed=0.0, judged=0.0, unrated=0.0, r_action=0.0, r_succ=0.0,
             extra=float(max(0, len(pred) - len(gold_flat))), extra_blocks=float(max(0, blocks - len(gold))))
    charge = hierr.extra_call_cost * s["extra"] + hierr.extra_block_cost * s["extra_blocks"]
    tool = max(0.0, s["process"] - charge)  # Eq. 16; S_process >= 0, so c = b = 0 leaves it as it is
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
        if hierr.succ_judge and hasattr(judge, "solved"):
            s["r_succ"] = _solved(final_response, task.question, tool_responses, judge, s)
        else:
            s["r_succ"] = float(hits == len(gold_flat) and (bool(gold_flat) or not pred))
        s["score"] = lam_tool * tool + lam_sum * s["summary"]
    penalised = s["omission"] or s["score"] < 0
    s["r_tool"] = 0.0 if penalised else tool
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


def score_rollouts(rs, judge, hierr=HierR(), tok=None, workers=16):
    """The training reward of a batch of rollouts (rollout.Rollout): HierR for each (`score`, under
    `hierr`), plus what the logs need from the rollout. The summary gate (hierr.summary_gate):
    "real" judges the rollout's final turn on its real tool responses; "release" judges
    release_final on every <tool_response> block (release_responses) of its response ids
    decoded by `tok` as the release decodes them (special tokens skipped). The process score
    reads the policy's own text (hierr.reward_input "policy") or, as the release does, that decoded
    trajectory, tool turns included ("decoded": a <tool_call> or <think> inside a tool response
    counts as the policy's). Scored on `workers` threads, so a remote judge answers them
    concurrently.
    score_norm is the released code's normalised score (success_code@t)."""
    gate, reward_input, lam = hierr.summary_gate, hierr.reward_input, hierr.lam_tool + hierr.lam_sum
    if gate not in GATES or (gate == "release" and tok is None):
        raise ValueError(f"summary_gate must be one of {GATES} (release needs tok), not {gate!r}")
    if reward_input not in INPUTS or (reward_input == "decoded" and tok is None):
        raise ValueError(f"reward_input must be one of {INPUTS} (decoded needs tok), not {reward_input!r}")

    def one(r):
        decoded = tok.decode(r.ids, skip_special_tokens=True) if gate == "release" or reward_input == "decoded" else ""
        if gate == "real":
            final, responses = r.final, r.responses
        else:
            final, responses = release_final(decoded), release_responses(decoded)
        text = r.text if reward_input == "policy" else decoded
        s = score(text, final, responses, r.task, judge, hierr)
        s.update(score_norm=max(0.0, s["score"]) / lam if lam > 0 else 0.0,
                 tool_turns=r.tool_turns, stop=r.stop, length=len(r.ids), sim_failed=r.failed,
                 parallel_type=r.task.parallel_type or "unknown")
        if r.task.bonus:  # the diagnostic worlds: did the policy call the marked tool, and with its marked arguments?
            calls = [c for block in predicted_calls(r.text, r.task.allowed_tools)[0] for c in block if c.name == r.task.bonus]
            s["called"] = float(bool(calls))
            s["redundant"] = float(any(all(k in c.arguments and loose_equal(c.arguments[k], v)
                                           for k, v in r.task.bonus_args.items()) for c in calls))
        return s

    with ThreadPoolExecutor(workers) as pool:
        return list(pool.map(one, rs))
