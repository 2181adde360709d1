"""Writes the shipped tool world's rows: SFT trajectories, RL prompts and eval prompts (docs/method.md §8
layouts), and the constructed worlds of experiments/misattribution.py.

The world itself (tools/world.py: 4 servers x 4 tools with real JSON Schemas, every answer a pure
function of (seed, tool, arguments), 29 task kinds covering the six parallel types of docs/method.md
§8) gives each task; this file draws a seed's tasks, holds out combinations for eval, writes the
files below, and builds the two constructed variants. Each row offers only its server's tools, in
the system message, in Qwen2.5's Hermes form (`system_prompt`).

    rl.jsonl, eval.jsonl   verl layout: prompt, tools, reward_model.ground_truth (allowed_tools,
                           gold_tool_calls, question_content, tool_schemas, subset_name,
                           reference_facts), extra_info (parallel_type, kind, combo, tool_responses)
    sft.jsonl              conversations: system, human, gpt <tool_call> per step, human
                           <tool_response>s, ..., gpt summary stating every reference fact

Sized for a tiny model trained from scratch on a CPU (the demo of train.py):
- closed vocabularies: every city, company, product, coupon, word, date, zip code and id
  comes from a short list, and training covers all of them, so a 2-layer model can learn
  to pass them on instead of failing to spell strings it has never seen;
- eval holds out COMBINATIONS: a task's combo is its kind and the entities it names
  (`combo`), and EVAL_SHARE of all combos, chosen by a seeded hash, occur only in eval. An
  eval question asks, e.g., for the weather in a city that training only ever asked about in
  forecasts, station readings and trips. No eval question occurs in training;
- short tool descriptions and a one-line instruction: the tool block is most of every
  prompt's tokens, so it sets the cost of SFT and of every RL forward pass;
- an imperfect teacher: on SERIAL_SHARE of the SFT demonstrations the calls of a parallel
  step are made one per turn, so the SFT start splits parallel steps the reward wants in one
  block, and RL has something to learn that SFT did not show (the tasks do not change);
- reference facts are values the tool results state (a price, an id, a rating), never
  arithmetic across calls, which a model this size cannot do: the offline judge then rates
  how well the summary reports the results, not the model's sums.

- the diagnostic (--bonus K, off by default; docs/experiments/misattribution.md):
  for five kinds (BONUS, about 16% of the tasks) a follow-up info call that the gold does
  not ask for (a product's, hotel's or flight's details) returns extra values; the rows
  record its response, K of its values join the judge's reference facts, and half of those
  kinds' SFT demonstrations make the call and state the values. So the call costs S_process
  its Name F1 share and, with K >= 1, stating its values raises S_sum: the summary reward is
  tied to a tool behaviour the process score penalises. K = 0 is the control (the same SFT
  data and tasks; only the reference facts differ).
- the other direction (--wrong K, off by default; docs/experiments/wrong-value.md): on three kinds with a
  free argument (WRONG: a unit, a conversion direction, a number of days) the teacher makes
  the call with a wrong value on half its demonstrations and states what that response says;
  the rows record the wrong call's response and name it (extra_info.bonus_call, bonus_args),
  and with K = 1 the judge's reference facts are the wrong response's. The contested tokens
  sit inside the call, in the tool segment whichever value is written.

    python -m tools.make_world [--seed 0] [--out data/world] [--scale 1.0] [--serial-share 0.6] [--bonus K | --wrong K]
"""
import argparse
import json
import random
from pathlib import Path

from lib.inputs.chat import tools_prompt
from tools.world import ENTITIES, KINDS, SERVERS, Run, World, fmt

SIZES = {"sft": 2000, "rl": 600, "eval": 200}
TYPES = ["single_step_single_tool", "single_step_parallel", "multi_step_all_serial",
         "multi_step_has_parallel", "multi_step_all_parallel", "irrelevant"]
TYPE_WEIGHTS = [18, 18, 18, 18, 18, 10]  # irrelevant ~10%
EVAL_SHARE = 0.2  # share of (kind, entities) combinations that only eval asks about
SERIAL_SHARE = 0.6  # share of SFT demonstrations whose teacher makes a parallel step's calls one per turn
BONUS_SHARE = 0.5   # with --bonus: share of the bonus kinds' SFT demonstrations that make the extra call
                    # (with --wrong: that use the wrong argument)

INSTRUCTION = ("Put the calls of one step as a JSON list in one <tool_call></tool_call> block; "
               "then state the values found. If no tool fits, answer directly.")


