"""The run's settings: train.py's flag table and its checks, a preset file (configs/*.toml) under
the command line's flags, and their compact view printed at start (the whole goes to <out>/config.json).

BOUNDS is every numeric flag's range, train.py's and eval.py's: `check_bounds` refuses a value outside it (nan
and inf included) in one line naming the flag, before anything loads, and `bounds_help` shows it in --help.

A preset is a plain TOML file of flag values, read as if its flags came first on the command line,
so a flag given always wins: configs/demo.toml without --model, configs/paper.toml with one, or
--preset NAME (a file in configs/) or PATH. Two rules follow the flags given: --epochs without
--steps drops the preset's steps (they follow the epochs); below float32 --old-logprobs is recompute.
--help shows the flags a run usually sets; --help-all shows every flag, HIDDEN's too, in the same groups.
"""
import argparse
import dataclasses
import hashlib
import importlib.util
import json
import math
import os
import sys
import textwrap
import tomllib

from lib.inputs.data import TURNS, DataError, release_files
from lib.inputs.text import MAX_SAFE_DEPTH
from lib.training import lora, tiny
from lib.training.precision import auto_dtype
from lib.runs.loop import BLIND_STEPS, UNSCORED

CONFIGS = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "configs")
WHY = {"demo": "no --model; --preset paper for the paper's recipe",           # the default's reason, by --model
       "paper": "a named --model; --preset demo for the demo's settings"}
REPORT_TO = ("none", "tensorboard", "wandb")  # --report-to (lib/runs/files.py Report)
HIDDEN = {  # on --help-all, not on --help: set by a preset, restoring the release (docs/deviations.md) or operational
    "model": "grad_ckpt tiny_size lora_alpha lora_dropout lora_targets merge_lora",
    "data": "skip_bad_rows",
    "SFT warm start": "sft_warmup sft_batch sft_max_len sft_tokens sft_turns sft_limit sft_weight_decay",
    "RL": "micro_batch ppo_epochs weight_decay grad_clip temperature gen_batch old_logprobs",
    "loss": "clip_eps clip_c",
    "rewards and advantages": "group_stats toolpo_norm_by_std",
    "the episode and its scoring": "max_prompt_tokens summary_gate reward_input schema_check malformed sim_parse "
                                   "json_depth sim_prompt judge_prompt sim_key sim_timeout sim_deadline sim_retries "
                                   "sim_max_tokens judge_key judge_timeout judge_deadline judge_retries judge_max_tokens",
    "simulator and judge in training": "keep_failed solved_prompt max_fail_rate step_deadline max_unscored",
    "run": "keep max_bad_updates",
    "diagnostics": "show",
}
BOUNDS = {  # range: the flags (dests) it bounds; all a careful user may ask for, nothing that overflows
    "(0, 1]": "lr sft_lr clip_eps",                  # Adam moves a weight by about lr a step
    "[0, 1]": "sft_warmup weight_decay sft_weight_decay judge_noise max_fail_rate max_unscored",  # shares, decays
    "[0, 1)": "lora_dropout",
    "(1, 100]": "clip_c",                            # the dual clip needs c > 1 (verl asserts it too)
    "[0, 100]": "lam_tool lam_sum hierr_weights turn_credit extra_call_cost extra_block_cost kl_beta temperature "
                "sim_retries judge_retries",          # retries: past ~1,000 the backoff overflows a float
    "(0, 1e6]": "lora_alpha grad_clip sim_timeout sim_deadline judge_timeout judge_deadline",  # timeouts: 11 days
    "[0, 1e6]": "step_deadline",                     # 0 = no shared bound
    "[1, 4096]": "tiny_size",
    "[0, 4096]": "lora_r",
    "[1, 1e7]": "group_size prompts_per_step mini_batch micro_batch gen_batch batch_size sft_batch ppo_epochs epochs "
                "keep max_bad_updates max_turns smooth max_tokens max_prompt_tokens sft_max_len sft_tokens "
                "sim_max_tokens judge_max_tokens",
    "[0, 1e7]": "steps save_every eval_every eval_limit limit sft_limit sft_epochs show max_tool_rounds",
    "[0, 4294967295]": "seed",                       # what every seeded generator takes
    f"[1, {MAX_SAFE_DEPTH}]": "json_depth",          # lib/inputs/text.py's
}
RANGE = {dest: bound for bound, dests in BOUNDS.items() for dest in dests.split()}


