"""Evaluation: the in-domain Toucan metrics (docs/method.md §9) and the `eval.py` command.

    python eval.py toucan --model M --out out/toucan.jsonl            # greedy rollouts, HierR metrics
    python eval.py toucan --model runs/slca-s0/final --out out/t.jsonl   # that run's "after RL" row, its settings
    python eval.py plot   runs/slca-s0 runs/grpo-s0 --out out/plots     # lib/runs/plots.py
    python eval.py aggregate out/s0.summary.json out/s1.summary.json out/s2.summary.json

`evaluate` is the one Toucan evaluation, train.py's before/after-RL table and `eval.py toucan`
alike: greedy rollouts (rollout.py) answered by the simulator, scored by HierR (rewards.py) with
the default weights and λs, under the caps of the episode flags, which are defined here once for
both commands. `metrics` gives the table of §9, overall and per parallel_type. The result files,
their fingerprints and resume, a run's config as the defaults, and `aggregate` are
lib/runs/evalcli.py's; the external benchmarks are `python -m bench` (bench/__main__.py).
"""
import argparse
from collections import defaultdict
from dataclasses import dataclass, field, replace

from tqdm import tqdm

from lib.frozen import judges, llm
import rewards
from lib.inputs.data import drop_long, load_tasks
from lib.training.model import load_policy
from lib.training.precision import autocast, bf16_note, cast_once
from rollout import GEN_BATCH, MAX_TOKENS, Episode, prompt_ids, rollout
from lib.inputs.text import MAX_JSON_DEPTH, MAX_SAFE_DEPTH, set_json_depth
from simulator import MALFORMED, PARSES, PROMPT, SCHEMA_CHECKS, Simulator
from lib.frozen.sgls import PROMPT_FIELDS
from lib.runs.config import Part, bound, bounds_help, check_bounds, client_part, flags, settings
from lib.runs.evalcli import (FMT, aggregate_command, bench_parser, fingerprint, llm_client, resume, run_config,
                              text_table, write_summary)
from lib.runs.files import append_jsonl

THRESHOLDS = (0.7, 0.8, 0.9, 1.0)  # the release's success@ / tool_success@ levels (rl/slca_grpo/reward_fn.py)
SUCCESS = 0.9                      # docs/method.md §9: the headline Success@0.9
RUN_FLAGS = {"data": "eval_data", "limit": "eval_limit", "batch_size": "gen_batch"}  # toucan flag -> train.py's name
NOT_FROM_RUN = ("bench", "model", "out", "device", "run_config")  # toucan flags a run's config never sets


# ---------------------------------------------------------------------------------------------
# toucan
def reached(x, t):
    """x >= t, with the released code's tolerance at t = 1.0."""
    return x >= min(t, 1 - 1e-9)


def metrics(scores):
    """The metrics of docs/method.md §9, overall ("all") and per parallel_type."""
    def table(rows):
        n = len(rows)
        mean = lambda f: sum(map(f, rows)) / n  # noqa: E731
        out = {"n": n,
               "name_f1": mean(lambda s: s["name"]),
               "arg_match": mean(lambda s: (s["key"] + s["value"]) / 2),
               "process": mean(lambda s: s["process"]),
               "success": mean(lambda s: reached(s["process"], SUCCESS)),
               "success_code": mean(lambda s: reached(s["score_norm"], SUCCESS)),
               "tool_turns": mean(lambda s: s["tool_turns"]),
               "format": mean(lambda s: s["format"]),
               "judge_failed": mean(lambda s: s.get("judge_failed", 0.0)),
               "sim_failed": mean(lambda s: s.get("sim_failed", 0))}
        for t in THRESHOLDS:
            out[f"success@{t}"] = mean(lambda s: reached(s["process"], t))
            out[f"success_code@{t}"] = mean(lambda s: reached(s["score_norm"], t))
            out[f"tool_success@{t}"] = mean(lambda s: reached(s["name"], t))
        return out
    by_type = defaultdict(list)
    for s in scores:
        by_type[s["parallel_type"]].append(s)
    marked = [s for s in scores if "redundant" in s]  # the diagnostic world's bonus rows
    bonus = {"bonus": {**table(marked), "redundant": sum(s["redundant"] for s in marked) / len(marked),
                       "summary": sum(s["summary"] for s in marked) / len(marked)}} if marked else {}
    return {"all": table(scores), **{k: table(v) for k, v in sorted(by_type.items())}, **bonus}


