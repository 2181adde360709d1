"""Side by side on the demo's world: TRL with SLCA (integrations/trl.py) against train.py, at equal settings.

    python train.py --steps 0 --eval-data '' --out runs/cmp/start          # the shared SFT start, once
    OMP_NUM_THREADS=1 python -m integrations.compare --start runs/cmp/start/sft --steps 10 --seeds 0 1 2

Both start from the same SFT policy (also the KL reference) and train --steps RL steps of the demo preset
(configs/demo.toml: 16 prompts x G = 8 a step, two AdamW updates of 8 prompts each, lr 1e-4, weight decay
0.01, gradient clip 1, β 0.001, ε 0.2, seq-mean-token-mean, 384 response tokens, the offline simulator
with the full schema check and the facts judge), each run in its own process on one thread. What differs:
the prompts' order (each library's sampler under the same seed), TRL's loss (no dual clip c, no clamps, old
log-probs recomputed by a forward pass rather than kept from sampling) and its step machinery. Both finals
are scored by eval.evaluate on the 200 held-out prompts (greedy); the table gives held-out Success@0.9 and
the RL phase's wall time a step (model loading included, evaluations not).
"""
import argparse
import json
import os
import subprocess
import sys
import time

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SYSTEMS = ("train.py", "trl")


def args_for(start, steps, seed, out):
    """train.py's config of one run: the demo preset on the SFT start, no SFT, no eval inside the run."""
    import train
    return train.get_args(["--model", start, "--preset", "demo", "--sft-data", "", "--eval-data", "",
                           "--steps", str(steps), "--seed", str(seed), "--out", out, "--overwrite"])


def held_out(folder, a):
    """Greedy held-out Success@0.9 of the policy in `folder` on the demo's eval split (eval.evaluate)."""
    import eval as evaluation
    from lib.inputs.data import load_tasks
    from lib.runs.config import settings
    from lib.training.model import load_policy
    from rewards import HierR
    from rollout import Episode
    model, tok = load_policy(folder, "float32", "cpu")
    sim, judge, _ = evaluation.frozen_from_flags(a)
    evals = load_tasks(os.path.join(ROOT, "data/world/eval.jsonl"))
    scores, _ = evaluation.evaluate(model.eval(), tok, evals, sim, judge, episode=settings(Episode, a),
                                    hierr=settings(HierR, a))
    return evaluation.metrics(scores)["all"]["success@0.9"]


def run_train(a):
    """train.py's RL on the start: (seconds, the final policy's folder)."""
    import train
    t0 = time.perf_counter()
    train.main(["--model", a.model, "--preset", "demo", "--sft-data", "", "--eval-data", "", "--steps", str(a.steps),
                "--seed", str(a.seed), "--out", a.out, "--overwrite"])
    return time.perf_counter() - t0, os.path.join(a.out, "final")


def run_trl(a):
    """SLCAGRPOTrainer on the same start and settings: (seconds, the final policy's folder)."""
    from trl import GRPOConfig
    import eval as evaluation
    from advantage import Credit
    from rewards import HierR
    from rollout import Episode
    from lib.inputs.data import load_tasks
    from lib.runs.config import settings
    from lib.training.model import load_policy
    from integrations.trl import SLCAGRPOTrainer
    _, tok = load_policy(a.model, "float32", "cpu")
    sim, judge, _ = evaluation.frozen_from_flags(a)
    rows = a.mini_batch * a.group_size // 2                      # an update: two micro-batches of 32 (--micro-batch)
    cfg = GRPOConfig(output_dir=os.path.join(a.out, "trl"), per_device_train_batch_size=rows,
                     gradient_accumulation_steps=2, steps_per_generation=2 * a.prompts_per_step // a.mini_batch,
                     num_generations=a.group_size, max_steps=a.steps * a.prompts_per_step // a.mini_batch,
                     learning_rate=a.lr, weight_decay=a.weight_decay, max_grad_norm=a.grad_clip,
                     lr_scheduler_type="constant", warmup_steps=0, beta=a.kl_beta, epsilon=a.clip_eps, loss_type="grpo",
                     temperature=a.temperature, max_completion_length=a.max_tokens, use_cpu=True, report_to=[],
                     save_strategy="no", logging_steps=1, disable_tqdm=True, seed=a.seed, gradient_checkpointing=False,
                     dataloader_num_workers=0, bf16=False)             # float32, as the demo
    tr = SLCAGRPOTrainer(a.model, tok, load_tasks(a.data), sim, judge, cfg, credit=settings(Credit, a),
                         episode=settings(Episode, a), hierr=settings(HierR, a))
    t0 = time.perf_counter()
    tr.train()
    seconds = time.perf_counter() - t0
    final = os.path.join(a.out, "final")
    tr.model.save_pretrained(final)
    tok.save_pretrained(final)
    return seconds, final


def child(system, start, steps, seed, out):
    torch.set_num_threads(1)
    a = args_for(start, steps, seed, out)
    seconds, final = (run_train if system == "train.py" else run_trl)(a)
    print("RESULT " + json.dumps({"system": system, "seed": seed, "s_per_step": seconds / steps,
                                  "success": held_out(final, a)}), flush=True)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--start", required=True, help="the SFT policy both runs start from (train.py's <out>/sft)")
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--out", default="runs/compare")
    p.add_argument("--child", nargs=2, metavar=("SYSTEM", "SEED"), help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.child:
        return child(a.child[0], a.start, a.steps, int(a.child[1]), os.path.join(a.out, f"{a.child[0]}-s{a.child[1]}"))
    load, rows = os.getloadavg(), []
    start = held_out(a.start, args_for(a.start, a.steps, 0, os.path.join(a.out, "start")))
    for seed in a.seeds:
        for system in SYSTEMS:                                        # one run at a time
            cmd = [sys.executable, "-m", "integrations.compare", "--start", a.start, "--steps", str(a.steps),
                   "--out", a.out, "--child", system, str(seed)]
            done = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT,
                                  env={**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"})
            line = [x for x in done.stdout.splitlines() if x.startswith("RESULT ")]
            if done.returncode or not line:
                sys.exit(f"{system} seed {seed} failed:\n{done.stdout[-2000:]}\n{done.stderr[-4000:]}")
            rows.append(json.loads(line[0][7:]))
            print(rows[-1], flush=True)
    print(f"\nSFT start: held-out Success@0.9 {start:.3f}; {a.steps} RL steps, one thread a run; load average at "
          f"start {load[0]:.2f}, at end {os.getloadavg()[0]:.2f}\n")
    print("| seed | system | held-out Success@0.9 | s / RL step |\n|---|---|---|---|")
    for r in rows:
        print(f"| {r['seed']} | {r['system']} | {r['success']:.3f} | {r['s_per_step']:.1f} |")


if __name__ == "__main__":
    main()
