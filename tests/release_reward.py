"""The released reward's rule-based parts, restated in plain Python for the parity test.

Read from the authors' release (SLCA-GRPO/SLCA-GRPO at 68539c5): rl/slca_grpo/reward_fn.py
(`compute_score` and the helpers it calls) for format, name, key, value, parallel and the
omission flag, and baselines/toolpo/reward_fn_toolpo.py (`_compute_binary_tool_correctness`)
for ToolPO's action reward. Written independently, with the release's regular expressions
and the stdlib json, and deliberately unbounded and unguarded: where the release would
raise (deep JSON, a 5,000-digit integer, an unhashable gold name, ...) this raises too, and
the parity test skips that case. Nothing in the project imports it.
"""
import json
import re
from collections import Counter

THINK = re.compile(r"<think(?:ing)?>(.*?)</think(?:ing)?>", re.DOTALL)
BLOCK = re.compile(r"<tool_call>(.*?)</tool_call>", re.DOTALL)
PARTS = ("format", "name", "key", "value", "parallel")


def gold_calls(raw):
    """(nested steps, flat list) of the gold calls, items kept as they are (dicts)."""
    if not raw:
        return [], []
    if isinstance(raw, str):
        try:
            raw = json.loads(raw)
        except Exception:  # the release swallows every failure here
            return [], []
    if not isinstance(raw, list):
        return [], []
    if raw and isinstance(raw[0], list):
        steps = []
        for step in raw:
            if isinstance(step, list):
                items = [{"name": c} if isinstance(c, str) else c for c in step if isinstance(c, (str, dict))]
                items = [c for c in items if c]  # an empty dict is falsy and dropped
                if items:
                    steps.append(items)
        return steps, [c for s in steps for c in s]
    flat = [{"name": c} if isinstance(c, str) else c for c in raw if isinstance(c, (str, dict))]
    return ([flat] if flat else []), flat


def args_of(value):
    """A gold call's arguments: a dict, or a JSON string holding one; anything else is {}."""
    if isinstance(value, dict):
        return value
    if isinstance(value, str):
        try:
            obj = json.loads(value)
        except Exception:
            return {}
        return obj if isinstance(obj, dict) else {}
    return {}


def same(a, b):
    """The release's loose value equality (exceptions from str() or float overflow propagate)."""
    if a is None and b is None:
        return True
    if a is None or b is None:
        return False
    sa, sb = str(a).strip().lower(), str(b).strip().lower()
    if sa == sb:
        return True
    try:
        if abs(float(a) - float(b)) < 1e-9:
            return True
    except (ValueError, TypeError):
        pass
    truth = {"true": True, "false": False, "1": True, "0": False}
    if truth.get(sa) is not None and truth.get(sb) is not None:
        return truth[sa] == truth[sb]
    if isinstance(a, (list, dict)) and isinstance(b, (list, dict)):
        try:
            return json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)
        except Exception:
            pass
    return False


def blocks_of(text, allowed):
    """(valid blocks as lists of (name, args), #open tags, denom) of think-stripped text."""
    allowed = {str(t) for t in allowed}
    opened, closed = text.count("<tool_call>"), text.count("</tool_call>")
    valid = []
    for body in BLOCK.findall(text):
        body = body.strip()
        if not body:
            continue
        try:
            obj = json.loads(body)
        except json.JSONDecodeError:  # only this is caught: deep nesting or a huge int raise
            continue
        if isinstance(obj, dict):
            obj = [obj]
        if not isinstance(obj, list):
            continue
        calls = []
        for item in obj:
            if not isinstance(item, dict):
                break
            name = item.get("name")
            if not name or not isinstance(name, str) or name not in allowed:
                break
            args = item.get("arguments") or item.get("parameters") or {}
            if not isinstance(args, dict):
                break
            json.dumps(item, ensure_ascii=False)  # the release keeps the raw JSON of each call
            calls.append((name, args))
        else:
            valid.append(calls)
    return valid, opened, max(opened, closed)


def name_f1(pred, gold):
    if not pred and not gold:
        return 1.0
    if not pred or not gold:
        return 0.0
    p, g = Counter(pred), Counter(gold)
    both = sum(min(p.get(t, 0), g.get(t, 0)) for t in set(p) | set(g))
    return 2.0 * both / (len(pred) + len(gold))


def key_value(pred, gold_flat):
    with_args = [g for g in gold_flat if args_of(g.get("arguments"))]
    if not with_args:
        return 1.0, 1.0
    if not pred:
        return 0.0, 0.0
    taken, key_sum, value_sum = set(), 0.0, 0.0
    for g in with_args:
        gargs = args_of(g.get("arguments"))
        gkeys = set(gargs)
        best = (0.0, 0.0, -1)
        for i, (name, args) in enumerate(pred):
            if i in taken or name != g.get("name", ""):
                continue
            pkeys = set(args)
            k = len(pkeys & gkeys) / len(pkeys | gkeys) if pkeys else 0.0
            common = pkeys & gkeys
            v = sum(1 for a in common if same(args.get(a), gargs.get(a))) / len(gkeys) if common else 0.0
            if k + v > best[0] + best[1]:
                best = (k, v, i)
        if best[2] >= 0:
            taken.add(best[2])
        key_sum += best[0]
        value_sum += best[1]
    return key_sum / len(with_args), value_sum / len(with_args)


def action_reward(pred, gold_flat):
    """ToolPO's R_action: strictly matched gold calls / |gold calls|, greedy one-to-one."""
    if not gold_flat:
        return 1.0
    if not pred:
        return 0.0
    taken, hits = set(), 0
    for g in gold_flat:
        gargs = args_of(g.get("arguments"))
        for i, (name, args) in enumerate(pred):
            if i in taken or name != g.get("name", ""):
                continue
            if set(gargs) <= set(args) and all(same(args.get(k), gargs.get(k)) for k in gargs):
                taken.add(i)
                hits += 1
                break
    return hits / len(gold_flat)


def release_parts(text, gold, allowed_tools):
    """The release's format, name, key, value, parallel, omission flag (0/1) and ToolPO r_action."""
    zero = dict.fromkeys(PARTS + ("omission", "r_action"), 0.0)
    if not allowed_tools:
        return zero
    steps, flat = gold_calls(gold)
    valid, opened, denom = blocks_of(THINK.sub("", text), allowed_tools)
    if flat and opened == 0:
        return dict(zero, omission=1.0)
    pred = [c for b in valid for c in b]
    out = dict(zero, format=len(valid) / denom if denom else 0.0)
    out["name"] = name_f1([n for n, _ in pred], [g.get("name", "") for g in flat])
    out["key"], out["value"] = key_value(pred, flat)
    out["parallel"] = 1.0 if (len(steps[0]) if steps else 0) == (len(valid[0]) if valid else 0) else 0.0
    out["r_action"] = action_reward(pred, flat)
    return out
