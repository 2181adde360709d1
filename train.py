"""Train a tool-calling policy with SLCA-GRPO (or GRPO, or ToolPO): one linear loop.

    python train.py                                  # the demo (configs/demo.toml): minutes on a CPU
    python train.py --model Qwen/Qwen2.5-3B-Instruct --sim-url URL --judge-url URL  # the paper's (configs/paper.toml)
    torchrun --nproc_per_node 8 train.py --model Qwen/Qwen2.5-3B-Instruct   # the same, FSDP2 over 8 GPUs
    python train.py --out runs/slca-s0 --resume      # continue a run from its latest checkpoint

Stages (docs/method.md §7): an optional SFT warm start (lib/training/sft.py, saved to <out>/sft), then per RL step:
G rollouts for each of the step's prompts (rollout.py) -> HierR scores (rewards.py, Eqs. 2-5) -> advantages
(advantage.py: `--algo slca`, Eqs. 7-8, with `--turn-credit` Eq. 14 and `--decision-credit` Eq. 15; `grpo`,
Eq. 6; `toolpo`, Eq. 13) -> old and reference log-probs -> PPO mini-batches with gradient accumulation
(loss.py, Eqs. 9-12), an AdamW step each -> log -> eval -> checkpoint.

The file, in reading order: the config (its flag table, checks and preset files are lib/runs/config.py), the RL
step (rl_step and the three passes it calls) and the run (main, run, and the model and eval helpers); the
loop's plumbing (the plan line, the RL state, the metrics row, the guards) is lib/runs/loop.py.

Config: no --model runs configs/demo.toml (a tiny random Qwen2 built on the shipped tool world, lib/training/tiny.py,
sized for a 2-core CPU); a named --model runs configs/paper.toml and, without data flags, the release's splits
(lib.inputs.data.release_files); --preset names another. Flags always win. The first line says which preset; the
resolved config is printed compactly, saved whole (config.json), then one line says which stages run.

Guards: RL rows on which no reward can be earned are refused before anything is written (--max-unscored); a
rollout that lost a tool or judge answer to the network is dropped from the loss (--keep-failed keeps it) and a
step past --max-fail-rate stops the run; a non-finite update is skipped, --max-bad-updates in a row stop it.

Outputs in --out (docs/training.md): config.json, metrics.jsonl, rollouts.jsonl, credit.jsonl (a few groups'
token ids a step: credit/page.py), eval.jsonl (eval.evaluate's before/after rows), sft/, ckpt/step-N/, final/.
--resume continues from the newest checkpoint that reads back; SIGTERM or SIGINT checkpoints and exits. Under
torchrun (lib/training/dist.py) each rank takes an equal share of the step's prompts with all G rollouts of each, and rank
0 alone prints and writes. LoRA: --lora-r (lib/training/lora.py).
"""
import os
import random
import sys
import time
from dataclasses import dataclass, fields, replace

import torch
from tqdm import tqdm

import rewards
from rewards import HierR, score_rollouts
from advantage import Credit, log_sums, slca_terms, token_advantages
from loss import Clip, grad_cosine, normaliser, policy_loss
from rollout import Episode, collate, prompt_ids, rollout
from segment import decision_mask
from simulator import unrecorded
from eval import (EPISODE, READING, Frozen, Templates, check_episode_flags, evaluate, format_table, frozen_llms,
                  metrics)
from lib.inputs.data import DataError, drop_long, load_sft, load_tasks
from lib.inputs.text import set_json_depth, take_unencodable
from lib.training import lora, tiny
from lib.training.dist import (all_sum, barrier, deterministic, end_worker, gather, gathered, leave_dist, rank_prompts,
                               setup_dist, shard, world)
from lib.training.logprobs import NO_GRAD_ROWS, micro_batches, token_logprobs
from lib.training.model import load_policy
from lib.training.optim import optimizer_step
from lib.training.precision import autocast, bf16_note, cast_once, frozen_cast
from lib.training.sft import SFT, SFT_FLAGS, warm_start
from lib.frozen import llm
from lib.runs import config, loop
from lib.runs.checkpoints import save_checkpoint, save_final
from lib.runs.config import Part
from lib.runs.files import Logs
from lib.runs.runfolder import check_folder, lock, open_run, stop_if_asked, stop_requests, writing
from lib.runs.threads import Threads

