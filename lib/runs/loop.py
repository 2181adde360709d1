"""The RL loop's plumbing around train.rl_step: the plan line, the RL state to start from, each
step's metrics row and log, and the guards that stop a run which cannot learn (rewards that
cannot be earned, endpoint failures past --max-fail-rate).
"""
import math
import os
import random

import torch
from tqdm import tqdm

from lib.inputs.data import data_order
from lib.inputs.text import take_unencodable
from lib.training.dist import all_sum, gather, world
from lib.runs.checkpoints import resume_point, set_rng_state
from lib.runs.runfolder import read_json

LOGS = ("metrics", "rollouts", "eval", "credit")  # <out>/<name>.jsonl
CREDIT_GROUPS = 2  # groups a step (per rank) whose token ids, masks and rewards go to credit.jsonl (credit/page.py)
CREDIT_KEYS = ("format", "name", "key", "value", "parallel", "process", "summary", "score", "omission", "r_tool",
               "r_sum", "r_succ", "r_action")  # the rewards advantage.py reads, and Eq. 2's parts
STOPS = ("done", "no_call", "turns", "tool_rounds", "length")  # rollout.py's stop reasons
SCORE_KEYS = ("format", "name", "key", "value", "parallel", "process", "summary", "score", "omission",
              "r_tool", "r_sum", "tool_turns", "length")  # per-rollout scores averaged into each RL step's metrics
UNSCORED = 0.5   # --max-unscored: "most" RL rows, calls or summaries that cannot earn a reward stop the run
BLIND_STEPS = 3  # RL steps in a row over --max-unscored before the run stops (as --max-bad-updates' default)
FIX = {"sim": "serve a simulator and pass --sim-url URL --sim-model NAME (or --sim-model FOLDER, in-process)",
       "judge": "serve a judge and pass --judge-url URL --judge-model NAME (or --judge-model FOLDER, in-process)"}


def plan(n_rl, n_eval, n_sft, sft_done, steps, config):
    """One line saying which stages this run has, and their sizes, before the first one starts (`config`:
    the run's flags, a dict)."""
    sft_epochs, sft_batch, epochs, eval_every = (config[k] for k in ("sft_epochs", "sft_batch", "epochs", "eval_every"))
    prompts_per_step, group_size = config["prompts_per_step"], config["group_size"]
    sft = ("SFT: done before, in <out>/sft" if sft_done else
           f"SFT: {n_sft:,} conversations x {sft_epochs} epochs, {sft_batch} a step" if n_sft else
           "SFT: none (no --sft-data)")
    rl = f"RL: {steps:,} steps of {prompts_per_step} prompts x G = {group_size} ({n_rl:,} prompts x {epochs} epochs)"
    when = f"every {eval_every} steps, " if eval_every else ""
    ev = f"eval: {n_eval:,} prompts before RL, {when}after RL" if n_eval else "eval: none (no --eval-data)"
    return f"plan: {sft} -> {rl} -> {ev}"


def rl_state(config, model, opt, logs, n_tasks, rank):
    """The RL state to start from (`config`: the run's flags, a dict): fresh, or (--resume) the newest
    checkpoint in --out that reads back, with the logs cut back to that point (from the SFT result in
    <out>/sft when there is none). Returns (first step, data order, the checkpoint found or None)."""
    out, epochs, seed, resume = config["out"], config["epochs"], config["seed"], config["resume"]
    sft_dir = os.path.join(out, "sft")
    order = data_order(n_tasks, epochs, seed)
    random.seed(seed + 1)  # RL starts from the same RNG state whether SFT ran now or in an earlier process
    torch.manual_seed(seed + 1)
    start, found = 0, resume_point(out, model, opt, config, rank) if resume else None
    if found:                                            # model and opt hold its state
        folder, state, rng = found
        set_rng_state(rng)
        start, order = state["step"], state["order"]
        logs.rewind(state.get("logs"))
        if rank == 0:
            print(f"resumed from {folder}: RL step {start}")
    elif resume:  # from the SFT result (its run.json holds the logs' lengths then), or from nothing
        info = os.path.join(sft_dir, "run.json")
        logs.rewind(read_json(info).get("logs") if os.path.isfile(info) else None if os.path.isdir(sft_dir)
                    else dict.fromkeys(LOGS, 0))
    return start, order, found


