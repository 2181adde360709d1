"""The credit page: one prompt's group, token by token, coloured by the advantage each token trains on.

    python -m credit.page runs/slca-s0                     # the last step's first group -> runs/slca-s0/credit.html
    python -m credit.page runs/slca-s0 --step 12 --prompt 1 --out page.html
    python -m credit.page --example                        # README's case, no run needed -> credit-example.html

train.py keeps, for the first groups of each RL step (lib/runs/loop.py CREDIT_GROUPS), every rollout's
prompt and response ids, its response mask and its rewards (<run>/credit.jsonl). This page reads
them back, cuts the masks into segments (segment.py, README Eq. 1) and computes the per-token
advantages with advantage.py from the same rewards under each algorithm: SLCA (Eq. 8), GRPO
(Eq. 6), and, when the run trained on something else, that too (Eq. 14's per-turn credit, Eq. 15's
decision credit, ToolPO's Eq. 13), as columns side by side. A token's colour is its advantage on
one diverging scale for the whole page (blue below 0, red above); its underline is its segment
(tool, summary), observation tokens (mask 0) are grey, and the decision tokens are boxed: the first
token of each turn after a tool answer, which calls again, and the summary turn's opening tokens
that stop calling (Eq. 15's d); hovering shows its id, text, A and segment.
One self-contained HTML file: inline CSS, no script, nothing fetched; every text is escaped.
"""
import argparse
import html
import json
import os
from dataclasses import replace

import torch

from advantage import Credit, token_advantages
from segment import decision_mask, run_index, segment_masks
from lib.inputs.text import encodable
from lib.runs.config import settings
from lib.runs.files import read_jsonl

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the repo root

RED, BLUE, WHITE = (215, 48, 39), (69, 117, 180), (255, 255, 255)  # ColorBrewer RdBu's ends
PARTS = ("format", "name", "key", "value", "parallel")  # Eq. 2's
NO_TURN = 0.0  # Eq. 14's ω of the plain columns


def colour(a, scale):
    """The diverging colour of advantage `a` on [-scale, scale]: "rgb(r,g,b)", white at 0."""
    t = max(-1.0, min(1.0, a / scale)) if scale > 0 else 0.0
    end = RED if t > 0 else BLUE
    return "rgb({},{},{})".format(*(round(w + abs(t) * (e - w)) for w, e in zip(WHITE, end)))


def columns(cfg):
    """[(label, algo, ω, decision credit)] shown for a run of config `cfg`: what it trained on first."""
    algo, omega, dec = cfg.get("algo", "slca"), cfg.get("turn_credit", 0.0), cfg.get("decision_credit", "summary")
    plain = [("SLCA (Eq. 8)", "slca", NO_TURN, "summary"), ("GRPO (Eq. 6)", "grpo", NO_TURN, "summary")]
    if algo == "slca" and (omega or dec != "summary"):
        eqs = " + ".join(x for x, on in (("Eq. 14", omega), ("Eq. 15", dec != "summary")) if on)
        return [(f"SLCA + {eqs}, trained on", "slca", omega, dec)] + plain
    if algo == "toolpo":
        return [("ToolPO (Eq. 13), trained on", "toolpo", NO_TURN, "summary")] + plain
    return sorted(plain, key=lambda c: c[1] != algo)


def advantages(rows, cfg, decode):
    """Per column of `columns(cfg)`: the (B, T) advantages over the rows' responses, as train.py
    computes them (a dropped row's masks zeroed first), with the response and tool masks (B, T) to
    draw, and the decision tokens (B, T): Eq. 15's d and the first token of every later turn."""
    T = max(len(r["ids"]) for r in rows)
    pad = lambda x: x + [0] * (T - len(x))  # noqa: E731
    keep = torch.tensor([r["keep"] for r in rows])                                         # (B,)
    mask = torch.tensor([pad(r["mask"]) for r in rows])                                  # (B, T) drawn
    trained = mask * keep[:, None]                                                         # (B, T) as train.py
    tool, summary, _, _ = segment_masks(trained)
    batch = {"input_ids": torch.tensor([pad(r["ids"]) for r in rows]), "response_mask": trained, "tool_mask": tool,
             "summary_mask": summary}
    gids = torch.tensor([r["group"] for r in rows])                                        # (B,)
    nan = float("nan")  # a reward logged as null was not finite (lib/runs/files.py json_safe): it zeroes its group
    scores = [{k: nan if v is None else v for k, v in r["rewards"].items()} for r in rows]
    turn_r = [r["r_turn"] for r in rows]
    d = decision_mask(trained, batch["input_ids"], decode)                                 # (B, T)
    runs = run_index(trained)                                                              # (B, T)
    opens = (runs > 0) & (runs != torch.cat([torch.full_like(runs[:, :1], -1), runs[:, :-1]], 1))  # (B, T)
    out = []
    for label, algo, omega, dec in columns(cfg):
        credit = replace(settings(Credit, cfg), algo=algo, turn_credit=omega, decision_credit=dec)
        A = token_advantages(scores, turn_r, batch, keep, gids, credit, decision=d)          # (B, T)
        out.append((label, A))
    return out, mask, segment_masks(mask)[0], d.bool() | opens