def settings(cls, values):
    """Settings dataclass `cls` (advantage.Credit, loss.Clip, ...) from a run's flags (a namespace, or a dict such as
    its config.json): each field from the value of the same name, a missing one its default."""
    values = values if isinstance(values, dict) else vars(values)
    return cls(**{f.name: values[f.name] for f in dataclasses.fields(cls) if f.name in values})


def num(text):
    """argparse type: a finite float (nan and inf are refused, naming the flag)."""
    x = float(text)
    if not math.isfinite(x):
        raise argparse.ArgumentTypeError(f"not a finite number: {text!r}")
    return x


def outside(dest, x):
    """What flag `dest`'s RANGE asks ("must be > 0 and <= 1") when x lies outside it (nan does), else ""."""
    bound = RANGE[dest]
    low, high = (v.strip() for v in bound[1:-1].split(","))
    shut = bound[0] == "[", bound[-1] == "]"  # closed at each end
    if (float(low) <= x if shut[0] else float(low) < x) and (x <= float(high) if shut[1] else x < float(high)):
        return ""
    return f"must be {'>=' if shut[0] else '>'} {low} and {'<=' if shut[1] else '<'} {high}"


def check_bounds(p, a):
    """Each value of a numeric flag in namespace `a` (each of a list's; None is unset) within its RANGE;
    else parser `p`'s error, one line naming the flag, its range and the value."""
    for dest in RANGE:
        value = getattr(a, dest, None)
        for x in value if isinstance(value, list) else [] if value is None else [value]:
            if why := outside(dest, x):
                p.error(f"--{dest.replace('_', '-')} {why}, not {x}")


def bounds_help(p):
    """Append each bounded flag's RANGE to its help."""
    for act in p._actions:
        if act.dest in RANGE:
            act.help = (act.help + "; " if act.help else "") + f"in {RANGE[act.dest]}"