def system_prompt(tools):
    """The instruction, then the tools as Qwen2.5's chat template writes them (Hermes form)."""
    return INSTRUCTION + "\n\n" + tools_prompt(tools)


# --- the diagnostic's bonus calls (--bonus K) --------------------------------------------------
# kind -> the follow-up info call that the gold does not ask for, made from the first step's
# results: (tool, arguments of outputs[0]) and the values its answer adds (the first K of them
# join the reference facts), with the sentence a teacher that made the call adds to its summary.

def _product_info(outs):
    return "product_info", {"product_id": outs[0][0]["product_id"]}


def _product_extra(i):
    return [fmt(i["rating"]), fmt(i["in_stock"])], f"It is rated {fmt(i['rating'])}, {fmt(i['in_stock'])} in stock."


def _hotel_info(outs):
    return "hotel_info", {"hotel_id": outs[0][0]["hotels"][0]["id"]}


def _hotel_extra(i):
    return [i["name"], fmt(i["rating"])], f"It is {i['name']}, rated {fmt(i['rating'])}."


def _flight_info(outs):
    return "flight_info", {"flight_id": outs[0][0]["flights"][0]["id"]}


def _flight_extra(i):
    return [i["airline"], i["departs"]], f"The flight is by {i['airline']}, departing {i['departs']}."


BONUS = {  # about 16% of the tasks: 2 of 6 single-tool kinds, 2 of 5 parallel ones, 1 of 7 serial ones
    "product_top": (_product_info, _product_extra),
    "hotel_cheapest": (_hotel_info, _hotel_extra),
    "trip_cost": (_flight_info, _flight_extra),
    "products_pair": (_product_info, _product_extra),
    "coupon": (_product_info, _product_extra),
}


def bonus(world, ex):
    """The extra call of a bonus kind's task: {"call", "output", "values", "sentence"}, or None."""
    if ex["kind"] not in BONUS:
        return None
    make, extra = BONUS[ex["kind"]]
    name, args = make(ex["outputs"])
    out = world.call(name, args)
    values, sentence = extra(out)
    return {"call": {"name": name, "arguments": args}, "output": out, "values": values, "sentence": sentence}


# --- the other direction's wrong calls (--wrong K) ------------------------------------------------
# kind -> (the gold call's arguments -> the wrong ones, (wrong arguments, response) -> (facts, answer))

WRONG = {  # about 9% of the tasks: 3 of the 6 single-tool kinds
    "weather_now": (lambda a: {**a, "unit": "fahrenheit" if a["unit"] == "celsius" else "celsius"},
                    lambda a, o: ([fmt(o["temp"]), o["condition"]],
                                  f"It is {fmt(o['temp'])} degrees and {o['condition']} in {a['city']}.")),
    "convert": (lambda a: {**a, "from": a["to"], "to": a["from"]},
                lambda a, o: ([fmt(o["result"])], f"{a['amount']} {a['from']} is {fmt(o['result'])} {a['to']}.")),
    "forecast": (lambda a: {**a, "days": a["days"] % 4 + 2},  # 2..5 -> 4, 5, 2, 3: never the asked number
                 lambda a, o: ([fmt(o["high"]), fmt(o["low"]), fmt(o["rain_days"])],
                               f"High {fmt(o['high'])}, low {fmt(o['low'])}, rain on {fmt(o['rain_days'])} days.")),
}


def wrong(world, ex):
    """The wrong call of a WRONG kind's task: {"call", "output", "facts", "answer", "args" (the
    arguments that differ from the gold's)}, or None."""
    if ex["kind"] not in WRONG:
        return None
    make, say = WRONG[ex["kind"]]
    (gold,) = ex["steps"][0]  # single-step, single-call kinds
    args = make(gold["arguments"])
    out = world.call(gold["name"], args)
    facts, answer = say(args, out)
    return {"call": {"name": gold["name"], "arguments": args}, "output": out, "facts": facts, "answer": answer,
            "args": {k: v for k, v in args.items() if gold["arguments"][k] != v}}


# --- rows -------------------------------------------------------------------------------------

def combo(kind, v, question):
    """What eval holds out: the kind and the entities the question names (sorted, so
    "Paris and Rome" and "Rome and Paris" are one combo); a question without entities (an
    arithmetic one) is its own combo."""
    named = sorted(str(x) for x in v.values() if str(x) in ENTITIES and str(x) in question)
    return "|".join([kind] + (named or [str(x) for x in v.values()]))