# ---------------------------------------------------------------------------------------------
# the config: the flag table over a preset file (lib/runs/config.py, configs/*.toml). Each group's flags are the fields
# of the settings dataclasses it lists, each owned by the module that uses it: a knob is one field plus its use.
TABLE = [
    ("model", [config.Model]),
    ("data", [config.Data]),
    ("SFT warm start", [Part(SFT, only=SFT_FLAGS)]),                              # lib/training/sft.py
    ("RL", [Part(Credit, only=("algo",)), config.RL, Part(Episode, only=("temperature", "max_tokens", "gen_batch"))]),
    ("loss (docs/method.md §4)", [Clip]),                                         # loss.py
    ("rewards and advantages (docs/method.md §2-3)", [Part(HierR, skip=READING), Credit]),  # rewards.py, advantage.py
    ("the episode and its scoring (shared with eval.py toucan; docs/method.md §2, §5, §6)", EPISODE),  # eval.py
    ("simulator and judge in training", [config.Guards]),
    ("run", [config.Run]),
    ("diagnostics", [config.Diagnostics]),
]


def parser():
    """The flag table (lib/runs/config.py): TABLE's groups, each flag a settings field."""
    return config.parser(TABLE)


def get_args(argv=None):
    """The run's config: the flag table over its preset file, checked (lib/runs/config.py)."""
    return config.get_args(parser(), argv, check_episode_flags)


@dataclass(frozen=True)
class Settings:
    """The run's settings, made once from its flags (`Settings.of(a)`): one object per module that uses them,
    TABLE's dataclasses, and `flags`, the whole config as config.json saves it."""
    model: config.Model
    data: config.Data
    sft: SFT
    rl: config.RL
    clip: Clip                # loss.py
    hierr: HierR              # rewards.py
    credit: Credit            # advantage.py
    episode: Episode          # rollout.py
    frozen: Frozen            # eval.py: the simulator and the judge
    templates: Templates      # eval.py: their prompt texts
    sim: llm.Client           # their endpoints (--sim-*, --judge-*)
    judge: llm.Client
    guards: config.Guards
    run: config.Run
    diagnostics: config.Diagnostics
    flags: dict

    @classmethod
    def of(cls, a):
        """The settings of parsed flags `a` (get_args; a.device resolved)."""
        made = {f.name: config.settings(f.type, a) for f in fields(cls) if f.name not in ("sim", "judge", "flags")}
        return cls(**made, sim=config.settings(llm.Client, a, prefix="sim_"),
                   judge=config.settings(llm.Client, a, prefix="judge_"), flags=dict(vars(a)))