def parser(method, episode_flags):
    """The flag table: the run's whole config, one flat list grouped under headers (model, data, SFT,
    RL, loss, rewards and advantages, the episode, simulator and judge, run, diagnostics), each default taken from
    the module that owns it (`method`: the method modules' defaults and choices, train.METHOD;
    `episode_flags` adds the episode's group, eval.add_episode_flags), or None where a preset file
    sets it. Long because it is the table, one flag a line."""
    p = argparse.ArgumentParser(description="SLCA-GRPO training", formatter_class=argparse.ArgumentDefaultsHelpFormatter,
                                epilog="These are the flags a run usually sets; --help-all shows every flag.")
    p.add_argument("--help-all", action=HelpAll, help="show every flag (those a preset sets, those restoring the "
                                                      "release's behaviour, the operational ones) and exit")
    g = p.add_argument_group("model")
    g.add_argument("--model", default=None, help="hub name, local folder or .gguf file (dequantized once into "
                                                 "~/.cache/slca-grpo); none = build the tiny demo model")
    g.add_argument("--preset", default=None, metavar="NAME|FILE",
                   help="the settings under the flags: configs/NAME.toml or a .toml file; default: demo without "
                        "--model, paper with one (lib/runs/config.py)")
    g.add_argument("--dtype", choices=["float32", "bfloat16", "float16", "auto"], default=None,
                   help="compute dtype over float32 weights; auto = bfloat16 where the device computes it natively "
                        "(a GPU, a CPU with AVX512-BF16 or AMX), else float32 (lib/training/precision.py auto_dtype)")
    g.add_argument("--grad-ckpt", action=argparse.BooleanOptionalAction, default=None, help="gradient checkpointing")
    g.add_argument("--device", default=None, help="default: cuda (this rank's GPU) if available, else cpu")
    g.add_argument("--tiny-size", type=int, nargs=3, default=list(tiny.SIZE), metavar=("HIDDEN", "LAYERS", "HEADS"),
                   help="shape of the demo model built when no --model is given")
    g.add_argument("--lora-r", type=int, default=0, help="LoRA rank (lib/training/lora.py): SFT and RL train adapters on a "
                                                         "frozen base; 0 = full fine-tuning")
    g.add_argument("--lora-alpha", type=num, default=None, help="LoRA scale alpha / r; default 2 r (LLaMA-Factory's)")
    g.add_argument("--lora-dropout", type=num, default=lora.DROPOUT, help="dropout on the adapters' input "
                   "(nonzero: the PPO update samples dropout the old log-probs did not, so its ratio starts off 1)")
    g.add_argument("--lora-targets", nargs="+", default=list(lora.TARGETS), help="module names given adapters")
    g.add_argument("--merge-lora", action="store_true", help="also write final/merged: the adapter merged into "
                                                             "its base, a whole Hugging Face folder")
    g = p.add_argument_group("data")
    g.add_argument("--data", default=None, help="RL prompts (.jsonl or .parquet); with --model and no data flags: "
                                                "the release's splits from the Hugging Face hub")
    g.add_argument("--eval-data", default=None, help="eval prompts; '' = no eval")
    g.add_argument("--sft-data", default=None, help="SFT conversations; '' = no warm start")
    g.add_argument("--skip-bad-rows", action="store_true", help="skip malformed rows instead of failing")
    g = p.add_argument_group("SFT warm start")
    g.add_argument("--sft-epochs", type=int, default=None)
    g.add_argument("--sft-lr", type=num, default=None, help="peak lr, cosine decay after warmup")
    g.add_argument("--sft-warmup", type=num, default=0.1, help="share of SFT steps spent warming up")
    g.add_argument("--sft-batch", type=int, default=None, help="conversations per optimizer step")
    g.add_argument("--sft-max-len", type=int, default=None, help="token cutoff per conversation")
    g.add_argument("--sft-tokens", type=int, default=None,
                   help="padded ids per SFT forward/backward (rows x the longest), conversations packed longest "
                        "first, a longer one alone; none = --micro-batch conversations a pass; the loss is the same")
    g.add_argument("--sft-turns", choices=TURNS, default=TURNS[0],
                   help="an assistant's text and the call after it: merge = one turn (what rollouts see); "
                        "release = two turns, each with its own end token (LLaMA-Factory's data)")
    g.add_argument("--sft-limit", type=int, default=None, help="use the first N conversations only")
    g.add_argument("--sft-weight-decay", type=num, default=None, help="AdamW weight decay of the warm start")
    g = p.add_argument_group("RL")
    g.add_argument("--algo", choices=method["algos"], default=method["algos"][0],
                   help="grpo = the 'w/o SLCA' ablation; toolpo = the release's additive baseline (Eq. 13)")
    g.add_argument("--epochs", type=int, default=None,
                   help="RL epochs over --data, each in its own seeded order (the release's launchers run 5)")
    g.add_argument("--steps", type=int, default=None,
                   help="RL steps; none = --epochs x prompts // --prompts-per-step (the demo preset's 60 holds "
                        "unless --epochs is given; steps past the epochs repeat their order)")
    g.add_argument("--group-size", type=int, default=None, help="G rollouts per prompt")
    g.add_argument("--prompts-per-step", type=int, default=None)
    g.add_argument("--mini-batch", type=int, default=None, help="prompts per PPO mini-batch (one optimizer step)")
    g.add_argument("--micro-batch", type=int, default=None, help="rollouts per forward/backward")
    g.add_argument("--ppo-epochs", type=int, default=1, help="passes of PPO updates over each step's rollouts")
    g.add_argument("--lr", type=num, default=None)
    g.add_argument("--weight-decay", type=num, default=0.01, help="AdamW weight decay of the RL updates")
    g.add_argument("--grad-clip", type=num, default=1.0, help="gradient-norm clip of the RL updates")
    g.add_argument("--temperature", type=num, default=method["temperature"], help="rollout sampling temperature")
    g.add_argument("--max-tokens", type=int, default=None, help="response tokens per trajectory, observations included")
    g.add_argument("--gen-batch", type=int, default=None,
                   help="rollouts sampled together through all their turns; a multiple of G prefills each prompt once")
    g.add_argument("--old-logprobs", choices=["sample", "recompute"], default=None,
                   help="log π_old of Eq. 9: as returned at sampling time, or recomputed by a separate forward pass "
                        "(the release's; exact when sampling ran in lower precision than training); recompute "
                        "whenever --dtype is not float32")
    g = p.add_argument_group("loss (docs/method.md §4)")
    g.add_argument("--loss-agg", choices=method["aggs"], default=method["aggs"][1],
                   help="seq-mean-token-mean = what the released run computed (one rollout per micro-batch): a mean "
                        "over rollouts of per-rollout token means; token-mean = one mean over the mini-batch's tokens")
    g.add_argument("--clip-eps", type=num, default=method["clip_eps"], help="ε of Eq. 10's ratio clip")
    g.add_argument("--clip-c", type=num, default=method["clip_c"], help="dual-clip constant")
    g.add_argument("--kl-beta", type=num, default=method["kl_beta"], help="0 drops the reference model")
    g = p.add_argument_group("rewards and advantages (docs/method.md §2-3)")
    g.add_argument("--lam-tool", type=num, default=method["lam"], help="λ_tool of Eqs. 4 and 8")
    g.add_argument("--lam-sum", type=num, default=method["lam"], help="λ_sum of Eqs. 4 and 8")
    g.add_argument("--hierr-weights", type=num, nargs=5, default=list(method["weights"]),
                   metavar=("FORMAT", "NAME", "KEY", "VALUE", "PARALLEL"), help="Eq. 2's; 0 0 0 0 0 = 'w/o HierR'")
    g.add_argument("--succ-judge", action="store_true",
                   help="ToolPO's R_succ from the judge's Solved/Unsolved (the paper's main rows) instead of the "
                        "reference rule over the gold calls")
    g.add_argument("--turn-credit", type=num, default=method["turn_credit"], metavar="OMEGA",
                   help="ω of README Eq. 14 (--algo slca only, a project extension): tool turn k's tokens also get "
                        "ω x the group-normalised reward of turn k against gold step k; 0 = SLCA exactly")
    g.add_argument("--decision-credit", choices=method["decision"], default=method["decision"][0],
                   help="who pays the tokens that decide to stop calling (the summary turn's first, README Eq. 15; "
                        "--algo slca only, a project extension): summary = Â_sum, SLCA exactly; tool = Â_tool")
    g.add_argument("--extra-call-cost", type=num, default=method["extra_cost"], metavar="C",
                   help="c of README Eq. 16 (a project extension): each valid call beyond the gold's count costs c "
                        "of S_process in the training reward (score and R_tool; --algo slca or grpo); 0 = HierR exactly")
    g.add_argument("--extra-block-cost", type=num, default=method["block_cost"], metavar="B",
                   help="b of README Eq. 16 (a project extension): each valid <tool_call> block beyond the gold's steps "
                        "(a parallel step split over turns, a turn no step needs) costs b of S_process in the training "
                        "reward, as --extra-call-cost; 0 = HierR exactly")
    g.add_argument("--norm-by-std", action=argparse.BooleanOptionalAction, default=True,
                   help="--no-norm-by-std subtracts the group mean only (Dr. GRPO)")
    g.add_argument("--group-stats", choices=method["stats"], default=method["stats"][0],
                   help="exact = float64, equal rewards give exactly 0, a GRPO group of one gets 0; release = "
                        "the release's float32 torch statistics (sixteen equal 0.9s get a nonzero advantage) and "
                        "verl's mean 0, std 1 for a GRPO group of one")
    g.add_argument("--toolpo-norm-by-std", action="store_true",
                   help="ToolPO divides by the group std too (what the release's ToolPO launchers ran, verl's "
                        "default; the paper says no std, docs/method.md §3.3)")
    g = p.add_argument_group("the episode and its scoring (shared with eval.py toucan; docs/method.md §2, §5, §6)")
    episode_flags(g)
    g = p.add_argument_group("simulator and judge in training")
    g.add_argument("--keep-failed", action="store_true",
                   help="train on rollouts that lost a tool or judge answer to an endpoint failure, as the release "
                        "does (the failure's error text stays in the trajectory, a failed rating scores 0); "
                        "--max-fail-rate still applies")
    g.add_argument("--solved-prompt", metavar="FILE", default=None,
                   help="ToolPO's Solved/Unsolved template, the same placeholders; default: judges.SOLVED_PROMPT")
    g.add_argument("--max-fail-rate", type=num, default=0.5,
                   help="stop when more than this share of a step's rollouts lost a tool or judge answer to an "
                        "endpoint failure (such rollouts are dropped from the loss)")
    g.add_argument("--step-deadline", type=num, default=0,
                   help="seconds within which every simulator and judge request of one RL step returns, sampling "
                        "included; 0 = no shared bound (each request keeps its own --sim-deadline/--judge-deadline)")
    g.add_argument("--max-unscored", type=num, default=UNSCORED,
                   help="the share of RL rows (checked before training) or of a step's answered calls and judged "
                        f"summaries (checked every step; {BLIND_STEPS} such steps in a row stop the run) that the "
                        "simulator could not answer (replay: no record of the row's gold calls; a row that records none) "
                        "or the judge could not rate; 1 = never stop")
    g.add_argument("--judge-noise", type=num, default=0.0, metavar="P",
                   help="the noise control: with probability P an RL summary rating is replaced by a uniform "
                        "level 1..5 (rewards.NoisyJudge); evals keep the clean judge")
    g = p.add_argument_group("run")
    g.add_argument("--out", default=None, help="run folder; default runs/<algo>-s<seed>")
    g.add_argument("--resume", action="store_true", help="continue the run in --out from its latest checkpoint")
    g.add_argument("--overwrite", action="store_true", help="replace the files of an earlier run in --out")
    g.add_argument("--save-every", type=int, default=0,
                   help="checkpoint every N RL steps; 0 = only when stopped by SIGTERM/SIGINT (final/ is always written)")
    g.add_argument("--keep", type=int, default=2, help="checkpoints kept")
    g.add_argument("--max-bad-updates", type=int, default=3, help="non-finite updates in a row before stopping")
    g.add_argument("--seed", type=int, default=0, help="seeds torch and random at start, the RL data order and --judge-noise")
    g.add_argument("--eval-every", type=int, default=None, help="RL steps between evals; 0 = before and after only")
    g.add_argument("--eval-limit", type=int, default=None, help="first N eval prompts")
    g = p.add_argument_group("diagnostics")
    g.add_argument("--show", type=int, default=2, help="decoded rollouts printed per step")
    g.add_argument("--report-to", choices=REPORT_TO, default=REPORT_TO[0],
                   help="also send metrics.jsonl's and eval.jsonl's rows to TensorBoard (<out>/tensorboard) or W&B "
                        "(offline, <out>/wandb; needs wandb installed): sft/<key> at the SFT step, rl/<key> at the "
                        "RL step, eval/<split>/<key> at the RL step of the eval (lib/runs/files.py scalars)")
    g.add_argument("--grad-cosine", action="store_true",
                   help="log the cosine between tool- and summary-segment gradients (2 extra backward passes)")
    preset_help(p)
    bounds_help(p)
    hidden = {dest for dests in HIDDEN.values() for dest in dests.split()}
    for act in p._actions:
        if act.dest in hidden:
            act.shown, act.help = act.help, argparse.SUPPRESS  # --help-all puts it back
    return p