def evaluate(model, tok, tasks, simulator, judge, *, episode=Episode(), hierr=rewards.HierR()):
    """The Toucan evaluation, the one that train.py's before/after-RL rows and `eval.py toucan`
    both run: greedy rollouts on `tasks` under `episode`'s caps and sampler (its temperature set to 0),
    scored by rewards.score_rollouts as `hierr` reads model output (strict_calls, summary_gate,
    reward_input), with the default HierR weights and λ_tool = λ_sum = 1 whatever the training used.
    Returns (per-task scores, rollouts); metrics(scores) is the table. The caller picks the task set
    (data.drop_long for the long-prompt filter) and the compute dtype (precision.autocast, with
    the weights cast once by precision.cast_once)."""
    rs = rollout(model, tok, tasks, simulator, replace(episode, temperature=0.0))
    reading = rewards.HierR(strict_calls=hierr.strict_calls, summary_gate=hierr.summary_gate,
                            reward_input=hierr.reward_input)
    return rewards.score_rollouts(rs, judge, reading, tok=tok), rs


def run_toucan(model, tok, tasks, simulator, judge, *, out_jsonl=None, fingerprint=None, episode=Episode(),
               hierr=rewards.HierR()):
    """evaluate() on `episode.gen_batch` tasks at a time; each task's record (id = its index in
    `tasks`, scores, turns) is appended to out_jsonl, and tasks already there (made under
    `fingerprint`) are skipped. Returns (summary, records)."""
    batch_size = episode.gen_batch
    done = {r["id"]: r for r in resume(out_jsonl, fingerprint)}
    records = [done[i] for i in range(len(tasks)) if i in done]
    todo = [i for i in range(len(tasks)) if i not in done]
    with tqdm(total=len(tasks), initial=len(records), desc="toucan", dynamic_ncols=True) as bar:
        for s in range(0, len(todo), batch_size):
            ids = todo[s:s + batch_size]
            scores, rs = evaluate(model, tok, [tasks[i] for i in ids], simulator, judge, episode=episode, hierr=hierr)
            rows = [{"id": i, "question": r.task.question, **sc, "turns": r.turns}
                    for i, sc, r in zip(ids, scores, rs)]
            append_jsonl(out_jsonl, rows)
            records += rows
            bar.update(len(rows))
    return metrics(records), records


COLUMNS = [("n", "n"), ("success", "Success@0.9"), ("success_code", "Success@0.9(code)"), ("name_f1", "NameF1"),
           ("arg_match", "ArgMatch"), ("process", "Process"), ("tool_turns", "ToolTurns"), ("format", "Format")]
THRESHOLD_COLUMNS = [(f"{kind}@{t}", f"{short}@{t}") for kind, short in (("success", "S"), ("success_code", "S(code)"),
                                                             ("tool_success", "ToolS")) for t in THRESHOLDS]


def format_table(results):
    """Rows of {label: summary["all"]} as a fixed-width text table."""
    return text_table(results, COLUMNS)


