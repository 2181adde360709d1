"""Train a tool-calling policy with SLCA-GRPO (or GRPO, or ToolPO): one linear loop.

    python train.py                                        # the embedded demo, minutes on a CPU
    python train.py --model Qwen/Qwen2.5-3B-Instruct --sim-url URL --judge-url URL  # the paper's recipe, the release's data
    torchrun --nproc_per_node 8 train.py --model Qwen/Qwen2.5-3B-Instruct   # the same, FSDP2 over 8 GPUs
    python train.py --out runs/slca-s0 --resume            # continue a run from its latest checkpoint

Stages (docs/method.md §7):
1. optional SFT warm start (lib/sft.py): cross-entropy on assistant tokens only, cosine lr with warmup; its
   result is saved to <out>/sft before RL starts, so a resumed run skips it;
2. RL, per step: G rollouts for each of the step's prompts (rollout.py) -> HierR scores
   (rewards.py, Eqs. 2-5) -> advantages (advantage.py: `--algo slca`, Eqs. 7-8, with `--turn-credit`
   Eq. 14, `grpo`, Eq. 6, or `toolpo`, Eq. 13) -> old and reference log-probs -> PPO mini-batches with
   gradient accumulation (loss.py, Eqs. 9-12) -> AdamW step per mini-batch -> log -> eval -> checkpoint.

The file, in reading order: the presets and the flag table (get_args, check_args: the run's whole
config, one flag a line, about 170 lines; the flags an eval shares are eval.add_episode_flags), the
RL step (rl_step and the three passes it calls, about 150 lines), and the run (main, run and the
start, eval and log helpers, about 170 lines).

Per-turn credit (`--turn-credit ω`, README Eq. 14, slca only, off by default). The tool turns of a
rollout are its assistant turns but the last (the summary, Eq. 1); each is scored against its gold
step (rewards.turn_rewards) and normalised over the group's rollouts that have that turn. A rollout
whose loss mask does not hold one run per turn (dropped, or a turn that sampled no token) has no
turn present. Whatever the algorithm and ω, every RL step logs `turn_conflict`: among the tool turns
with a nonzero per-turn advantage, the share whose sign is opposite to their rollout's SLCA tool
advantage Â^tool (0 when there is none); rollouts.jsonl holds each rollout's turn rewards (`r_turn`).

With no --model the run builds the embedded default: a tokenizer trained on the shipped tool
world and a tiny random Qwen2 (lib/tiny.py), then runs SFT, SLCA-GRPO and a before/after eval,
with settings sized for a 2-core CPU (configs/demo.toml). Naming a --model switches the preset to the paper's
recipe (configs/paper.toml: bf16, gradient checkpointing, G = 16, 128 prompts per step, lr 1e-6, one RL epoch,
SFT without weight decay, the release's loss aggregation, turn caps and schema check) and, without
data flags, to the release's data splits (data/*.parquet of the Hugging Face dataset, lib.data.release_files).
Flags always win over the preset; the resolved config is printed and saved whole (config.json), then
one line says which stages run and their sizes (`plan`).

No reward that cannot be earned (check_rewards, before anything is written or trained): the release's
rows carry no recorded tool responses and no reference facts, so without --sim-url/--sim-model and
--judge-url/--judge-model (the replay simulator and the facts judge) every call would be answered
"no matching record" and every summary score 0; more than --max-unscored of the rows that call tools
in that state is refused in one line naming those flags. Each RL step logs the same two shares over its
own rollouts (replay_miss, unrated); BLIND_STEPS steps in a row over --max-unscored stop the run.

Safety (the policy is an adversary): a rollout whose tool call or judge failed at the transport
level is dropped from the loss (--keep-failed trains on it, as the release does) and counted,
and the step stops past --max-fail-rate; the loss and the gradient norm are checked before
every optimizer step, a non-finite update is skipped and counted, --max-bad-updates in a row
stop the run, and non-finite weights are never saved.
Logs are strict JSON (a non-finite number is written as null).

Distributed (torchrun, one or several nodes; lib/parallel.py): each rank takes an equal share of
the step's prompts with all G rollouts of each, so group statistics stay local; policy and
reference are sharded with FSDP2 (one unit per decoder layer) and gathered whole on each rank to
sample. The loss normaliser, gradients, metrics, eval scores and rollout records cross ranks;
rank 0 alone prints and writes.

Outputs in --out: config.json, metrics.jsonl (one line per SFT and RL step), rollouts.jsonl
(every rollout), eval.jsonl (the before/after-RL rows: eval.evaluate, which `python eval.py
toucan --model <out>/final` reruns with this config), sft/, ckpt/step-N/ (the last --keep
checkpoints: weights, optimizer, RNG states, data order and position, log lengths, config; under
torchrun the weights and optimizer as one shard per rank, ckpt/step-N/shards/), tensorboard/ or
wandb/ (--report-to: the metrics and eval rows again) and final/ (a Hugging Face folder). A
non-empty --out needs --resume (continue from the newest checkpoint that reads back, each log
cut back to its length there; a finished run says so) or --overwrite. One run at a time holds --out. SIGTERM or SIGINT finishes the current RL step,
checkpoints and exits with 128 + the signal (during SFT: abandons it; --resume redoes it); a
damaged checkpoint falls back to the one before it; a failed write is one line naming the path.
At one thread a run is bit-reproducible and a resumed run ends with the bits of an
uninterrupted one (tests/test_resume.py; docs/scaling.md "Reproducibility").
LoRA (--lora-r N, lib/lora.py; one process): SFT trains an adapter that is then merged into the float32
base and saved as <out>/sft; RL trains a fresh adapter on that, and the reference is the same weights with
the adapter off (peft's disable_adapter): the SFT policy exactly, no second copy. Checkpoints hold the adapter
and its optimizer; final/ is the adapter (peft's layout, pointing at ../sft), final/merged with --merge-lora.
Log-probs (lib/logprobs.py) are computed on response tokens only, in chunks, and the G rollouts
of a prompt compute it once in every log-prob pass.
"""
import argparse
import importlib.util
import math
import os
import random
import sys
import time