class HelpAll(argparse.Action):
    """--help-all: the help with the HIDDEN flags shown too, in their groups; then exit."""

    def __init__(self, option_strings, dest, help=None):
        super().__init__(option_strings, dest=argparse.SUPPRESS, default=argparse.SUPPRESS, nargs=0, help=help)

    def __call__(self, parser, namespace, values, option_string=None):
        for act in parser._actions:
            if hasattr(act, "shown"):
                act.help = act.shown
        parser.epilog = None
        parser.print_help()
        parser.exit()


def get_args(p, argv, check_episode):
    """The run's config: parser `p`'s flags over their preset file, then check_args."""
    a = with_preset(p, argv, p.parse_args(argv))
    a.out = a.out or f"runs/{a.algo}-s{a.seed}"
    check_args(p, a, check_episode)
    return a


def check_extensions(p, a):
    """The project's credit and reward extensions (README Eqs. 14-16): each with the --algo it needs."""
    for flag, c in (("--extra-call-cost", a.extra_call_cost), ("--extra-block-cost", a.extra_block_cost)):
        if c and a.algo == "toolpo":
            p.error(f"{flag} charges S_process, which --algo toolpo does not train on: use slca or grpo")
    if a.turn_credit and a.algo != "slca":
        p.error(f"--turn-credit is per-turn credit inside SLCA's tool segment: it needs --algo slca, not {a.algo}")
    if a.decision_credit != "summary" and a.algo != "slca":
        p.error(f"--decision-credit {a.decision_credit} moves a token between SLCA's segments: it needs --algo slca, "
                f"not {a.algo}")