# ---------------------------------------------------------------------------------------------
# the settings of one episode and its scoring, shared by train.py and `eval.py toucan`
@dataclass(frozen=True)
class Frozen:
    """The frozen LLMs of an episode and how what they read is parsed: `frozen_llms` builds the simulator
    (simulator.Simulator) and the judge (rewards.summary_judge) from them; train.py's and eval.py's flags of the
    same names ("the episode and its scoring"), beside their clients' (--sim-*, --judge-*: lib.frozen.llm.Client)."""
    sim_backend: str | None = field(default=None, metadata={
        "choices": ("replay", "llm"), "help": "default: llm when a sim client is set, else replay"})
    schema_check: str = field(default=SCHEMA_CHECKS[0], metadata={
        "choices": SCHEMA_CHECKS, "hidden": True,
        "help": "full = JSON-Schema validation after check 3; light = stop at check 3 (the released code's)"})
    no_sgls: bool = field(default=False, metadata={"help": "'w/o SGLS': no tool definition, no checks 2-4"})
    malformed: str = field(default=MALFORMED[0], metadata={
        "choices": MALFORMED, "hidden": True,
        "help": "a block that is not JSON or never closed: end = no call, the trajectory ends (the release's parser); "
                "answer = an error observation and the trajectory goes on"})
    sim_parse: str = field(default=PARSES[0], metadata={
        "choices": PARSES, "hidden": True,
        "help": "how the simulator reads a turn's calls: project = think blocks dropped, arguments must be a JSON "
                "object (check 1); release = the released agent loop's: think blocks kept (a call inside one is "
                "answered), arguments that are not an object go to the LLM"})
    json_depth: int = field(default=MAX_JSON_DEPTH, metadata={
        "range": f"[1, {MAX_SAFE_DEPTH}]", "hidden": True,  # lib/inputs/text.py's
        "help": f"JSON nested deeper than this is invalid (no call, no gold) wherever model output or data is parsed; "
                f"up to {MAX_SAFE_DEPTH} (the release has no bound and can crash)"})
    sim_cache: str | None = field(default=None, metadata={"help": "folder for the simulator's answer cache"})
    sim_prompt: str | None = field(default=None, metadata={
        "metavar": "FILE", "hidden": True,
        "help": "the simulator LLM's prompt template (e.g. the release's text) with the placeholders {definition} and "
                "{call}; default: simulator.PROMPT"})
    judge_prompt: str | None = field(default=None, metadata={
        "metavar": "FILE", "hidden": True,
        "help": "the judge's rating template with {question}, {responses}, {response} (e.g. the release's text, "
                "placeholders renamed); replies are read as [[level]] or the release's <rating>level</rating>; default: "
                "judges.JUDGE_PROMPT"})


READING = ("strict_calls", "summary_gate", "reward_input")  # rewards.HierR's fields on how model output is read
EPISODE = [Part(Episode, skip=("temperature", "max_tokens", "gen_batch")),  # toucan: greedy, --max-tokens, --batch-size
           Part(rewards.HierR, only=READING), Frozen,
           client_part("sim"), client_part("judge")]  # the flags deciding an episode and its scores, both commands'


def check_episode_flags(p, a, solved_prompt=None):
    """Fail early, naming the flag; read the prompt templates once (a.sim_template, a.judge_template,
    a.solved_template), so a bad file fails before any work."""
    try:
        a.sim_template = llm.read_template("--sim-prompt", a.sim_prompt, PROMPT_FIELDS, PROMPT)
        a.judge_template = llm.read_template("--judge-prompt", a.judge_prompt, judges.JUDGE_FIELDS, judges.JUDGE_PROMPT)
        a.solved_template = llm.read_template("--solved-prompt", solved_prompt, judges.JUDGE_FIELDS,
                                             judges.SOLVED_PROMPT)
    except ValueError as e:
        p.error(str(e))


@dataclass(frozen=True)
class Templates:
    """The frozen LLMs' prompt texts, read once from --sim-prompt, --judge-prompt and --solved-prompt by
    check_episode_flags (saved whole in a run's config.json)."""
    sim_template: str = PROMPT
    judge_template: str = judges.JUDGE_PROMPT
    solved_template: str = judges.SOLVED_PROMPT


def frozen_llms(frozen, templates, clients):
    """The simulator (simulator.Simulator) and the judge (rewards.summary_judge) under `frozen` (a Frozen) and
    `templates` (a Templates), answered by `clients` (sim, judge: lib.frozen.llm clients, None offline)."""
    sim = Simulator(frozen.sim_backend, clients[0], schema_check=frozen.schema_check, ablate=frozen.no_sgls,
                    cache_dir=frozen.sim_cache, malformed=frozen.malformed, parse=frozen.sim_parse,
                    prompt=templates.sim_template)
    return sim, rewards.summary_judge(clients[1], templates.judge_template, templates.solved_template)


def frozen_from_flags(a):
    """frozen_llms under a command's flags (train.py's, eval.py toucan's): (simulator, judge, their clients)."""
    clients = llm_client(a, "sim"), llm_client(a, "judge")
    return (*frozen_llms(settings(Frozen, a), settings(Templates, a), clients), clients)


