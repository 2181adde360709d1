"""The run's settings: train.py's flag table and its checks, a preset file (configs/*.toml) under
the command line's flags, and their compact view printed at start (the whole goes to <out>/config.json).

The flag table follows from settings dataclasses, each owned by the module that uses it (train.TABLE lists
them by group: rewards.HierR, advantage.Credit, loss.Clip, rollout.Episode, ...; the RL loop's, the model's,
the run folder's are here): one flag per field, named as the field, its help, choices, range and default the
field's (`flags`). A knob is one field plus its use. `settings(cls, a)` makes a module's object from the
parsed flags. Each numeric field has a range: `check_bounds` refuses a value outside it (nan and inf included)
in one line naming the flag, before anything loads, and `bounds_help` shows it in --help.

A preset is a plain TOML file of flag values, read as if its flags came first on the command line,
so a flag given always wins: configs/demo.toml without --model, configs/paper.toml with one, or
--preset NAME (a file in configs/) or PATH. Two rules follow the flags given: --epochs without
--steps drops the preset's steps (they follow the epochs); below float32 --old-logprobs is recompute.
--help shows the flags a run usually sets; --help-all shows every flag, the hidden fields' too, in the same groups.
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
import types
import typing
from dataclasses import dataclass, field

from lib.inputs.data import DataError, release_files
from lib.training import lora, tiny
from lib.training.precision import auto_dtype
from lib.frozen import llm
from lib.runs.loop import BLIND_STEPS, UNSCORED
from lib.runs.runfolder import Unusable, read_json

CONFIGS = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "configs")
WHY = {"demo": "no --model; --preset paper for the paper's recipe",           # the default's reason, by --model
       "paper": "a named --model; --preset demo for the demo's settings"}
REPORT_TO = ("none", "tensorboard", "wandb")  # --report-to (lib/runs/files.py Report)


# ---------------------------------------------------------------------------------------------
# train.py's own settings, group by group; the method modules own theirs (rewards.HierR, advantage.Credit, loss.Clip,
# rollout.Episode, lib/training/sft.SFT, eval.Frozen, lib/frozen/llm.Client)
@dataclass(frozen=True)
class Model:
    """The policy and how it is held."""
    model: str | None = field(default=None, metadata={
        "help": "hub name, local folder or .gguf file (dequantized once into ~/.cache/slca-grpo); none = build the "
                "tiny demo model"})
    preset: str | None = field(default=None, metadata={
        "metavar": "NAME|FILE",
        "help": "the settings under the flags: configs/NAME.toml or a .toml file; default: demo without --model, "
                "paper with one (lib/runs/config.py)"})
    dtype: str = field(default="bfloat16", metadata={
        "choices": ("float32", "bfloat16", "float16", "auto"),
        "help": "compute dtype over float32 weights; auto = bfloat16 where the device computes it natively (a GPU, a "
                "CPU with AVX512-BF16 or AMX), else float32 (lib/training/precision.py auto_dtype)"})
    grad_ckpt: bool = field(default=True, metadata={
        "hidden": True,
        "help": "gradient checkpointing"})  # configs/paper.toml's
    device: str | None = field(default=None, metadata={
        "help": "default: cuda (this rank's GPU) if available, else cpu"})
    tiny_size: tuple = field(default=tiny.SIZE, metadata={
        "nargs": 3, "type": int, "metavar": ("HIDDEN", "LAYERS", "HEADS"), "range": "[1, 4096]", "hidden": True,
        "help": "shape of the demo model built when no --model is given"})
    lora_r: int = field(default=0, metadata={
        "range": "[0, 4096]",
        "help": "LoRA rank (lib/training/lora.py): SFT and RL train adapters on a frozen base; 0 = full fine-tuning"})
    lora_alpha: float | None = field(default=None, metadata={
        "range": "(0, 1e6]", "hidden": True,
        "help": "LoRA scale alpha / r; default 2 r (LLaMA-Factory's)"})
    lora_dropout: float = field(default=lora.DROPOUT, metadata={
        "range": "[0, 1)", "hidden": True,
        "help": "dropout on the adapters' input (nonzero: the PPO update samples dropout the old log-probs did not, "
                "so its ratio starts off 1)"})
    lora_targets: tuple = field(default=lora.TARGETS, metadata={
        "nargs": "+", "type": str, "hidden": True,
        "help": "module names given adapters"})
    merge_lora: bool = field(default=False, metadata={
        "hidden": True,
        "help": "also write final/merged: the adapter merged into its base, a whole Hugging Face folder"})


@dataclass(frozen=True)
class Data:
    """The rows: RL prompts, eval prompts, SFT conversations."""
    data: str | None = field(default=None, metadata={
        "help": "RL prompts (.jsonl or .parquet); with --model and no data flags: the release's splits from the "
                "Hugging Face hub"})
    eval_data: str | None = field(default=None, metadata={"help": "eval prompts; '' = no eval"})
    sft_data: str | None = field(default=None, metadata={"help": "SFT conversations; '' = no warm start"})
    skip_bad_rows: bool = field(default=False, metadata={
        "hidden": True,
        "help": "skip malformed rows instead of failing"})


@dataclass(frozen=True)
class RL:
    """The RL loop: steps, batches, the optimizer (the defaults: configs/paper.toml's)."""
    epochs: int = field(default=1, metadata={
        "range": "[1, 1e7]",
        "help": "RL epochs over --data, each in its own seeded order (the release's launchers run 5)"})
    steps: int | None = field(default=None, metadata={
        "range": "[0, 1e7]",
        "help": "RL steps; none = --epochs x prompts // --prompts-per-step (the demo preset's 60 holds unless "
                "--epochs is given; steps past the epochs repeat their order)"})
    group_size: int = field(default=16, metadata={"help": "G rollouts per prompt", "range": "[1, 1e7]"})
    prompts_per_step: int = field(default=128, metadata={"help": "", "range": "[1, 1e7]"})
    mini_batch: int = field(default=32, metadata={
        "range": "[1, 1e7]",
        "help": "prompts per PPO mini-batch (one optimizer step)"})
    micro_batch: int = field(default=8, metadata={
        "range": "[1, 1e7]", "hidden": True,
        "help": "rollouts per forward/backward"})
    ppo_epochs: int = field(default=1, metadata={
        "range": "[1, 1e7]", "hidden": True,
        "help": "passes of PPO updates over each step's rollouts"})
    lr: float = field(default=1e-6, metadata={"help": "", "range": "(0, 1]"})
    weight_decay: float = field(default=0.01, metadata={
        "range": "[0, 1]", "hidden": True,
        "help": "AdamW weight decay of the RL updates"})
    grad_clip: float = field(default=1.0, metadata={
        "range": "(0, 1e6]", "hidden": True,
        "help": "gradient-norm clip of the RL updates"})
    old_logprobs: str = field(default="recompute", metadata={
        "choices": ("sample", "recompute"), "hidden": True,
        "help": "log π_old of Eq. 9: as returned at sampling time, or recomputed by a separate forward pass (the "
                "release's; exact when sampling ran in lower precision than training); recompute whenever --dtype is "
                "not float32"})


@dataclass(frozen=True)
class Guards:
    """The simulator and the judge in training: what a failed answer does, and when a run stops."""
    keep_failed: bool = field(default=False, metadata={
        "hidden": True,
        "help": "train on rollouts that lost a tool or judge answer to an endpoint failure, as the release does (the "
                "failure's error text stays in the trajectory, a failed rating scores 0); --max-fail-rate still "
                "applies"})
    solved_prompt: str | None = field(default=None, metadata={
        "metavar": "FILE", "hidden": True,
        "help": "ToolPO's Solved/Unsolved template, the same placeholders; default: judges.SOLVED_PROMPT"})
    max_fail_rate: float = field(default=0.5, metadata={
        "range": "[0, 1]", "hidden": True,
        "help": "stop when more than this share of a step's rollouts lost a tool or judge answer to an endpoint "
                "failure (such rollouts are dropped from the loss)"})
    step_deadline: float = field(default=0, metadata={
        "range": "[0, 1e6]", "hidden": True,
        "help": "seconds within which every simulator and judge request of one RL step returns, sampling included; 0 "
                "= no shared bound (each request keeps its own --sim-deadline/--judge-deadline)"})
    max_unscored: float = field(default=UNSCORED, metadata={
        "range": "[0, 1]", "hidden": True,
        "help": "the share of RL rows (checked before training) or of a step's answered calls "
                f"and judged summaries (checked every step; {BLIND_STEPS} such steps in a row "
                "stop the run) that the simulator could not answer (replay: no record of the "
                "row's gold calls; a row that records none) or the judge could not rate; "
                "1 = never stop"})
    judge_noise: float = field(default=0.0, metadata={
        "metavar": "P", "range": "[0, 1]",
        "help": "the noise control: with probability P an RL summary rating is replaced by a uniform level 1..5 "
                "(rewards.NoisyJudge); evals keep the clean judge"})


@dataclass(frozen=True)
class Run:
    """The run folder, its checkpoints and evals."""
    out: str | None = field(default=None, metadata={"help": "run folder; default runs/<algo>-s<seed>"})
    resume: bool = field(default=False, metadata={"help": "continue the run in --out from its latest checkpoint"})
    overwrite: bool = field(default=False, metadata={"help": "replace the files of an earlier run in --out"})
    save_every: int = field(default=0, metadata={
        "range": "[0, 1e7]",
        "help": "checkpoint every N RL steps; 0 = only when stopped by SIGTERM/SIGINT (final/ is always written)"})
    keep: int = field(default=2, metadata={"help": "checkpoints kept", "range": "[1, 1e7]", "hidden": True})
    max_bad_updates: int = field(default=3, metadata={
        "range": "[1, 1e7]", "hidden": True,
        "help": "non-finite updates in a row before stopping"})
    seed: int = field(default=0, metadata={
        "range": "[0, 4294967295]",
        "help": "seeds torch and random at start, the RL data order and --judge-noise"})  # what every seeded generator takes
    eval_every: int = field(default=50, metadata={
        "range": "[0, 1e7]",
        "help": "RL steps between evals; 0 = before and after only"})
    eval_limit: int | None = field(default=500, metadata={
        "range": "[0, 1e7]",
        "help": "first N eval prompts"})  # eval_*: configs/paper.toml's


@dataclass(frozen=True)
class Diagnostics:
    """What a run shows and logs beyond its metrics."""
    show: int = field(default=2, metadata={
        "range": "[0, 1e7]", "hidden": True,
        "help": "decoded rollouts printed per step"})
    report_to: str = field(default=REPORT_TO[0], metadata={
        "choices": REPORT_TO,
        "help": "also send metrics.jsonl's and eval.jsonl's rows to TensorBoard (<out>/tensorboard) or W&B (offline, "
                "<out>/wandb; needs wandb installed): sft/<key> at the SFT step, rl/<key> at the RL step, "
                "eval/<split>/<key> at the RL step of the eval (lib/runs/files.py scalars)"})
    grad_cosine: bool = field(default=False, metadata={
        "help": "log the cosine between tool- and summary-segment gradients (2 extra backward passes)"})


# ---------------------------------------------------------------------------------------------
# the flag table, generated from the settings dataclasses
@dataclass(frozen=True)
class Part:
    """Some fields of a settings dataclass in a group of the flag table: `only` these (all if empty) but those in
    `skip`, each flag --{prefix}{name} (a frozen LLM's role, "sim_": --sim-url), `defaults` overriding the fields' own.
    A field added to the dataclass is a flag of every group that does not name its fields with `only`."""
    cls: type
    only: tuple = ()
    skip: tuple = ()
    prefix: str = ""
    defaults: dict = field(default_factory=dict)


def flags(g, part, preset_keys=()):
    """Add to argparse group `g` one flag per field of `part` (a Part, or a dataclass for all its fields), dest =
    prefix + name: float fields finite (`num`), a bool a switch (negatable where the default is True or a preset
    sets it), a field a shipped preset sets (`preset_keys`) defaulting to None (the preset fills it), the rest to the
    field's default. Skips a dest the parser has already (λ_tool sets Eqs. 4 and 8: rewards.HierR, advantage.Credit)."""
    part = part if isinstance(part, Part) else Part(part)
    seen = {act.dest for act in g._actions}
    for f in dataclasses.fields(part.cls):
        dest = part.prefix + f.name
        if (part.only and f.name not in part.only) or f.name in part.skip or dest in seen:
            continue
        meta, kind = f.metadata, plain_type(f.type)
        default = part.defaults.get(f.name, f.default)
        kw = {"dest": dest, "help": meta["help"].replace("{ENV}", f"SLCA_{dest.upper()}") or None,
              "default": None if dest in preset_keys else list(default) if isinstance(default, tuple) else default}
        if kind is bool:
            kw["action"] = argparse.BooleanOptionalAction if default is True or dest in preset_keys else "store_true"
        else:
            item = meta.get("type", kind)
            kw.update(type=num if item is float else item if item is int else None, nargs=meta.get("nargs"),
                      choices=meta.get("choices"), metavar=meta.get("metavar"))
        act = g.add_argument("--" + dest.replace("_", "-"),
                             **{k: v for k, v in kw.items() if v is not None or k == "default"})
        act.range, act.hidden = meta.get("range"), meta.get("hidden", False)


def client_part(role):
    """A frozen LLM's flags (lib.frozen.llm.Client's fields) for `role`: --{role}-url, ... (sim and judge: also
    --{role}-max-tokens, the in-process cap; the agent and user roles have their own budget flags in bench)."""
    only = tuple(f for f in llm.CLIENT_FIELDS if f != "max_tokens" or role in ("sim", "judge"))
    return Part(llm.Client, only=only, prefix=f"{role}_", defaults={"retries": llm.RETRIES.get(role, 2)})


def plain_type(t):
    """The type of a field's annotation, its None dropped (`str | None` is str)."""
    args = [x for x in typing.get_args(t) if x is not type(None)]
    return args[0] if isinstance(t, types.UnionType) and len(args) == 1 else t


def settings(cls, values, prefix=""):
    """Settings dataclass `cls` (advantage.Credit, loss.Clip, ...) from a run's flags (a namespace, or a dict such as
    its config.json): each field from the value of the same name (after `prefix`, a Part's), a missing one its default."""
    values = values if isinstance(values, dict) else vars(values)
    return cls(**{f.name: values[prefix + f.name] for f in dataclasses.fields(cls) if prefix + f.name in values})


def num(text):
    """argparse type: a finite float (nan and inf are refused, naming the flag)."""
    x = float(text)
    if not math.isfinite(x):
        raise argparse.ArgumentTypeError(f"not a finite number: {text!r}")
    return x


def outside(bound, x):
    """What range `bound` ("(0, 1]") asks ("must be > 0 and <= 1") when x lies outside it (nan does), else ""."""
    low, high = (v.strip() for v in bound[1:-1].split(","))
    shut = bound[0] == "[", bound[-1] == "]"  # closed at each end
    if (float(low) <= x if shut[0] else float(low) < x) and (x <= float(high) if shut[1] else x < float(high)):
        return ""
    return f"must be {'>=' if shut[0] else '>'} {low} and {'<=' if shut[1] else '<'} {high}"


def field_range(cls, name):
    """The range settings dataclass `cls` gives its field `name` (its flag's)."""
    return next(f.metadata["range"] for f in dataclasses.fields(cls) if f.name == name)


def bound(act, rng):
    """A flag made by hand (`act`, an argparse action) given range `rng`, as a field's flag has it; returns it."""
    act.range = rng
    return act


def all_actions(p):
    """Parser `p`'s flags, its subcommands' too."""
    out = list(p._actions)
    for act in p._actions:
        if isinstance(act, argparse._SubParsersAction):
            out += [x for sub in act.choices.values() for x in all_actions(sub)]
    return out


def check_bounds(p, a):
    """Each value of a numeric flag in namespace `a` (each of a list's; None is unset) within its range;
    else parser `p`'s error, one line naming the flag, its range and the value."""
    for act in all_actions(p):
        value = getattr(a, act.dest, None) if getattr(act, "range", None) else None
        for x in value if isinstance(value, list) else [] if value is None else [value]:
            if why := outside(act.range, x):
                p.error(f"{act.option_strings[0]} {why}, not {x}")


def bounds_help(p):
    """Append each bounded flag's range to its help."""
    for act in p._actions:
        if getattr(act, "range", None):
            act.help = (act.help + "; " if act.help else "") + f"in {act.range}"


def parser(table):
    """The flag table: `table` is [(group title, [settings dataclass or Part, ...])] (train.TABLE), one group of
    flags each, made by `flags` from the fields: each default the field's, or None where a shipped preset sets it."""
    p = argparse.ArgumentParser(description="SLCA-GRPO training", formatter_class=argparse.ArgumentDefaultsHelpFormatter,
                                epilog="These are the flags a run usually sets; --help-all shows every flag.")
    p.add_argument("--help-all", action=HelpAll, help="show every flag (those a preset sets, those restoring the "
                                                      "release's behaviour, the operational ones) and exit")
    keys = read_preset("demo").keys() | read_preset("paper").keys()
    for title, parts in table:
        g = p.add_argument_group(title)
        for part in parts:
            flags(g, part, keys)
    preset_help(p)
    bounds_help(p)
    for act in p._actions:
        if getattr(act, "hidden", False):
            act.shown, act.help = act.help, argparse.SUPPRESS  # --help-all puts it back
    return p


class HelpAll(argparse.Action):
    """--help-all: the help with the hidden fields' flags shown too, in their groups; then exit."""

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
    """The run's config: parser `p`'s flags over their preset file, or with --resume over the config.json of the run
    it continues (so `--out DIR --resume` alone continues it as it was started; a flag given still wins, and
    lib/runs/runfolder.py check_resume refuses one that changes the run); then check_args."""
    first = p.parse_args(argv)
    if saved := saved_config(p, first):
        p.set_defaults(**saved)
        a = p.parse_args(argv)
        a.dtype_note = None
    else:
        a = with_preset(p, argv, first)
    a.out = a.out or f"runs/{a.algo}-s{a.seed}"
    check_args(p, a, check_episode)
    return a


def saved_config(p, a):
    """With --resume, the flags of parser `p` saved in the config.json of --out (default runs/<algo>-s<seed>);
    {} otherwise, or when there is none to read (train.py then names what is missing, in one line)."""
    if not a.resume:
        return {}
    try:
        saved = read_json(os.path.join(a.out or f"runs/{a.algo}-s{a.seed}", "config.json"))
    except Unusable:
        return {}
    dests = {act.dest for act in p._actions} - {"resume", "overwrite"} - ({"lora_alpha"} if not saved.get("lora_r") else set())
    return {k: v for k, v in saved.items() if k in dests}  # lora_alpha without LoRA: check_args' 2 r = 0, not a flag given


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
        p.error("--sampler compiled runs a plain Qwen2's or Llama's weights, not LoRA's: with --lora-r use cached or generate")
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