def is_eval(seed, key):
    """Whether combo `key` belongs to eval: a seeded hash, EVAL_SHARE of all combos."""
    return random.Random(f"combo|{seed}|{key}").random() < EVAL_SHARE


def make_example(world, r, kind):
    """One task of `kind` as a plain dict."""
    ptype, server, build, paraphrases = KINDS[kind]
    run = Run(world)
    v, facts, answer = build(run, r)
    question = r.choice(paraphrases).format(**v)
    tools = SERVERS[server or r.choice(sorted(SERVERS))]
    return dict(kind=kind, combo=combo(kind, v, question), parallel_type=ptype, question=question, tools=tools,
                steps=run.steps, outputs=run.outputs, facts=facts, answer=answer)


def compact(x):
    return json.dumps(x, ensure_ascii=False, separators=(",", ":"))


def verl_row(ex, split, index, k=None, wrong_k=None):
    """An RL / eval row. With `k` (the diagnostic, --bonus K) a bonus kind's row also records
    the extra call's response (so the replay simulator answers it), adds the first k of its
    values to the reference facts and names the call in extra_info.bonus_call; its gold is unchanged.
    With `wrong_k` (--wrong K) a WRONG kind's row records the wrong call's response, names it
    (bonus_call, and bonus_args: its wrong arguments) and, with K = 1, holds its facts instead."""
    names = [t["function"]["name"] for t in ex["tools"]]
    tools_json = compact(ex["tools"])
    extra = ex["bonus"] if k is not None else None
    calls = [(c, o) for step, outs in zip(ex["steps"], ex["outputs"]) for c, o in zip(step, outs)]
    bad = ex["wrong"] if wrong_k is not None else None
    extra = extra or bad
    calls += [(extra["call"], extra["output"])] if extra else []
    # arguments as a JSON string, like the gold: parquet would fill dicts of varying keys with nulls
    responses = [{"name": c["name"], "arguments": json.dumps(c["arguments"], ensure_ascii=False), "response": compact(o)}
                 for c, o in calls]
    row = {
        "data_source": "slca_world",
        "prompt": [{"role": "system", "content": system_prompt(ex["tools"])},
                   {"role": "user", "content": ex["question"]}],
        "tools": tools_json,
        "reward_model": {"style": "rule", "ground_truth": {
            "allowed_tools": names,
            "gold_tool_calls": json.dumps(ex["steps"], ensure_ascii=False),
            "question_content": ex["question"],
            "tool_schemas": tools_json,
            "subset_name": "irrelevant" if ex["parallel_type"] == "irrelevant" else "tool_call",
            "reference_facts": (bad["facts"] if bad and wrong_k else ex["facts"])
            + (extra["values"][:k] if extra and not bad else [])}},
        "extra_info": {"split": split, "index": index, "parallel_type": ex["parallel_type"], "kind": ex["kind"],
                       "combo": ex["combo"], "tool_responses": responses},
    }
    if extra:
        row["extra_info"]["bonus_call"] = extra["call"]["name"]
    if bad:
        row["extra_info"]["bonus_args"] = compact(bad["args"])
    return row


def sft_row(ex, serial=False, extra=False, bad=False):
    """A teacher's trajectory; a `serial` teacher makes the calls of each step one per turn, an
    `extra` one also makes the task's bonus call last and states its values, and a `bad` one makes
    the task's wrong call instead of the gold one and states what it answers."""
    turns = [{"from": "system", "value": system_prompt(ex["tools"])}, {"from": "human", "value": ex["question"]}]
    steps = [([ex["wrong"]["call"]], [ex["wrong"]["output"]])] if bad else list(zip(ex["steps"], ex["outputs"]))
    if serial:
        steps = [([c], [o]) for step, outs in steps for c, o in zip(step, outs)]
    if extra:
        steps.append(([ex["bonus"]["call"]], [ex["bonus"]["output"]]))
    for step, outs in steps:
        turns.append({"from": "gpt", "value": "<tool_call>\n" + json.dumps(step, ensure_ascii=False) + "\n</tool_call>"})
        turns.append({"from": "human", "value": "\n".join(
            f"<tool_response>\n{compact(o)}\n</tool_response>" for o in outs)})
    answer = ex["wrong"]["answer"] if bad else ex["answer"]
    turns.append({"from": "gpt", "value": answer + (" " + ex["bonus"]["sentence"] if extra else "")})
    return {"conversations": turns}