# ---------------------------------------------------------------------------------------------
# CLI
def get_args(argv=None):
    p = argparse.ArgumentParser(description="Evaluate a policy (docs/method.md §9), plot or aggregate runs",
                                **FMT)
    sub = p.add_subparsers(dest="bench", required=True)
    t = bench_parser(sub, "toucan", "greedy rollouts on an eval split, HierR metrics", batch_size=GEN_BATCH,
                     batch_help="rollouts sampled together through all their turns", max_tokens=MAX_TOKENS,
                     tokens_help="response tokens per trajectory, observations included")
    t.add_argument("--model", required=True, help="hub name or local folder (a LoRA adapter folder, train.py "
                                                  "--lora-r's final/, is merged onto its base)")
    t.add_argument("--run-config", default="auto",
                   help="a train.py config.json whose settings become this command's defaults; auto = the "
                        "run's when --model is a run's final/, final/merged/ or sft/ folder; none = the defaults shown")
    t.add_argument("--data", default="data/world/eval.jsonl")
    bound(t.add_argument("--limit", type=int, default=None, help="first N tasks only"), "[0, 1e7]")
    for part in EPISODE:
        flags(t, part)

    g = sub.add_parser("plot", help="training curves, reward parts and advantage statistics as PNGs", **FMT)
    g.add_argument("runs", nargs="+", help="run folders of train.py (metrics.jsonl, eval.jsonl)")
    g.add_argument("--out", default="out/plots", help="folder for the PNGs")
    bound(g.add_argument("--smooth", type=int, default=1, help="moving average over N steps"), "[1, 1e7]")

    m = sub.add_parser("aggregate", help="mean ± std of several runs' summaries", **FMT)
    m.add_argument("summaries", nargs="+", help="<out>.summary.json files (or their .jsonl result files)")
    m.add_argument("--out", default=None, help="write the table as JSON here")
    for s in (t, g):
        bounds_help(s)
    a = p.parse_args(argv)
    if a.bench == "toucan":  # again, with the run's settings as the defaults: flags given still win
        config = run_config(a.model, a.run_config)
        t.set_defaults(**{d: config[RUN_FLAGS.get(d, d)] for d in vars(a)
                          if d not in NOT_FROM_RUN and config.get(RUN_FLAGS.get(d, d)) not in (None, "")})
        a = p.parse_args(argv)
    check_bounds(p, a)  # lib/runs/config.py's BOUNDS, before anything loads
    if a.bench == "toucan":
        check_episode_flags(p, a)
    if a.bench not in ("plot", "aggregate"):
        import torch
        a.device = a.device or ("cuda" if torch.cuda.is_available() else "cpu")
    return a


def main(argv=None):
    a = get_args(argv)
    if a.bench == "plot":
        from lib.runs import plots
        for path in plots.plot_runs(a.runs, a.out, a.smooth):
            print("wrote", path)
        return None
    if a.bench == "aggregate":
        return aggregate_command(a.summaries, a.out)
    fp = fingerprint(a)
    resume(a.out, fp)  # a mismatch stops here, before any model loads
    set_json_depth(a.json_depth)
    if note := bf16_note(a.dtype, a.device):
        print(note)
    model, tok = load_policy(a.model, "float32", a.device)  # float32 weights computing in --dtype, as train.py
    tasks, dropped = drop_long(load_tasks(a.data)[:a.limit], lambda t: len(prompt_ids(tok, t)), a.max_prompt_tokens)
    if dropped:
        print(f"dropped {dropped} prompts over --max-prompt-tokens {a.max_prompt_tokens}")
    sim, judge, _ = frozen_from_flags(a)
    with cast_once(model, a.dtype), autocast(a.dtype, a.device):  # no weight changes: one cast of them
        summary, _ = run_toucan(model.eval(), tok, tasks, sim, judge, out_jsonl=a.out, fingerprint=fp,
                                episode=settings(Episode, {**vars(a), "gen_batch": a.batch_size}),
                                hierr=settings(rewards.HierR, a))
    print(format_table(summary))
    print(text_table(summary, THRESHOLD_COLUMNS, width=12))
    return write_summary(a.out, fp, summary)


if __name__ == "__main__":
    main()