def check_args(p, a, check_episode):
    """Fail early, naming the flag."""
    check_bounds(p, a)
    if a.model is not None and a.data is None:
        if a.sft_data is not None or a.eval_data is not None:
            p.error("--data is required when --sft-data or --eval-data is given")
        try:  # the release's splits, from the cache or the hub; else one line naming the download command
            files = release_files()
        except DataError as e:
            p.exit(2, f"{p.prog}: error: --data not given, so the release's data is needed: {e}\n")  # one line, no usage
        a.data, a.eval_data, a.sft_data = files["rl"], files["eval"], files["sft"]
    for flag in ("data", "eval_data", "sft_data"):
        path = getattr(a, flag)
        if path and not os.path.exists(path):
            p.error(f"--{flag.replace('_', '-')}: no such file: {path}")
    if a.prompts_per_step % a.mini_batch:
        p.error("--prompts-per-step must be a multiple of --mini-batch")
    if a.mini_batch % int(os.environ.get("WORLD_SIZE", "1")):
        p.error("--mini-batch must be a multiple of the number of processes (each takes an equal share)")
    if a.sampler == "compiled" and int(os.environ.get("WORLD_SIZE", "1")) > 1:  # its step reads weights, skips hooks
        p.error("--sampler compiled does not run under torchrun (it skips FSDP2's forward hooks): use --sampler cached")
    check_extensions(p, a)
    check_episode(p, a, a.solved_prompt)  # --json-depth, and the frozen LLMs' prompt files read once
    if a.resume and a.overwrite:
        p.error("--resume and --overwrite exclude each other")
    if a.lora_r and int(os.environ.get("WORLD_SIZE", "1")) > 1:
        p.error("--lora-r runs in one process: torchrun (FSDP2) with LoRA is not supported")
    if (a.merge_lora or a.lora_alpha is not None) and not a.lora_r:
        p.error(f"--{'merge-lora' if a.merge_lora else 'lora-alpha'} needs --lora-r")
    if a.lora_r and a.sampler == "compiled":
        p.error("--sampler compiled runs a plain Qwen2's weights, not LoRA's: with --lora-r use cached or generate")
    a.lora_alpha = 2.0 * a.lora_r if a.lora_alpha is None else a.lora_alpha
    if a.report_to != "none" and importlib.util.find_spec(a.report_to) is None:  # the package is the module
        p.error(f"--report-to {a.report_to}: {a.report_to} is not installed (pip install {a.report_to})")