def token_html(tid, text, a, seg, scale, dec=False):
    """One token as a span: background = colour(a), class = its segment, title = its caption."""
    caption = f"id {tid} · {text!r} · A {a:+.4f} · {seg}" + (" · decision" if dec else "")  # repr: one line
    shown = text.replace("\n", "↵\n") if text else "∅"
    style = f' style="background:{colour(a, scale)}"' if seg in ("tool", "summary") else ""
    return (f'<span class="t {seg}{" dec" if dec else ""}" data-id="{tid}" data-a="{a!r}" data-seg="{seg}"{style} '
            f'title="{html.escape(caption)}">{html.escape(shown)}</span>')


def rollout_html(i, row, cols, mask, tool, *, d, decode, scale):
    r = {k: float("nan") if v is None else v for k, v in row["rewards"].items()}
    facts = " · ".join(f"{k} {r[k]:.2f}" for k in PARTS if k in r)
    facts += f" · S_process {r['process']:.3f} · S_sum {r['summary']:.3f} · score {r['score']:.3f}"
    facts += f" · R_tool {r.get('r_tool', 0):.3f} · R_sum {r.get('r_sum', 0):.3f}" + ("" if row["keep"] else " · dropped")
    parts = [f'<section class="rollout" data-i="{i}"><h3>rollout {i}</h3><p class="rewards">{html.escape(facts)}</p>'
             '<div class="cols">']
    for label, A in cols:
        on = lambda m: f"{A[i][m].mean():+.3f}" if m.any() else "-"  # noqa: E731  a segment's mean A
        label = f"{label}: A on tool tokens {on(tool[i].bool())}, on summary tokens {on(mask[i].bool() & ~tool[i].bool())}"
        spans = []
        for t, tid in enumerate(row["ids"]):
            seg = ("tool" if tool[i, t] else "summary") if mask[i, t] else "observation"
            spans.append(token_html(tid, decode([tid]), float(A[i, t]), seg, scale, bool(d[i, t])))
        parts.append(f'<div class="col" data-algo="{html.escape(label)}"><h4>{html.escape(label)}</h4>'
                     f'<div class="toks">{"".join(spans)}</div></div>')
    return "".join(parts) + "</div></section>"


CSS = """
body{font:13px/1.5 system-ui,sans-serif;margin:16px;color:#222}
h1{font-size:18px}h3{margin:14px 0 2px;font-size:14px}h4{margin:2px 0;font-size:12px;color:#555}
.cols{display:flex;gap:12px}.col{flex:1;min-width:0;border:1px solid #ddd;padding:6px}
.toks{font:12px/1.9 ui-monospace,monospace;white-space:pre-wrap;word-break:break-all}
.t{padding:0 1px;margin-right:1px}.tool{border-bottom:2px solid #333}.summary{border-bottom:2px dotted #333}
.observation,.prompt{color:#999}.dec{outline:2px solid #000;outline-offset:1px}
.rewards{margin:0;color:#333;font-size:12px}.legend span{display:inline-block;padding:0 6px;margin-right:6px}
.bar{display:inline-block;width:240px;height:12px;vertical-align:middle;
background:linear-gradient(to right,rgb(69,117,180),#fff,rgb(215,48,39))}
"""


def page(title, question, rows, cfg, decode):
    """The whole HTML page of one group's rows (credit.jsonl's) under `cfg` (the run's config)."""
    cols, mask, tool, d = advantages(rows, cfg, decode)
    scale = max(max(float(A.abs().max()) for _, A in cols), 1e-12)
    prompt = "".join(token_html(t, decode([t]), 0.0, "prompt", scale) for t in rows[0]["prompt"])  # the group's
    legend = (f'<p class="legend">A: <span>−{scale:.3f}</span><span class="bar"></span><span>+{scale:.3f}</span> '
              '<span class="t tool">tool</span><span class="t summary">summary</span>'
              '<span class="t observation">observation (mask 0)</span><span class="t dec">decision token</span> '
              'hover a token for its id, text, A and segment</p>')
    body = "".join(rollout_html(i, row, cols, mask, tool, d=d, decode=decode, scale=scale) for i, row in enumerate(rows))
    return (f'<!doctype html><html><head><meta charset="utf-8"><title>{html.escape(title)}</title>'
            f'<style>{CSS}</style></head><body data-scale="{scale!r}"><h1>{html.escape(title)}</h1>'
            f'<p>{html.escape(question)}</p>{legend}<details><summary>prompt ({len(rows[0]["prompt"])} tokens)'
            f'</summary><div class="toks">{prompt}</div></details>{body}</body></html>')


# ---------------------------------------------------------------------------------------------
# a run's group, or the README's case
def tokenizer(run, cfg):
    """The run's tokenizer: from its sft/, base/ or final/ folder, else its --model."""
    from transformers import AutoTokenizer
    from lib.training.model import hf_folder
    for sub in ("sft", "base", "final"):
        if os.path.isfile(os.path.join(run, sub, "tokenizer_config.json")):
            return AutoTokenizer.from_pretrained(os.path.join(run, sub))
    return AutoTokenizer.from_pretrained(hf_folder(cfg["model"]))