def step_metrics(step, rs, scores, batch, stats, sums, *, sim_fail, judge_fail, bad, t_roll, t_train, ppo_epochs):
    """One RL step's metrics row: sums over this rank's rollouts (`sums`: the advantages' and the
    simulator's, advantage.seg_stats and turn_stats), added up over ranks, then means (the loss stats
    are shares of each mini-batch, so they are averaged over the updates). Returns (row, the sums)."""
    loss_keys = [k for k in stats if k not in ("loss", "grad_norm", "skipped", "updates", "grad_cosine")]
    local = {**{k: sum(float(s[k]) for s in scores) for k in SCORE_KEYS}, "n": float(len(rs)), **sums,
             **{k: stats[k] for k in loss_keys},
             **{f"stop_{k}": float(sum(r.stop == k for r in rs)) for k in STOPS},
             "sim_failed": float(sim_fail.sum()), "judge_failed": float(judge_fail.sum()),
             "answered": float(sum(len(r.responses) for r in rs)),
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


def log_step(logs, m, rs, scores, turn_r, advs, *, main_rank, show):
    """Log the step's metrics `m` (its row, m["step"] the step) and every rollout (gathered from all ranks), the token ids of the
    first CREDIT_GROUPS groups of each rank (credit.jsonl), print a line and `show` rollouts.
    advs: SLCA's (adv_tool, adv_sum) and which rollouts entered the group statistics, (B,) each."""
    logs.write(m)
    step, (at, asum, keep) = m["step"], advs
    rows = [{"step": step, "group": r.group, "question": r.task.question, "turns": r.turns, "stop": r.stop,
             **{k: s[k] for k in ("process", "summary", "score", "r_tool", "r_sum", "extra", "extra_blocks", "called",
                                  "redundant") if k in s},
             "r_turn": turn_r[i], "adv_tool": float(at[i]), "adv_sum": float(asum[i])}
            for i, (r, s) in enumerate(zip(rs, scores))]
    for row in gather(rows):
        logs.write(row, "rollouts")
    shown = sorted({r.group for r in rs})[:CREDIT_GROUPS]
    first = {r.group: i for i, r in reversed(list(enumerate(rs)))}  # the group's first rollout holds its prompt
    credit = [{"step": step, "group": r.group, "question": r.task.question, "ids": r.ids, "mask": r.mask,
               **({"prompt": r.prompt} if first[r.group] == i else {}), "keep": bool(keep[i]),
               "rewards": {k: s[k] for k in CREDIT_KEYS if k in s}, "r_turn": turn_r[i]}
              for i, (r, s) in enumerate(zip(rs, scores)) if r.group in shown]
    for row in gather(credit):
        logs.write(row, "credit")
    if main_rank:
        tqdm.write(f"step {step}: score {m['score']:.3f} process {m['process']:.3f} summary {m['summary']:.3f} "
                   f"tool_turns {m['tool_turns']:.2f} kl {m['kl']:.4f} clip {m['clip_frac']:.3f} "
                   f"conflict {m['sign_conflict']:.2f}")
        for r, s in list(zip(rs, scores))[:: max(1, len(rs) // max(1, show))][:show]:
            tqdm.write(f"  [{s['score']:+.2f} tool {s['r_tool']:.2f} sum {s['r_sum']:.2f} {r.stop}] "
                       f"{r.task.question[:80]!r}\n    -> {r.text[-300:]!r}")


# ---------------------------------------------------------------------------------------------
# the guards: no reward that cannot be earned, no step that lost most of its answers to the network
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


def blind_steps(m, before, limit):
    """The RL steps in a row, this one (metrics row `m`) included, whose share of calls the simulator
    could not answer or of summaries the judge could not rate is over `limit`."""
    return before + 1 if max(m["replay_miss"], m["unrated"]) > limit else 0


def stop_if_blind(m, step, limit):
    """Stop the run, in one line saying why, once BLIND_STEPS steps in a row could not earn a reward."""
    if m["blind_steps"] < BLIND_STEPS:
        return
    why = [f"{m['replay_miss']:.0%} of the answered tool calls were answered 'no matching record' by rows that "
           f"record no tool response ({FIX['sim']})"] if m["replay_miss"] > limit else []
    why += [f"the judge could not rate {m['unrated']:.0%} of the judged summaries ({FIX['judge']})"] \
        if m["unrated"] > limit else []
    raise SystemExit(f"stopping at RL step {step}: {BLIND_STEPS} steps in a row over --max-unscored {limit}: "
                     f"{'; '.join(why)}")


def check_failures(tot, limit, step, sim, judge):
    """Stop the run when more than `limit` of a step's rollouts (`tot`: step_metrics' sums) lost a tool
    or judge answer to an endpoint failure; `sim`, `judge`: the endpoints' names."""
    fail = (tot["sim_failed"] + tot["judge_failed"]) / tot["n"]
    if fail > limit:
        which = [f"the simulator ({sim})" if tot["sim_failed"] else "", f"the judge ({judge})" if tot["judge_failed"] else ""]
        raise SystemExit(f"stopping at RL step {step}: {fail:.0%} of the rollouts lost an answer to endpoint "
                         f"failures ({' and '.join(w for w in which if w)}); over --max-fail-rate {limit}")