def read_preset(name):
    """The settings of preset `name`: configs/<name>.toml, or the .toml file `name` is a path to."""
    with open(name if name.endswith(".toml") else os.path.join(CONFIGS, f"{name}.toml"), "rb") as f:
        return tomllib.load(f)


def preset_argv(settings, p):
    """`settings` (a preset's) as the flags of parser `p` that set them, one flag a value."""
    flags = {act.dest: act.option_strings for act in p._actions}
    argv = []
    for k, v in settings.items():
        if k not in flags or k in ("model", "preset", "help"):
            p.error(f"--preset: {k!r} is not a flag a preset sets")
        if isinstance(v, bool):
            argv += [flags[k][0 if v else 1]] if v or len(flags[k]) > 1 else []  # the flag, or its negation
        elif isinstance(v, list):
            argv += [flags[k][0], *map(str, v)]
        else:
            argv.append(f"{flags[k][0]}={v}")
    return argv


def with_preset(p, argv, a):
    """Parse `argv` again under the preset `a` (argv's parse) names: default demo without --model,
    paper with one. Refuses a file that cannot be read, a key that is no flag, and leaves no flag
    unset that both shipped presets set."""
    name = a.preset or ("demo" if a.model is None else "paper")
    try:
        settings = read_preset(name)
    except OSError as e:
        p.error(f"--preset {name}: cannot read {e.filename}: {e.strerror} (shipped: {', '.join(sorted(WHY))})")
    except tomllib.TOMLDecodeError as e:
        p.error(f"--preset {name}: not TOML: {e}")
    if a.epochs is not None and a.steps is None:  # --epochs given: the steps follow it, whatever the preset
        settings.pop("steps", None)
    dtype, note = a.dtype or settings.get("dtype"), None
    if dtype == "auto":  # resolved here, so the rule below and the saved config see the dtype that runs
        dtype, note = auto_dtype(a.device)
    if dtype != "float32":  # sampled log-probs carry the decode's own rounding there
        settings["old_logprobs"] = "recompute"
    else:
        settings.setdefault("old_logprobs", "sample")  # in float32 they are exact
    a = p.parse_args(preset_argv(settings, p) + list(sys.argv[1:] if argv is None else argv))
    a.preset, a.dtype_note = name, note
    a.dtype = dtype if note else a.dtype
    need = read_preset("demo").keys() & read_preset("paper").keys()
    for k in sorted(k for k in need if getattr(a, k) is None):
        p.error(f"--preset {name} sets no --{k.replace('_', '-')} and none was given")
    return a