def group(run, step, prompt):
    """The credit.jsonl rows of one group: the `prompt`-th group logged at `step` (None: the last step)."""
    rows = read_jsonl(os.path.join(run, "credit.jsonl"))
    if not rows:
        raise SystemExit(f"{run}: no credit.jsonl rows (a run of this version logs them at each RL step)")
    steps = sorted({r["step"] for r in rows})
    step = steps[-1] if step is None else step
    if step not in steps:
        raise SystemExit(f"--step {step}: not logged in {run}/credit.jsonl (steps {steps[0]}..{steps[-1]})")
    gids = sorted({r["group"] for r in rows if r["step"] == step})
    if not 0 <= prompt < len(gids):
        raise SystemExit(f"--prompt {prompt}: step {step} logged {len(gids)} groups (0..{len(gids) - 1})")
    return step, [r for r in rows if r["step"] == step and r["group"] == gids[prompt]]


def example():
    """README's case on the shipped world's first weather prompt, tokenized by the demo's tokenizer:
    a right call then a bad summary, a wrong call then a good summary, and the two others, scored by
    the real HierR and facts judge; returns (rows, cfg, tokenizer)."""
    import rewards
    from lib.inputs.data import load_sft, load_tasks
    from lib.frozen.judges import FactsJudge
    from lib.training.tiny import build_tokenizer, world_texts
    from rollout import prompt_ids, tool_turn_ids
    from simulator import Simulator
    from lib.inputs.chat import plain_ids
    world = os.path.join(ROOT, "data", "world")
    tasks = load_tasks(os.path.join(world, "rl.jsonl"))
    tok = build_tokenizer(world_texts(tasks, load_sft(os.path.join(world, "sft.jsonl"))))
    task = next(t for t in tasks if len(t.gold) == 1 and len(t.gold[0]) == 1 and t.gold[0][0]["name"] == "get_weather")
    gold = task.gold[0][0]
    wrong = {**gold["arguments"], "city": next(c for c in ("Oslo", "Lima", "Paris") if c != gold["arguments"]["city"])}
    call = lambda args: '<tool_call>\n[{"name": "get_weather", "arguments": %s}]\n</tool_call>' % json.dumps(args)  # noqa: E731
    good, bad = "The weather: " + ", ".join(task.facts) + ".", "I could not find it."
    sim, judge = Simulator("replay"), FactsJudge()
    rows = []
    for args, summary in ((gold["arguments"], bad), (wrong, good), (gold["arguments"], good), (wrong, bad)):
        [(calls, obs)] = sim.respond([call(args)], [task])
        s = rewards.score(call(args) + summary, summary, obs, task, judge)
        [turn, answer] = plain_ids(tok, [call(args), summary])
        glue = tool_turn_ids(tok, obs, ended_on_eos=False)
        ids = turn + glue + answer + [tok.convert_tokens_to_ids("<|im_end|>")]
        rows.append({"step": 0, "group": 0, "prompt": prompt_ids(tok, task), "ids": ids, "keep": True,
                     "mask": [1] * len(turn) + [0] * len(glue) + [1] * (len(answer) + 1),
                     "rewards": {k: s[k] for k in (*PARTS, "process", "summary", "score", "omission", "r_tool", "r_sum",
                                                   "r_succ", "r_action")},
                     "r_turn": rewards.turn_rewards([call(args)], task.gold, task.allowed_tools), "question": task.question})
    return rows, {"algo": "slca"}, tok


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("run", nargs="?", help="a train.py run folder (its config.json and credit.jsonl)")
    p.add_argument("--step", type=int, default=None, help="RL step (default: the last one logged)")
    p.add_argument("--prompt", type=int, default=0, help="which of the step's logged groups (0 = the first)")
    p.add_argument("--example", action="store_true", help="README's case, built here: no run needed")
    p.add_argument("--out", default=None, help="the page (default: <run>/credit.html, or credit-example.html)")
    a = p.parse_args(argv)
    if a.example == bool(a.run):
        p.error("give a run folder or --example")
    if a.example:
        rows, cfg, tok = example()
        title, out = "Credit: a right call, a bad summary; a wrong call, a good summary (G = 4)", a.out or "credit-example.html"
    else:
        try:
            cfg = json.load(open(os.path.join(a.run, "config.json")))
        except (OSError, ValueError) as e:
            p.error(f"{a.run}: not a run folder ({e})")
        step, rows = group(a.run, a.step, a.prompt)
        tok = tokenizer(a.run, cfg)
        title, out = f"Credit: {a.run}, step {step}, prompt {a.prompt} (G = {len(rows)})", a.out or os.path.join(a.run, "credit.html")
    text = page(title, rows[0]["question"], rows, cfg, lambda ids: tok.decode(ids))
    with open(out, "w", encoding="utf-8") as f:
        f.write(encodable(text))  # a lone surrogate (policy or data text) as U+FFFD
    print(f"wrote {out}")
    return out


if __name__ == "__main__":
    main()