# ---------------------------------------------------------------------------------------------
# the RL step: rollouts -> rewards -> advantages -> old and reference log-probs -> PPO update
def backward(model, batch, idx, mask_key, norm, s):
    """Accumulate the gradient of the loss (Eqs. 9-12) over rows `idx`, counting only the
    tokens of `mask_key`; `norm` is the mini-batch's N (loss.normaliser, summed over ranks).
    FSDP averages gradients over ranks, so each rank's loss is scaled by the world size.
    Returns the stats summed over micro-batches."""
    stats, G = {}, s.rl.group_size
    for rows, mb in micro_batches(batch, idx, s.rl.micro_batch, G):
        lp = token_logprobs(model, mb["input_ids"], mb["attention_mask"], mb["response_mask"],
                            groups=torch.tensor(rows) // G)                 # each prompt runs once
        loss, st = policy_loss(lp, mb["old_logprobs"], mb.get("ref_logprobs"), mb["advantages"], mb[mask_key], norm,
                               clip=s.clip)
        (loss * world()).backward()
        st["loss"] = loss.item()
        for k, v in st.items():
            stats[k] = stats.get(k, 0.0) + v
    return stats


def ppo_update(model, opt, batch, s, bad):
    """PPO on one rollout batch (this rank's rows, G per prompt; besides rollout.collate's tensors it holds
    "old_logprobs", "ref_logprobs" (none without a reference) and "advantages", each (B, L)): one optimizer
    step per mini-batch of prompts, `ppo_epochs` passes. Returns (stats summed over updates, bad count)."""
    model.train()
    B = len(batch["input_ids"])
    per_mb = s.rl.mini_batch // world() * s.rl.group_size                   # rows of one mini-batch here
    stats = {"loss": 0.0, "grad_norm": 0.0, "skipped": 0, "updates": 0}
    for epoch in range(s.rl.ppo_epochs):
        for first in range(0, B, per_mb):
            idx = list(range(first, min(first + per_mb, B)))
            if s.diagnostics.grad_cosine and epoch == 0 and first == 0:
                stats["grad_cosine"] = grad_cosine(model, lambda key: backward(
                    model, batch, idx, key, normaliser(batch[key][idx], s.clip.loss_agg), s))
            st = backward(model, batch, idx, "response_mask", normaliser(batch["response_mask"][idx], s.clip.loss_agg), s)
            loss = all_sum(st.pop("loss"))
            bad, norm, stepped = optimizer_step(model, opt, loss, s.rl.grad_clip, s.run.max_bad_updates, bad)
            for k, v in st.items():
                stats[k] = stats.get(k, 0.0) + v
            stats["loss"] += loss
            stats["grad_norm"] += norm
            stats["skipped"] += not stepped
            stats["updates"] += 1
    return stats, bad


def old_and_ref_logprobs(model, ref, batch, s):
    """log π_old of Eq. 9 (as sampled, or recomputed with --old-logprobs recompute) and log π_ref
    of Eq. 11 (without a reference, none), each (B, L), before any update: into batch["old_logprobs"]
    and batch["ref_logprobs"], from batch["logprobs"]."""
    G = s.rl.group_size
    old = batch.pop("logprobs").float() * batch["response_mask"]                    # (B, L)
    refl = torch.zeros_like(old) if ref is not None else None
    with torch.no_grad():  # each prompt once; the responses in passes of similar length, NO_GRAD_ROWS rows at most
        for rows, mb in micro_batches(batch, list(range(len(old))), max(s.rl.micro_batch, G), G):
            L, groups = mb["input_ids"].shape[1], torch.tensor(rows) // G
            x = (mb["input_ids"], mb["attention_mask"], mb["response_mask"])
            if s.rl.old_logprobs == "recompute":
                old[rows, :L] = token_logprobs(model, *x, groups=groups, rows=NO_GRAD_ROWS)
            if ref is not None:
                with lora.adapters_off(ref):  # with LoRA, ref is the policy itself: its adapters off
                    refl[rows, :L] = token_logprobs(ref, *x, groups=groups, rows=NO_GRAD_ROWS)
    batch["old_logprobs"] = old
    if ref is not None:
        batch["ref_logprobs"] = refl


def rl_step(model, ref, tok, opt, tasks, group_ids, *, frozen, s, step, bad):
    """One rollout batch (this rank's prompts `tasks`, G rollouts each) and its PPO update under the run's
    Settings `s`; `frozen`: the simulator and the judge. Returns (metrics over all ranks, rollouts, scores,
    per-turn rewards, (adv_tool, adv_sum, keep), bad-update count)."""
    G, (sim, judge), hierr, credit, dev = s.rl.group_size, frozen, s.hierr, s.credit, s.model.device
    groups = [g for g in group_ids for _ in range(G)]
    model.eval()
    take_unencodable()  # from here on: this step's text (prompts, observations)
    t0 = time.time()
    # one process below float32: sampling and the old log-probs read one cast of the weights, made here from
    # this step's weights and freed before the update (lib.training.precision.cast_once; FSDP2 gathers them in bf16)
    with cast_once(model, s.model.dtype):
        with gathered(model):
            rs = rollout(model, tok, [t for t in tasks for _ in range(G)], sim, s.episode, groups)
        t_roll = time.time() - t0
        scores = score_rollouts(rs, judge, replace(hierr, succ_judge=hierr.succ_judge and credit.algo == "toolpo"),
                                tok=tok)                                                    # Eqs. 2-5 (16)
        turn_r = [rewards.turn_rewards([t["text"] for t in r.turns[:-1]], r.task.gold, r.task.allowed_tools,
                                       hierr.weights(), hierr.strict_calls) for r in rs]     # per rollout, per tool turn
        # a rollout that lost a tool answer or its rating to the network is not trained on (--keep-failed: it is)
        sim_fail = torch.tensor([r.failed > 0 for r in rs])                                 # (B,)
        judge_fail = torch.tensor([bool(s.get("judge_failed")) for s in scores])            # (B,)
        keep = ~(sim_fail | judge_fail) | s.guards.keep_failed                              # (B,)
        batch = {k: v.to(dev) for k, v in collate(rs, tok.pad_token_id).items()}
        for k in ("response_mask", "tool_mask", "summary_mask"):
            batch[k] = batch[k] * keep.to(dev)[:, None]
        gids = torch.tensor(groups)                                                         # (B,)
        decision = (decision_mask(batch["response_mask"], batch["input_ids"], tok.decode)
                    if credit.decision_credit == "tool" else None)                         # (B, L) Eq. 15's d
        batch["advantages"] = token_advantages(scores, turn_r, batch, keep, gids, credit,
                                               decision=decision)                          # (B, L) Eqs. 6-8, 13-15
        slca = slca_terms(scores, turn_r, batch, keep, gids, credit)                       # for the logs, any --algo
        t_lp = time.time()
        old_and_ref_logprobs(model, ref, batch, s)
    t1 = time.time()
    stats, bad = ppo_update(model, opt, batch, s, bad)                                     # Eqs. 9-12
    t_train = time.time() - t1
    sums = {**log_sums(*slca, gids),
            "missed": float(sum(unrecorded(r.turns, r.task) for r in rs))}  # in rows that record no response
    m, tot = loop.step_metrics(step, rs, scores, batch, stats, sums, sim_fail=sim_fail, judge_fail=judge_fail, bad=bad,
                               t_roll=t_roll, t_train=t_train, ppo_epochs=s.rl.ppo_epochs)
    m["t_logprobs"] = t1 - t_lp  # the old and reference passes (the rest of t_rollout .. t1: scoring, advantages)
    loop.check_failures(tot, s.guards.max_fail_rate, step, s.sim.url or s.sim.model, s.judge.url or s.judge.model)
    return m, rs, scores, turn_r, (*slca[:2], keep), bad


# ---------------------------------------------------------------------------------------------
# the run: --out, the model, SFT, the RL loop, the evals and checkpoints
def main(argv=None):
    a = get_args(argv)
    dtype_note = vars(a).pop("dtype_note")  # said once, not a flag of the saved config
    set_json_depth(a.json_depth)
    if a.resume and not os.path.exists(os.path.join(a.out, "config.json")):
        raise SystemExit(f"--resume: no run to continue in --out {a.out} (no config.json)")
    rank, _, a.device = setup_dist(a.device)
    s = Settings.of(a)  # from here on, every function takes the settings objects, never the flags
    if rank == 0:
        print(config.preset_line(s.model.preset, s.model.model))
        if dtype_note:
            print(dtype_note)
        if note := bf16_note(s.model.dtype, s.model.device):
            print(note)
    random.seed(s.run.seed)
    torch.manual_seed(s.run.seed)

    # data first: a bad row fails before any model work or any file is touched
    d = s.data
    try:
        tasks = load_tasks(d.data, d.skip_bad_rows)
        evals = load_tasks(d.eval_data, d.skip_bad_rows)[:s.run.eval_limit] if d.eval_data else []
        convs = load_sft(d.sft_data, d.skip_bad_rows, s.sft.sft_turns)[:s.sft.sft_limit] if d.sft_data else []
    except DataError as e:
        raise SystemExit(f"error: {e}") from None
    clients = llm.client("sim", s.sim), llm.client("judge", s.judge)
    sim, judge = frozen_llms(s.frozen, s.templates, clients)
    loop.check_rewards(tasks, sim, judge, s.guards.max_unscored)  # before any file is touched or any weight trained
    held = lock(s.run.out, rank)  # one run per --out, until this process ends
    was = torch.are_deterministic_algorithms_enabled()  # given back at the end, for a caller in this process
    try:
        deterministic(s.model.device)
        with stop_requests() as got:
            run(s, rank, (tasks, evals, convs), (sim, judge, clients), got)
    finally:
        if held:
            held.close()
        torch.use_deterministic_algorithms(was)
    leave_dist()


def run(s, rank, data, frozen, got):
    """The run in --out, which this process holds, under Settings `s`: start, continue or report it finished.
    `data`: the RL, eval and SFT rows (tasks, evals, convs); `frozen`: the simulator, the judge and their
    clients (eval.frozen_llms); `got` collects the stop signals (SIGTERM, SIGINT) that arrive meanwhile."""
    (tasks, evals, convs), main_rank, out, P = data, rank == 0, s.run.out, s.rl.prompts_per_step
    if not open_run(out, s.flags, s.run.resume, s.run.overwrite, main_rank):
        return
    if main_rank:
        print(config.show(parser(), s.flags))
    logs = Logs(out, loop.LOGS, main_rank, s.diagnostics.report_to, s.flags)
    model, tok, tasks, evals, sft_dir, name = load_model(s, rank, tasks, evals, convs)
    (sim, judge, clients), g = frozen, s.guards
    rl_judge = rewards.NoisyJudge(judge, g.judge_noise, s.run.seed) if g.judge_noise else judge  # evals: the clean one
    t_start, threads = time.time(), Threads(on=s.model.device == "cpu")  # fewer threads while the machine is busy
    steps = s.rl.epochs * len(tasks) // P if s.rl.steps is None else s.rl.steps  # len(data_order) // P
    if main_rank:
        print(loop.plan(len(tasks), len(evals), len(convs), os.path.isdir(sft_dir), steps, s.flags))
    model = shard(model, s.model.dtype)
    if convs and not os.path.isdir(sft_dir):
        model = sft_stage(s, model, tok, convs, logs, threads=threads, got=got, rank=rank)
    model, ref = rl_models(s, model, sft_dir if os.path.isdir(sft_dir) else name)
    eval_row = lambda label, step: run_eval(model, tok, evals, (sim, judge), s, rank=rank, logs=logs,  # noqa: E731
                                            label=label, step=step)

    # RL state: fresh, or the newest checkpoint that reads back; the logs are cut back to that point
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], s.rl.lr, weight_decay=s.rl.weight_decay)
    start, order, found = loop.rl_state(s.flags, model, opt, logs, len(tasks), rank)
    table = {"before RL": None if found else eval_row("before RL", 0)}
    mine = rank_prompts(P, s.rl.mini_batch, rank, world())
    bad, blind, saved = 0, 0, start if found else None  # saved: the newest checkpoint this process knows is on disk
    checkpoint = lambda step: save_checkpoint(model, opt, s.flags, step, order, rank, logs=logs.sizes())  # noqa: E731
    every = lambda n, step: n and (step + 1) % n == 0 and step + 1 < steps  # noqa: E731 (--eval-every, --save-every)
    for step in tqdm(range(start, steps), desc="rl", initial=start, total=steps, disable=not main_rank):
        stop_if_asked(got, main_rank, out, step, steps, None if saved == step else checkpoint)
        pos = [step * P + j for j in mine]                                   # this rank's prompts of the step
        n_threads = threads.update()                                         # from the load since the last step
        with autocast(s.model.dtype, s.model.device), llm.window(g.step_deadline, *clients):  # a dead endpoint stalls one step at most
            m, rs, scores, turn_r, advs, bad = rl_step(model, ref, tok, opt, [tasks[order[p % len(order)]] for p in pos],
                                                       pos, frozen=(sim, rl_judge), s=s, step=step, bad=bad)
        blind = loop.blind_steps(m, blind, g.max_unscored)
        m["elapsed"], m["threads"], m["blind_steps"] = time.time() - t_start, n_threads, blind
        loop.log_step(logs, m, rs, scores, turn_r, advs, main_rank=main_rank, show=s.diagnostics.show)
        loop.stop_if_blind(m, step, g.max_unscored)
        if every(s.run.eval_every, step):
            eval_row(f"step {step + 1}", step + 1)
        if every(s.run.save_every, step):
            checkpoint(step + 1)
            saved = step + 1
    stop_if_asked(got, main_rank, out, steps, steps, None if saved == steps else checkpoint)

    if steps:  # also when a stop came after the last step: the resumed run has no step left but this
        table["after RL"] = eval_row("after RL", steps)
    final = os.path.join(out, "final")
    save_final(model, tok, final, rank, info={"rl_steps": steps, "logs": logs.sizes()},
               merged=lora.merge if s.model.merge_lora else None)
    if main_rank:
        if all(table.values()):
            print(format_table(table))
        print(f"done in {time.time() - t_start:.0f}s; checkpoint in {final}")
    logs.close()