import torch
import torch.distributed as dist
from tqdm import tqdm

import rewards
from rewards import score_rollouts
from advantage import ALGOS, STATS, TURN_CREDIT, seg_stats, token_advantages, turn_stats
from loss import AGGS, CLIP_C, CLIP_EPS, KL_BETA, grad_cosine, normaliser, policy_loss
from rollout import TEMPERATURE, collate, prompt_ids, rollout
from simulator import unrecorded
from eval import add_episode_flags, check_episode_flags, evaluate, format_table, frozen_llms, metrics
from lib import config, llm, lora, tiny
from lib.data import TURNS, DataError, data_order, drop_long, load_sft, load_tasks, release_files
from lib.files import Logs
from lib.logprobs import NO_GRAD_ROWS, micro_batches, token_logprobs
from lib.model import load_policy
from lib.optim import optimizer_step
from lib.parallel import (all_sum, autocast, barrier, cast_once, check_folder, deterministic, gather, gathered,
                          lock, open_run, rank_prompts, read_json, resume_point, save_checkpoint,
                          save_final, set_rng_state, setup_dist, shard, stop_if_asked, stop_requests, world, writing)
from lib.sft import SFTConfig, warm_start
from lib.text import set_json_depth, take_unencodable
from lib.threads import Threads

# ---------------------------------------------------------------------------------------------
# The config is the flag table below (get_args), grouped under headers, over a preset file (lib/config.py,
# configs/demo.toml without --model, configs/paper.toml with one); the resolved flags are printed and saved
# whole to <out>/config.json (and in every checkpoint).
STOPS = ("done", "no_call", "turns", "tool_rounds", "length")  # rollout.py's stop reasons
SCORE_KEYS = ("format", "name", "key", "value", "parallel", "process", "summary", "score", "omission",
              "r_tool", "r_sum", "tool_turns", "length")  # per-rollout scores averaged into each RL step's metrics
LOGS = ("metrics", "rollouts", "eval")  # <out>/<name>.jsonl
UNSCORED = 0.5   # --max-unscored: "most" RL rows, calls or summaries that cannot earn a reward stop the run
BLIND_STEPS = 3  # RL steps in a row over --max-unscored before the run stops (as --max-bad-updates' default)
FIX = {"sim": "serve a simulator and pass --sim-url URL --sim-model NAME (or --sim-model FOLDER, in-process)",
       "judge": "serve a judge and pass --judge-url URL --judge-model NAME (or --judge-model FOLDER, in-process)"}
REPORT_TO = ("none", "tensorboard", "wandb")  # --report-to (lib/files.py Report)


def num(text):
    """argparse type: a finite float (nan and inf are refused, naming the flag)."""
    x = float(text)
    if not math.isfinite(x):
        raise argparse.ArgumentTypeError(f"not a finite number: {text!r}")
    return x