def examples(seed=0, scale=1.0):
    """{"sft": examples, "rl": ..., "eval": ...}, deterministic for a seed. SFT and RL draw
    only train combos, eval only eval combos; within a split a question repeats only when
    its kind has run out of new ones (20 draws)."""
    world, r = World(seed), random.Random(seed)
    by_type = {t: [k for k, spec in KINDS.items() if spec[0] == t] for t in TYPES}
    out, seen = {}, {"sft": set(), "rl": set(), "eval": set()}
    for name, n in SIZES.items():
        rows = []
        while len(rows) < max(1, round(n * scale)):
            kind = r.choice(by_type[r.choices(TYPES, TYPE_WEIGHTS)[0]])
            matched = 0
            for _ in range(1000):  # redraw until the combo is of this split, and new if it can be
                ex = make_example(world, r, kind)
                if is_eval(seed, ex["combo"]) != (name == "eval"):
                    continue
                matched += 1
                if ex["question"] not in seen[name] or matched > 20:
                    break
            else:
                continue  # this kind has no combo of this split: draw another kind
            seen[name].add(ex["question"])
            rows.append(ex)
        out[name] = rows
    return out


def generate(seed=0, scale=1.0, serial_share=SERIAL_SHARE, bonus_k=None, wrong_k=None):
    """{"sft": rows, "rl": rows, "eval": rows} in the files' layouts. The SFT teacher is
    serial on a seeded `serial_share` of its demonstrations (drawn per row, apart from the
    draws that make the tasks, so the tasks do not depend on it). `bonus_k` (0, 1, 2; None =
    off) builds the diagnostic world: the teacher makes the bonus call on a seeded BONUS_SHARE
    of the bonus kinds' demonstrations (the same SFT data for every k), and the RL and eval
    rows of those kinds carry it (`verl_row`); nothing else changes, and with None every row is
    byte-identical to the world without the option. `wrong_k` (0, 1; None = off; not with
    bonus_k) builds the other direction's world the same way (`wrong`, `verl_row`)."""
    if bonus_k is not None and wrong_k is not None:
        raise ValueError("--bonus and --wrong build different worlds: give one")
    world = World(seed)

    def serial(i):
        return random.Random(f"serial|{seed}|{i}").random() < serial_share

    def extra(i, ex):
        return bonus_k is not None and ex["bonus"] is not None and random.Random(f"bonus|{seed}|{i}").random() < BONUS_SHARE

    def bad(i, ex):
        return wrong_k is not None and ex["wrong"] is not None and random.Random(f"wrong|{seed}|{i}").random() < BONUS_SHARE

    out = {}
    for name, rows in examples(seed, scale).items():
        for ex in rows:
            ex["bonus"], ex["wrong"] = bonus(world, ex), wrong(world, ex)
        out[name] = [sft_row(ex, serial(i), extra(i, ex), bad(i, ex)) if name == "sft"
                     else verl_row(ex, name, i, bonus_k, wrong_k) for i, ex in enumerate(rows)]
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default="data/world")
    ap.add_argument("--scale", type=float, default=1.0, help="multiply every split size (tests use a small one)")
    ap.add_argument("--serial-share", type=float, default=SERIAL_SHARE,
                    help="share of SFT demonstrations that make parallel calls one per turn")
    ap.add_argument("--bonus", type=int, choices=[0, 1, 2], default=None, metavar="K",
                    help="the diagnostic world: bonus kinds' rows record an extra info call the gold does not ask for, "
                         "and K of its values join the reference facts (0 = the control); default off")
    ap.add_argument("--wrong", type=int, choices=[0, 1], default=None, metavar="K",
                    help="the other direction's world: on three kinds half the teacher's demonstrations use a wrong "
                         "argument, and with K = 1 the reference facts are what that call answers; default off")
    args = ap.parse_args()
    if args.bonus is not None and args.wrong is not None:
        ap.error("--bonus and --wrong build different worlds: give one")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for name, rows in generate(args.seed, args.scale, args.serial_share, args.bonus, args.wrong).items():
        path = out / f"{name}.jsonl"
        path.write_text("".join(compact(row) + "\n" for row in rows), encoding="utf-8")
        print(f"{path}: {len(rows)} rows, {path.stat().st_size / 1e6:.2f} MB")


if __name__ == "__main__":
    main()