def sft_stage(s, model, tok, convs, logs, *, threads, got, rank):
    """The warm start (lib/training/sft.py; with LoRA an adapter, merged after), its result saved to <out>/sft."""
    if s.run.resume:
        logs.rewind(dict.fromkeys(loop.LOGS, 0))  # SFT is redone from its start: nothing logged before it is kept

    def sft_row(row):  # after each SFT step: its row, the next step's thread count, a stop if one came
        logs.write({**row, "threads": torch.get_num_threads()})
        threads.update()
        stop_if_asked(got, rank == 0)
    model = adapter(s, model)
    with autocast(s.model.dtype, s.model.device):
        warm_start(model, tok, convs, s.sft, sft_row)
    model = lora.merge(model) if s.model.lora_r else model  # the SFT policy: base + adapter, now the frozen base
    save_final(model, tok, os.path.join(s.run.out, "sft"), rank, info={"logs": logs.sizes()})
    return model


def load_model(s, rank, tasks, evals, convs):
    """The policy in float32 (see lib/training/precision.autocast): this run's SFT result when there is
    one, else --model, or the tiny demo built once into <out>/base. Prompts over
    --max-prompt-tokens are dropped. Returns (model, tok, tasks, evals, sft_dir, the model's folder)."""
    m, cap = s.model, s.episode.max_prompt_tokens
    sft_dir, base_dir = os.path.join(s.run.out, "sft"), os.path.join(s.run.out, "base")
    name = sft_dir if os.path.isdir(sft_dir) else m.model
    if name is None:
        if not os.path.isdir(base_dir):
            if rank == 0:
                with writing(base_dir, base_dir + ".tmp"):
                    tiny.build(base_dir + ".tmp", tiny.world_texts(tasks, convs), s.run.seed, m.tiny_size)
                    os.replace(base_dir + ".tmp", base_dir)
            barrier()
        name = base_dir
    if s.run.resume and os.path.isdir(name):
        check_folder(name)
    model, tok = load_policy(name, "float32", m.device, m.grad_ckpt)
    n_tokens = lambda t: len(prompt_ids(tok, t))  # noqa: E731
    (tasks, n_rl), (evals, n_ev) = drop_long(tasks, n_tokens, cap), drop_long(evals, n_tokens, cap)
    if rank == 0 and n_rl + n_ev:
        print(f"dropped {n_rl} RL and {n_ev} eval prompts over --max-prompt-tokens {cap}")
    if not tasks:
        raise SystemExit(f"no RL prompt fits --max-prompt-tokens {cap}")
    return model, tok, tasks, evals, sft_dir, name