def parser():
    """The flag table: the run's whole config, one flat list grouped under headers (model, data, SFT,
    RL, loss, rewards and advantages, simulator and judge, run), each default taken from the module
    that owns it, or None where a preset file sets it. Long because it is the table, one flag a line."""
    p = argparse.ArgumentParser(description="SLCA-GRPO training", formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    g = p.add_argument_group("model")
    g.add_argument("--model", default=None, help="hub name, local folder or .gguf file (dequantized once into "
                                                 "~/.cache/slca-grpo); none = build the tiny demo model")
    g.add_argument("--preset", default=None, metavar="NAME|FILE",
                   help="the settings under the flags: configs/NAME.toml or a .toml file; default: demo without "
                        "--model, paper with one (lib/config.py)")
    g.add_argument("--dtype", choices=["float32", "bfloat16", "float16"], default=None)
    g.add_argument("--grad-ckpt", action=argparse.BooleanOptionalAction, default=None, help="gradient checkpointing")
    g.add_argument("--device", default=None, help="default: cuda (this rank's GPU) if available, else cpu")
    g.add_argument("--tiny-size", type=int, nargs=3, default=list(tiny.SIZE), metavar=("HIDDEN", "LAYERS", "HEADS"),
                   help="shape of the demo model built when no --model is given")
    g.add_argument("--lora-r", type=int, default=0, help="LoRA rank (lib/lora.py): SFT and RL train adapters on a "
                                                         "frozen base; 0 = full fine-tuning")
    g.add_argument("--lora-alpha", type=num, default=None, help="LoRA scale alpha / r; default 2 r (LLaMA-Factory's)")
    g.add_argument("--lora-dropout", type=num, default=lora.DROPOUT, help="dropout on the adapters' input")
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
    g.add_argument("--algo", choices=ALGOS, default=ALGOS[0],
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
    g.add_argument("--ppo-epochs", type=int, default=1)
    g.add_argument("--lr", type=num, default=None)
    g.add_argument("--weight-decay", type=num, default=0.01, help="AdamW weight decay of the RL updates")
    g.add_argument("--grad-clip", type=num, default=1.0)
    g.add_argument("--temperature", type=num, default=TEMPERATURE, help="rollout sampling temperature")
    g.add_argument("--max-tokens", type=int, default=None, help="response tokens per trajectory, observations included")
    g.add_argument("--gen-batch", type=int, default=None,
                   help="rollouts sampled together through all their turns; a multiple of G prefills each prompt once")
    g.add_argument("--old-logprobs", choices=["sample", "recompute"], default=None,
                   help="log π_old of Eq. 9: as returned at sampling time, or recomputed by a separate forward pass "
                        "(the release's; exact when sampling ran in lower precision than training); recompute "
                        "whenever --dtype is not float32")
    g = p.add_argument_group("loss (docs/method.md §4)")
    g.add_argument("--loss-agg", choices=AGGS, default=AGGS[1],
                   help="seq-mean-token-mean = what the released run computed (one rollout per micro-batch): a mean "
                        "over rollouts of per-rollout token means; token-mean = one mean over the mini-batch's tokens")
    g.add_argument("--clip-eps", type=num, default=CLIP_EPS)
    g.add_argument("--clip-c", type=num, default=CLIP_C, help="dual-clip constant")
    g.add_argument("--kl-beta", type=num, default=KL_BETA, help="0 drops the reference model")
    g = p.add_argument_group("rewards and advantages (docs/method.md §2-3)")
    g.add_argument("--lam-tool", type=num, default=rewards.LAM, help="λ_tool of Eqs. 4 and 8")
    g.add_argument("--lam-sum", type=num, default=rewards.LAM, help="λ_sum of Eqs. 4 and 8")
    g.add_argument("--hierr-weights", type=num, nargs=5, default=list(rewards.WEIGHTS.values()),
                   metavar=("FORMAT", "NAME", "KEY", "VALUE", "PARALLEL"), help="Eq. 2's; 0 0 0 0 0 = 'w/o HierR'")
    g.add_argument("--succ-judge", action="store_true",
                   help="ToolPO's R_succ from the judge's Solved/Unsolved (the paper's main rows) instead of the "
                        "reference rule over the gold calls")
    g.add_argument("--turn-credit", type=num, default=TURN_CREDIT, metavar="OMEGA",
                   help="ω of README Eq. 14 (--algo slca only, a project extension): tool turn k's tokens also get "
                        "ω x the group-normalised reward of turn k against gold step k; 0 = SLCA exactly")
    g.add_argument("--norm-by-std", action=argparse.BooleanOptionalAction, default=True,
                   help="--no-norm-by-std subtracts the group mean only (Dr. GRPO)")
    g.add_argument("--group-stats", choices=STATS, default=STATS[0],
                   help="exact = float64, equal rewards give exactly 0, a GRPO group of one gets 0; release = "
                        "the release's float32 torch statistics (sixteen equal 0.9s get a nonzero advantage) and "
                        "verl's mean 0, std 1 for a GRPO group of one")
    g.add_argument("--toolpo-norm-by-std", action="store_true",
                   help="ToolPO divides by the group std too (what the release's ToolPO launchers ran, verl's "
                        "default; the paper says no std, docs/method.md §3.3)")
    g = p.add_argument_group("the episode and its scoring (shared with eval.py toucan; docs/method.md §2, §5, §6)")
    add_episode_flags(g)
    g = p.add_argument_group("simulator and judge in training")
    g.add_argument("--keep-failed", action="store_true",
                   help="train on rollouts that lost a tool or judge answer to an endpoint failure, as the release "
                        "does (the failure's error text stays in the trajectory, a failed rating scores 0); "
                        "--max-fail-rate still applies")
    g.add_argument("--solved-prompt", metavar="FILE", default=None,
                   help="ToolPO's Solved/Unsolved template, the same placeholders; default: llm.SOLVED_PROMPT")
    g.add_argument("--max-fail-rate", type=num, default=0.5,
                   help="stop when more than this share of a step's rollouts lost a tool or judge answer to an "
                        "endpoint failure (such rollouts are dropped from the loss)")
    g.add_argument("--step-deadline", type=num, default=0,
                   help="seconds within which every simulator and judge request of one RL step returns, sampling "
                        "included; 0 = no shared bound (each request keeps its own --sim-deadline/--judge-deadline)")
    g.add_argument("--max-unscored", type=num, default=UNSCORED,
                   help="the share of RL rows (checked before training) or of a step's answered calls and judged "
                        f"summaries (checked every step; {BLIND_STEPS} such steps in a row stop the run) that the "
                        "simulator could not answer (replay: no record of the row's gold calls, of the called tool) "
                        "or the judge could not rate; 1 = never stop")
    g.add_argument("--judge-noise", type=num, default=0.0, metavar="P",
                   help="the noise control: with probability P an RL summary rating is replaced by a uniform "
                        "level 1..5 (rewards.NoisyJudge); evals keep the clean judge")
    g = p.add_argument_group("run")
    g.add_argument("--out", default=None, help="run folder; default runs/<algo>-s<seed>")
    g.add_argument("--resume", action="store_true", help="continue the run in --out from its latest checkpoint")
    g.add_argument("--overwrite", action="store_true", help="replace the files of an earlier run in --out")
    g.add_argument("--save-every", type=int, default=0, help="checkpoint every N RL steps; 0 = only when stopped by SIGTERM/SIGINT (final/ is always written)")
    g.add_argument("--keep", type=int, default=2, help="checkpoints kept")
    g.add_argument("--max-bad-updates", type=int, default=3, help="non-finite updates in a row before stopping")
    g.add_argument("--seed", type=int, default=0)
    g.add_argument("--eval-every", type=int, default=None, help="RL steps between evals; 0 = before and after only")
    g.add_argument("--eval-limit", type=int, default=None, help="first N eval prompts")
    g.add_argument("--show", type=int, default=2, help="decoded rollouts printed per step")
    g.add_argument("--report-to", choices=REPORT_TO, default=REPORT_TO[0],
                   help="also send metrics.jsonl's and eval.jsonl's rows to TensorBoard (<out>/tensorboard) or W&B "
                        "(offline, <out>/wandb; needs wandb installed): sft/<key> at the SFT step, rl/<key> at the "
                        "RL step, eval/<split>/<key> at the RL step of the eval (lib/files.py scalars)")
    g.add_argument("--grad-cosine", action="store_true",
                   help="log the cosine between tool- and summary-segment gradients (2 extra backward passes)")
    config.preset_help(p)
    return p


def get_args(argv=None):
    """The run's config: the flag table over its preset (lib/config.py), then check_args."""
    p = parser()
    a = config.with_preset(p, argv, p.parse_args(argv))
    a.out = a.out or f"runs/{a.algo}-s{a.seed}"
    check_args(p, a)
    return a


def check_args(p, a):
    """Fail early, naming the flag."""
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
    for flag in ("group_size", "prompts_per_step", "mini_batch", "micro_batch", "max_tokens", "max_turns",
                 "max_prompt_tokens", "keep", "max_bad_updates", "ppo_epochs", "epochs"):
        if getattr(a, flag) < 1:
            p.error(f"--{flag.replace('_', '-')} must be >= 1")
    if a.step_deadline < 0:
        p.error("--step-deadline must be >= 0")
    if not 0 <= a.max_unscored <= 1:
        p.error("--max-unscored must be in [0, 1]")
    if a.sft_tokens is not None and a.sft_tokens < 1:
        p.error("--sft-tokens must be >= 1")
    for flag in ("max_tool_rounds", "save_every", "sft_limit", "steps", "eval_limit"):
        if getattr(a, flag) is not None and getattr(a, flag) < 0:
            p.error(f"--{flag.replace('_', '-')} must be >= 0")
    if a.prompts_per_step % a.mini_batch:
        p.error("--prompts-per-step must be a multiple of --mini-batch")
    if a.mini_batch % int(os.environ.get("WORLD_SIZE", "1")):
        p.error("--mini-batch must be a multiple of the number of processes (each takes an equal share)")
    if a.sampler == "compiled" and int(os.environ.get("WORLD_SIZE", "1")) > 1:  # its step reads weights, skips hooks
        p.error("--sampler compiled does not run under torchrun (it skips FSDP2's forward hooks): use --sampler cached")
    if a.sft_weight_decay < 0:
        p.error("--sft-weight-decay must be >= 0")
    if a.turn_credit < 0:
        p.error("--turn-credit must be >= 0")
    if a.turn_credit and a.algo != "slca":
        p.error(f"--turn-credit is per-turn credit inside SLCA's tool segment: it needs --algo slca, not {a.algo}")
    check_episode_flags(p, a, a.solved_prompt)  # --json-depth, and the frozen LLMs' prompt files read once
    if any(w < 0 for w in a.hierr_weights):
        p.error("--hierr-weights must be >= 0")
    if a.resume and a.overwrite:
        p.error("--resume and --overwrite exclude each other")
    if a.lora_r < 0:
        p.error("--lora-r must be >= 0")
    if a.lora_r and int(os.environ.get("WORLD_SIZE", "1")) > 1:
        p.error("--lora-r runs in one process: torchrun (FSDP2) with LoRA is not supported")
    if (a.merge_lora or a.lora_alpha is not None) and not a.lora_r:
        p.error(f"--{'merge-lora' if a.merge_lora else 'lora-alpha'} needs --lora-r")
    if a.lora_r and a.sampler == "compiled":
        p.error("--sampler compiled runs a plain Qwen2's weights, not LoRA's: with --lora-r use cached or generate")
    if not 0 <= a.lora_dropout < 1:
        p.error("--lora-dropout must be in [0, 1)")
    a.lora_alpha = 2.0 * a.lora_r if a.lora_alpha is None else a.lora_alpha
    if a.report_to != "none" and importlib.util.find_spec(a.report_to) is None:  # the package is the module
        p.error(f"--report-to {a.report_to}: {a.report_to} is not installed (pip install {a.report_to})")


def sft_config(a):
    """The warm start's settings (lib/sft.py) from the flags."""
    return SFTConfig(a.sft_epochs, a.sft_lr, a.sft_batch, a.sft_max_len, a.sft_warmup, a.sft_weight_decay,
                     a.micro_batch, a.grad_clip, a.max_bad_updates, a.seed, a.device, a.sft_tokens)


# ---------------------------------------------------------------------------------------------
# the RL step: rollouts -> rewards -> advantages -> old and reference log-probs -> PPO update
def backward(model, batch, idx, old, ref, A, mask_key, norm, a):
    """Accumulate the gradient of the loss (Eqs. 9-12) over rows `idx`, counting only the
    tokens of `mask_key`; `norm` is the mini-batch's N (loss.normaliser, summed over ranks).
    FSDP averages gradients over ranks, so each rank's loss is scaled by the world size.
    Returns the stats summed over micro-batches."""
    stats = {}
    for rows, mb in micro_batches(batch, idx, a.micro_batch, a.group_size):
        L = mb["input_ids"].shape[1]
        lp = token_logprobs(model, mb["input_ids"], mb["attention_mask"], mb["response_mask"],
                            groups=torch.tensor(rows) // a.group_size)      # each prompt runs once
        loss, st = policy_loss(lp, old[rows, :L], ref[rows, :L] if ref is not None else None,
                               A[rows, :L], mb[mask_key], norm, a.clip_eps, a.clip_c, a.kl_beta, a.loss_agg)
        (loss * world()).backward()
        st["loss"] = loss.item()
        for k, v in st.items():
            stats[k] = stats.get(k, 0.0) + v
    return stats


def ppo_update(model, opt, batch, old, ref, A, a, bad):
    """PPO on one rollout batch (this rank's rows, G per prompt): one optimizer step per
    mini-batch of prompts, `ppo_epochs` passes. Returns (stats summed over updates, bad count)."""
    model.train()
    B = len(batch["input_ids"])
    per_mb = a.mini_batch // world() * a.group_size                         # rows of one mini-batch here
    stats = {"loss": 0.0, "grad_norm": 0.0, "skipped": 0, "updates": 0}
    for epoch in range(a.ppo_epochs):
        for s in range(0, B, per_mb):
            idx = list(range(s, min(s + per_mb, B)))
            if a.grad_cosine and epoch == 0 and s == 0:
                stats["grad_cosine"] = grad_cosine(model, lambda key: backward(
                    model, batch, idx, old, ref, A, key, normaliser(batch[key][idx], a.loss_agg), a))
            st = backward(model, batch, idx, old, ref, A, "response_mask",
                          normaliser(batch["response_mask"][idx], a.loss_agg), a)
            loss = all_sum(st.pop("loss"))
            bad, norm, stepped = optimizer_step(model, opt, loss, a.grad_clip, a.max_bad_updates, bad)
            for k, v in st.items():
                stats[k] = stats.get(k, 0.0) + v
            stats["loss"] += loss
            stats["grad_norm"] += norm
            stats["skipped"] += not stepped
            stats["updates"] += 1
    return stats, bad


def old_and_ref_logprobs(model, ref, batch, a):
    """log π_old of Eq. 9 (as sampled, or recomputed with --old-logprobs recompute) and log π_ref
    of Eq. 11 (None without a reference), each (B, L), before any update. Pops batch["logprobs"]."""
    G = a.group_size
    old = batch.pop("logprobs").float() * batch["response_mask"]                    # (B, L)
    refl = torch.zeros_like(old) if ref is not None else None
    with torch.no_grad():  # each prompt once; the responses in passes of similar length, NO_GRAD_ROWS rows at most
        for rows, mb in micro_batches(batch, list(range(len(old))), max(a.micro_batch, G), G):
            L, groups = mb["input_ids"].shape[1], torch.tensor(rows) // G
            x = (mb["input_ids"], mb["attention_mask"], mb["response_mask"])
            if a.old_logprobs == "recompute":
                old[rows, :L] = token_logprobs(model, *x, groups=groups, rows=NO_GRAD_ROWS)
            if ref is not None:
                with lora.adapters_off(ref):  # with LoRA, ref is the policy itself: its adapters off
                    refl[rows, :L] = token_logprobs(ref, *x, groups=groups, rows=NO_GRAD_ROWS)
    return old, refl


def rl_step(model, ref, tok, opt, tasks, group_ids, sim, judge, a, step, bad):
    """One rollout batch (this rank's prompts, G rollouts each) and its PPO update. Returns
    (metrics over all ranks, rollouts, scores, per-turn rewards, (adv_tool, adv_sum), bad-update count)."""
    G = a.group_size
    groups = [g for g in group_ids for _ in range(G)]
    model.eval()
    take_unencodable()  # from here on: this step's text (prompts, observations)
    t0 = time.time()
    # one process below float32: sampling and the old log-probs read one cast of the weights, made here from
    # this step's weights and freed before the update (lib.parallel.cast_once; FSDP2 gathers them in bf16)
    with cast_once(model, a.dtype):
        with gathered(model):
            rs = rollout(model, tok, [t for t in tasks for _ in range(G)], sim, groups, a.temperature, a.max_turns,
                         a.max_tokens, a.gen_batch, max_tool_rounds=a.max_tool_rounds or None,
                         sampler=a.sampler)
        t_roll = time.time() - t0
        weights = dict(zip(rewards.WEIGHTS, a.hierr_weights))                                # Eq. 2's
        scores = score_rollouts(rs, judge, weights, a.lam_tool, a.lam_sum, strict=a.strict_calls,
                                succ_judge=a.succ_judge and a.algo == "toolpo", gate=a.summary_gate, tok=tok,
                                reward_input=a.reward_input)                                # Eqs. 2-5
        turn_r = [rewards.turn_rewards([t["text"] for t in r.turns[:-1]], r.task.gold, r.task.allowed_tools,
                                       weights, a.strict_calls) for r in rs]                 # per rollout, per tool turn
        # a rollout that lost a tool answer or its rating to the network is not trained on (--keep-failed: it is)
        sim_fail = torch.tensor([r.failed > 0 for r in rs])                                 # (B,)
        judge_fail = torch.tensor([bool(s.get("judge_failed")) for s in scores])            # (B,)
        keep = ~(sim_fail | judge_fail) | a.keep_failed                                     # (B,)
        batch = {k: v.to(a.device) for k, v in collate(rs, tok.pad_token_id).items()}
        for k in ("response_mask", "tool_mask", "summary_mask"):
            batch[k] = batch[k] * keep.to(a.device)[:, None]
        gids = torch.tensor(groups)                                                         # (B,)
        A, tp, sp, adv_tool, adv_sum, adv_turn = token_advantages(
            a.algo, scores, turn_r, batch["response_mask"], batch["tool_mask"], batch["summary_mask"], keep, gids,
            a.lam_tool, a.lam_sum, a.turn_credit, a.norm_by_std, a.toolpo_norm_by_std, a.group_stats)  # Eqs. 6-8, 13-14
        old, refl = old_and_ref_logprobs(model, ref, batch, a)
    t1 = time.time()
    stats, bad = ppo_update(model, opt, batch, old, refl, A, a, bad)                     # Eqs. 9-12
    t_train = time.time() - t1
    m, tot = step_metrics(step, rs, scores, batch, stats, (adv_tool, tp), (adv_sum, sp), adv_turn, gids,
                          sim_fail, judge_fail, bad, t_roll, t_train, a.ppo_epochs)
    fail = (tot["sim_failed"] + tot["judge_failed"]) / tot["n"]
    if fail > a.max_fail_rate:
        which = [f"the simulator ({a.sim_url or a.sim_model})" if tot["sim_failed"] else "",
                 f"the judge ({a.judge_url or a.judge_model})" if tot["judge_failed"] else ""]
        raise SystemExit(f"stopping at RL step {step}: {fail:.0%} of the rollouts lost an answer to endpoint "
                         f"failures ({' and '.join(w for w in which if w)}); over --max-fail-rate {a.max_fail_rate}")
    return m, rs, scores, turn_r, (adv_tool, adv_sum), bad


def unscored(m, step, limit):
    """The line that stops a run whose last BLIND_STEPS steps could not earn a reward."""
    why = [f"{m['replay_miss']:.0%} of the answered tool calls were to tools the data records no response of "
           f"(answered 'no matching record'; {FIX['sim']})"] if m["replay_miss"] > limit else []
    why += [f"the judge could not rate {m['unrated']:.0%} of the judged summaries ({FIX['judge']})"] \
        if m["unrated"] > limit else []
    return (f"stopping at RL step {step}: {BLIND_STEPS} steps in a row over --max-unscored {limit}: "
            f"{'; '.join(why)}")


def step_metrics(step, rs, scores, batch, stats, tool, summary, adv_turn, gids, sim_fail, judge_fail, bad,
                 t_roll, t_train, ppo_epochs):
    """One RL step's metrics row: sums over this rank's rollouts, added up over ranks, then means
    (the loss stats are shares of each mini-batch, so they are averaged over the updates).
    tool and summary: (advantages (B,), presence (B,)) of each segment. Returns (row, the sums)."""
    (adv_tool, tp), (adv_sum, sp) = tool, summary
    loss_keys = [k for k in stats if k not in ("loss", "grad_norm", "skipped", "updates", "grad_cosine")]
    local = {**{k: sum(float(s[k]) for s in scores) for k in SCORE_KEYS}, "n": float(len(rs)),
             **seg_stats(adv_tool, tp, gids, "tool"), **seg_stats(adv_sum, sp, gids, "sum"),
             "sign_conflict": float(((adv_tool * adv_sum) < 0).sum()), **turn_stats(adv_turn, adv_tool),
             **{k: stats[k] for k in loss_keys},
             **{f"stop_{k}": float(sum(r.stop == k for r in rs)) for k in STOPS},
             "sim_failed": float(sim_fail.sum()), "judge_failed": float(judge_fail.sum()),
             "answered": float(sum(len(r.responses) for r in rs)),
             "missed": float(sum(unrecorded(r.turns, r.task) for r in rs)),  # tools the data has no record of
             "judged": sum(s["judged"] for s in scores), "unrated": sum(s["unrated"] for s in scores),
             "unencodable": float(take_unencodable()),  # lone surrogates made U+FFFD before a tokenizer
             "policy_tokens": float(batch["response_mask"].sum()), "tokens": float(batch["attention_mask"].sum())}
    tot = dict(zip(local, all_sum(list(local.values()))))
    n, u = tot["n"], stats["updates"]
    m = {"step": step, **{k: tot[k] / n for k in SCORE_KEYS}}
    for seg in ("tool", "sum"):
        c, s1, s2 = tot[f"adv_{seg}_n"], tot[f"adv_{seg}_sum"], tot[f"adv_{seg}_sq"]
        m[f"adv_{seg}_mean"] = s1 / c if c else 0.0
        m[f"adv_{seg}_std"] = math.sqrt(max(s2 - s1 * s1 / c, 0.0) / (c - 1)) if c > 1 else 0.0
        m[f"adv_{seg}_zero_groups"] = tot[f"adv_{seg}_zero"] / tot[f"adv_{seg}_groups"]
    m.update({"sign_conflict": tot["sign_conflict"] / n,
              "turn_conflict": tot["turn_conflict"] / tot["turn_n"] if tot["turn_n"] else 0.0,
              **{k: tot[k] / u for k in loss_keys},
              "loss": stats["loss"] / u, "grad_norm": stats["grad_norm"] / u,
              "skipped_updates": stats["skipped"], "bad_updates_in_a_row": bad,
              "sim_failed": tot["sim_failed"] / n, "judge_failed": tot["judge_failed"] / n,
              "replay_miss": tot["missed"] / tot["answered"] if tot["answered"] else 0.0,  # of the answered calls
              "unrated": tot["unrated"] / tot["judged"] if tot["judged"] else 0.0,       # of the judged summaries
              "unencodable": tot["unencodable"],           # a count over the step's rollouts, all ranks
              **{f"stop_{k}": tot[f"stop_{k}"] / n for k in STOPS},
              "rollout_tok_s": tot["policy_tokens"] / t_roll / world(),
              "train_tok_s": ppo_epochs * tot["tokens"] / t_train / world(),
              "t_rollout": t_roll, "t_train": t_train,
              **({"grad_cosine": stats["grad_cosine"]} if "grad_cosine" in stats else {})})
    return m, tot


# ---------------------------------------------------------------------------------------------
# the run: --out, the model, SFT, the RL loop, the evals and checkpoints
def main(argv=None):
    a = get_args(argv)
    set_json_depth(a.json_depth)
    if a.resume and not os.path.exists(os.path.join(a.out, "config.json")):
        raise SystemExit(f"--resume: no run to continue in --out {a.out} (no config.json)")
    rank, _, a.device = setup_dist(a.device)
    if rank == 0:
        print(config.preset_line(a.preset, a.model))
    random.seed(a.seed)
    torch.manual_seed(a.seed)

    # data first: a bad row fails before any model work or any file is touched
    try:
        tasks = load_tasks(a.data, a.skip_bad_rows)
        evals = load_tasks(a.eval_data, a.skip_bad_rows)[:a.eval_limit] if a.eval_data else []
        convs = load_sft(a.sft_data, a.skip_bad_rows, a.sft_turns)[:a.sft_limit] if a.sft_data else []
    except DataError as e:
        raise SystemExit(f"error: {e}") from None
    sim, judge, clients = frozen_llms(a)
    check_rewards(tasks, sim, judge, a.max_unscored)  # before any file is touched or any weight trained
    held = lock(a.out, rank)  # one run per --out, until this process ends
    was = torch.are_deterministic_algorithms_enabled()  # given back at the end, for a caller in this process
    try:
        deterministic(a.device)
        with stop_requests() as got:
            run(a, rank, tasks, evals, convs, (sim, judge, clients), got)
    finally:
        if held:
            held.close()
        torch.use_deterministic_algorithms(was)
    if dist.is_initialized():
        dist.destroy_process_group()


def check_rewards(tasks, sim, judge, limit):
    """Refuse, in one line naming the flags that fix it, RL rows on which no reward can be earned:
    when the simulator cannot answer the gold calls (replay needs recorded responses) or the judge
    cannot rate the summaries (the facts judge needs reference facts) of more than `limit` of the
    rows that call tools, R_tool is scored against fabricated error observations and R_sum is 0."""
    rows = [t for t in tasks if t.gold and t.allowed_tools]
    deaf = sum(not sim.can_answer(t) for t in rows)
    blind = sum(not judge.can_rate(t) for t in rows) if hasattr(judge, "can_rate") else 0
    why = [f"the replay simulator has no recorded response for the gold calls of {deaf} of {len(rows)} RL rows "
           f"that call tools (their calls would be answered 'no matching record'): {FIX['sim']}"] \
        if deaf > limit * len(rows) else []
    why += [f"the facts judge has no reference facts for {blind} of {len(rows)} RL rows that call tools (their "
            f"summaries would score 0): {FIX['judge']}"] if blind > limit * len(rows) else []
    if why:
        raise SystemExit(f"error: no reward can be earned on these rows: {'; '.join(why)}; docs/training.md \"Simulator "
                         f"and judge\" shows how (--max-unscored 1 trains anyway)")


def run(a, rank, tasks, evals, convs, frozen, got):
    """The run in --out, which this process holds: start, continue or report it finished. `frozen`:
    the simulator, the judge and their clients (eval.frozen_llms); `got` collects the stop signals
    (SIGTERM, SIGINT) that arrive meanwhile."""
    main_rank, final = rank == 0, os.path.join(a.out, "final")
    if not open_run(a.out, vars(a), a.resume, a.overwrite, main_rank):
        return
    if main_rank:
        print(config.show(parser(), vars(a)))
    logs = Logs(a.out, LOGS, main_rank, a.report_to, vars(a))
    model, tok, tasks, evals, sft_dir, name = load_model(a, rank, tasks, evals, convs)
    sim, judge, clients = frozen
    rl_judge = rewards.NoisyJudge(judge, a.judge_noise, a.seed) if a.judge_noise else judge  # evals: the clean one
    t_start, threads = time.time(), Threads(on=a.device == "cpu")  # fewer threads while the machine is busy
    steps = a.epochs * len(tasks) // a.prompts_per_step if a.steps is None else a.steps  # len(data_order) // P
    if main_rank:
        print(plan(a, len(tasks), len(evals), len(convs), os.path.isdir(sft_dir), steps))
    model = shard(model, a.dtype)
    if convs and not os.path.isdir(sft_dir):
        model = sft_stage(a, model, tok, convs, logs, threads, got, rank, sft_dir)
    model, ref = rl_models(a, model, sft_dir if os.path.isdir(sft_dir) else name)
    eval_row = lambda label, step: run_eval(model, tok, evals, sim, judge, a, rank, logs, label, step)  # noqa: E731

    # RL state: fresh, or the newest checkpoint that reads back; the logs are cut back to that point
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], a.lr, weight_decay=a.weight_decay)
    start, order, found = rl_state(a, model, opt, rank, logs, len(tasks), sft_dir)
    table = {"before RL": None if found else eval_row("before RL", 0)}
    mine = rank_prompts(a.prompts_per_step, a.mini_batch, rank, world())
    bad, blind, saved = 0, 0, start if found else None  # saved: the newest checkpoint this process knows is on disk
    checkpoint = lambda step: save_checkpoint(model, opt, a.out, vars(a), a.keep, step, order, rank, logs.sizes())  # noqa: E731
    for step in tqdm(range(start, steps), desc="rl", initial=start, total=steps, disable=not main_rank):
        stop_if_asked(got, main_rank, a.out, step, steps, None if saved == step else checkpoint)
        pos = [step * a.prompts_per_step + j for j in mine]                  # this rank's prompts of the step
        n_threads = threads.update()                                         # from the load since the last step
        with autocast(a.dtype, a.device), llm.window(a.step_deadline, *clients):  # a dead endpoint stalls one step at most
            m, rs, scores, turn_r, advs, bad = rl_step(model, ref, tok, opt, [tasks[order[p % len(order)]] for p in pos],
                                                       pos, sim, rl_judge, a, step, bad)
        blind = blind + 1 if max(m["replay_miss"], m["unrated"]) > a.max_unscored else 0
        m["elapsed"], m["threads"], m["blind_steps"] = time.time() - t_start, n_threads, blind
        log_step(logs, m, rs, scores, turn_r, advs, step, main_rank, a.show)
        if blind == BLIND_STEPS:
            raise SystemExit(unscored(m, step, a.max_unscored))
        if a.eval_every and (step + 1) % a.eval_every == 0 and step + 1 < steps:
            eval_row(f"step {step + 1}", step + 1)
        if a.save_every and (step + 1) % a.save_every == 0 and step + 1 < steps:
            checkpoint(step + 1)
            saved = step + 1
    stop_if_asked(got, main_rank, a.out, steps, steps, None if saved == steps else checkpoint)

    if steps:  # also when a stop came after the last step: the resumed run has no step left but this
        table["after RL"] = eval_row("after RL", steps)
    save_final(model, tok, final, rank, info={"rl_steps": steps, "logs": logs.sizes()},
               merged=lora.merge if a.merge_lora else None)
    if main_rank:
        if all(table.values()):
            print(format_table(table))
        print(f"done in {time.time() - t_start:.0f}s; checkpoint in {final}")
    logs.close()


def sft_stage(a, model, tok, convs, logs, threads, got, rank, sft_dir):
    """The warm start (lib/sft.py; with LoRA an adapter, merged after), its result saved to `sft_dir`."""
    if a.resume:
        logs.rewind(dict.fromkeys(LOGS, 0))  # SFT is redone from its start: nothing logged before it is kept

    def sft_row(row):  # after each SFT step: its row, the next step's thread count, a stop if one came
        logs.write({**row, "threads": torch.get_num_threads()})
        threads.update()
        stop_if_asked(got, rank == 0)
    model = adapter(a, model)
    with autocast(a.dtype, a.device):
        warm_start(model, tok, convs, sft_config(a), sft_row)
    model = lora.merge(model) if a.lora_r else model  # the SFT policy: base + adapter, now the frozen base
    save_final(model, tok, sft_dir, rank, info={"logs": logs.sizes()})
    return model


def plan(a, n_rl, n_eval, n_sft, sft_done, steps):
    """One line saying which stages this run has, and their sizes, before the first one starts."""
    sft = ("SFT: done before, in <out>/sft" if sft_done else
           f"SFT: {n_sft:,} conversations x {a.sft_epochs} epochs, {a.sft_batch} a step" if n_sft else
           "SFT: none (no --sft-data)")
    rl = f"RL: {steps:,} steps of {a.prompts_per_step} prompts x G = {a.group_size} ({n_rl:,} prompts x {a.epochs} epochs)"
    when = f"every {a.eval_every} steps, " if a.eval_every else ""
    ev = f"eval: {n_eval:,} prompts before RL, {when}after RL" if n_eval else "eval: none (no --eval-data)"
    return f"plan: {sft} -> {rl} -> {ev}"


def load_model(a, rank, tasks, evals, convs):
    """The policy in float32 (see lib/parallel.autocast): this run's SFT result when there is
    one, else --model, or the tiny demo built once into <out>/base. Prompts over
    --max-prompt-tokens are dropped. Returns (model, tok, tasks, evals, sft_dir, the model's folder)."""
    sft_dir, base_dir = os.path.join(a.out, "sft"), os.path.join(a.out, "base")
    name = sft_dir if os.path.isdir(sft_dir) else a.model
    if name is None:
        if not os.path.isdir(base_dir):
            if rank == 0:
                with writing(base_dir, base_dir + ".tmp"):
                    tiny.build(base_dir + ".tmp", tiny.world_texts(tasks, convs), a.seed, *a.tiny_size)
                    os.replace(base_dir + ".tmp", base_dir)
            barrier()
        name = base_dir
    if a.resume and os.path.isdir(name):
        check_folder(name)
    model, tok = load_policy(name, "float32", a.device, a.grad_ckpt)
    n_tokens = lambda t: len(prompt_ids(tok, t))  # noqa: E731
    (tasks, n_rl), (evals, n_ev) = drop_long(tasks, n_tokens, a.max_prompt_tokens), drop_long(evals, n_tokens, a.max_prompt_tokens)
    if rank == 0 and n_rl + n_ev:
        print(f"dropped {n_rl} RL and {n_ev} eval prompts over --max-prompt-tokens {a.max_prompt_tokens}")
    if not tasks:
        raise SystemExit(f"no RL prompt fits --max-prompt-tokens {a.max_prompt_tokens}")
    return model, tok, tasks, evals, sft_dir, name


def adapter(a, model):
    """`model` with a fresh LoRA adapter (lib/lora.py) under --lora-r, else itself."""
    if not a.lora_r:
        return model
    return lora.add_adapter(model, a.lora_r, a.lora_alpha, a.lora_dropout, a.lora_targets, a.seed)


def rl_models(a, model, base):
    """The RL policy and the reference of Eq. 11 (None when β = 0), `base` being the SFT policy's folder
    (or the model's when there is no SFT). With LoRA: a fresh adapter on the SFT policy, and the same
    weights with it off (no second copy); else `model` and the SFT policy loaded frozen in the compute dtype."""
    if a.lora_r:
        model = adapter(a, model)
        lora.base_folder(model, base, os.path.join(a.out, "final"))
        return model, model if a.kl_beta else None
    if not a.kl_beta:
        return model, None
    return model, shard(load_policy(base, a.dtype, a.device)[0], a.dtype).eval().requires_grad_(False)


def rl_state(a, model, opt, rank, logs, n_tasks, sft_dir):
    """The RL state to start from: fresh, or (--resume) the newest checkpoint that reads back,
    with the logs cut back to that point. Returns (first step, data order, the checkpoint found or None)."""
    order = data_order(n_tasks, a.epochs, a.seed)
    random.seed(a.seed + 1)  # RL starts from the same RNG state whether SFT ran now or in an earlier process
    torch.manual_seed(a.seed + 1)
    start, found = 0, resume_point(a.out, model, opt, vars(a), rank) if a.resume else None
    if found:                                            # model and opt hold its state
        folder, state, rng = found
        set_rng_state(rng)
        start, order = state["step"], state["order"]
        logs.rewind(state.get("logs"))
        if rank == 0:
            print(f"resumed from {folder}: RL step {start}")
    elif a.resume:  # from the SFT result (its run.json holds the logs' lengths then), or from nothing
        info = os.path.join(sft_dir, "run.json")
        logs.rewind(read_json(info).get("logs") if os.path.isfile(info) else None if os.path.isdir(sft_dir)
                    else dict.fromkeys(LOGS, 0))
    return start, order, found


def run_eval(model, tok, evals, sim, judge, a, rank, logs, label, step):
    """eval.evaluate on the eval split (what `eval.py toucan --model <out>/final` reruns), rank r taking
    prompts r, r + world, ...; the scores are put back in the split's order before the means.
    Logs and prints the row; returns its "all" means (None with no eval split)."""
    if not evals:
        return None
    with gathered(model.eval()), cast_once(model, a.dtype), autocast(a.dtype, a.device):
        scores, _ = evaluate(model, tok, evals[rank::world()], sim, judge, a.gen_batch, a.max_turns, a.max_tokens,
                             a.max_tool_rounds, a.strict_calls, a.summary_gate, a.reward_input, a.sampler)
    mine = list(zip(range(rank, len(evals), world()), scores))       # (index in the split, scores)
    summary = metrics([s for _, s in sorted(gather(mine), key=lambda x: x[0])])
    logs.write({"label": label, "step": step, **summary}, "eval")
    if rank == 0:
        print(format_table({label: summary["all"]}))
    return summary["all"]


def log_step(logs, m, rs, scores, turn_r, advs, step, main_rank, show):
    """Log the step's metrics and every rollout (gathered from all ranks), print a line and `show` rollouts."""
    logs.write(m)
    at, asum = advs
    rows = [{"step": step, "group": r.group, "question": r.task.question, "turns": r.turns, "stop": r.stop,
             **{k: s[k] for k in ("process", "summary", "score", "r_tool", "r_sum", "redundant") if k in s},
             "r_turn": turn_r[i], "adv_tool": float(at[i]), "adv_sum": float(asum[i])}
            for i, (r, s) in enumerate(zip(rs, scores))]
    for row in gather(rows):
        logs.write(row, "rollouts")
    if main_rank:
        tqdm.write(f"step {step}: score {m['score']:.3f} process {m['process']:.3f} summary {m['summary']:.3f} "
                   f"tool_turns {m['tool_turns']:.2f} kl {m['kl']:.4f} clip {m['clip_frac']:.3f} "
                   f"conflict {m['sign_conflict']:.2f}")
        for r, s in list(zip(rs, scores))[:: max(1, len(rs) // max(1, show))][:show]:
            tqdm.write(f"  [{s['score']:+.2f} tool {s['r_tool']:.2f} sum {s['r_sum']:.2f} {r.stop}] "
                       f"{r.task.question[:80]!r}\n    -> {r.text[-300:]!r}")


if __name__ == "__main__":
    main(sys.argv[1:])