def preset_line(preset, model):
    """The line that says which preset a run reads, and why."""
    default = "demo" if model is None else "paper"
    return f"preset: {preset} ({WHY[default] if preset == default else '--preset'})"


def preset_help(p):
    """Append both shipped presets' value to the help of each flag a preset sets."""
    demo, paper = read_preset("demo"), read_preset("paper")
    for act in p._actions:
        if act.dest in demo.keys() | paper.keys():
            act.help = (act.help + "; " if act.help else "") + \
                f"preset: demo {demo.get(act.dest)}, paper {paper.get(act.dest)}"


def show(p, config, width=118):
    """`config` (a run's flags, a dict) in the groups of parser `p`, a line or a few each; the values
    set outside the table (the prompt templates, each as a short hash of its text) last."""
    def value(k, v):
        if k.endswith("_template"):
            return "sha256:" + hashlib.sha256(v.encode()).hexdigest()[:8]
        return v if isinstance(v, str) and v else json.dumps(v, separators=(",", ":"))
    groups = [(g.title.split(" (")[0], [x.dest for x in g._group_actions]) for g in p._action_groups]
    grouped = {k for _, keys in groups for k in keys}
    groups.append(("other", [k for k in config if k not in grouped]))
    lines = [textwrap.fill("  ".join(f"{k}={value(k, config[k])}" for k in keys if k in config), width,
                           initial_indent=f"{title}: ", subsequent_indent="    ")
             for title, keys in groups if any(k in config for k in keys)]
    return "\n".join(["config (whole in config.json):", *lines])