def adapter(s, model):
    """`model` with a fresh LoRA adapter (lib/training/lora.py) under --lora-r, else itself."""
    m = s.model
    if not m.lora_r:
        return model
    return lora.add_adapter(model, m.lora_r, m.lora_alpha, m.lora_dropout, m.lora_targets, s.run.seed)


def rl_models(s, model, base):
    """The RL policy and the reference of Eq. 11 (None when β = 0), `base` being the SFT policy's folder
    (or the model's when there is no SFT). With LoRA: a fresh adapter on the SFT policy, and the same
    weights with it off (no second copy); else `model` and the SFT policy loaded frozen, stored the way the
    policy computes (lib.training.precision.frozen_cast: one process's matmul weights in the compute dtype, the rest float32)."""
    dtype = s.model.dtype
    if s.model.lora_r:
        model = adapter(s, model)
        lora.base_folder(model, base, os.path.join(s.run.out, "final"))
        return model, model if s.clip.kl_beta else None
    if not s.clip.kl_beta:
        return model, None
    ref = load_policy(base, "float32" if world() == 1 else dtype, s.model.device)[0]
    return model, shard(frozen_cast(ref, dtype), dtype).eval().requires_grad_(False)


def run_eval(model, tok, evals, frozen, s, *, rank, logs, label, step):
    """eval.evaluate on the eval split (what `eval.py toucan --model <out>/final` reruns), rank r taking
    prompts r, r + world, ...; the scores are put back in the split's order before the means.
    Logs and prints the row; returns its "all" means (None with no eval split)."""
    if not evals:
        return None
    with gathered(model.eval()), cast_once(model, s.model.dtype), autocast(s.model.dtype, s.model.device):
        scores, _ = evaluate(model, tok, evals[rank::world()], *frozen, episode=s.episode, hierr=s.hierr)
    mine = list(zip(range(rank, len(evals), world()), scores))       # (index in the split, scores)
    summary = metrics([x for _, x in sorted(gather(mine), key=lambda r: r[0])])
    logs.write({"label": label, "step": step, **summary}, "eval")
    if rank == 0:
        print(format_table({label: summary["all"]}))
    return summary["all"]


if __name__ == "__main__":
    main(sys.argv[1:])
    end_worker()
