"""SLCA-GRPO in TRL, a whole run: the demo's SFT start, data, simulator and judge (train.py's own), trained by
SLCAGRPOTrainer (integrations/trl.py). docs/integrations.md quotes the code below this docstring whole.

    python train.py --steps 0 --eval-data ''          # SFT only: writes runs/slca-s0/sft (python train.py does too)
    python -m integrations.trl_example --steps 10     # TRL from it, into runs/slca-s0/trl

It takes train.py's flags over the demo preset: --out the run whose sft/ it starts from and where it writes
(<out>/trl), --steps TRL's steps (each one generation of --prompts-per-step x --group-size rollouts and one
update), --data, --lr, --kl-beta and the episode's caps and sampler (rollout.Episode: --max-tokens, --max-turns,
...) as train.py reads them. Like train.py it runs in the repository's root (the presets name data/world/ from
there): from anywhere, `cd` there first.
"""
import os

from transformers import AutoTokenizer
from trl import GRPOConfig

import train
from eval import frozen_from_flags
from integrations.trl import SLCAGRPOTrainer
from lib.inputs.data import load_tasks
from lib.runs.config import settings
from rollout import Episode

a = train.get_args()                              # train.py's flags over the demo preset
start = os.path.join(a.out, "sft")                # the SFT policy train.py wrote
simulator, judge, _ = frozen_from_flags(a)        # the demo's: recorded tool answers, the facts judge
config = GRPOConfig(output_dir=os.path.join(a.out, "trl"), max_steps=a.steps, num_generations=a.group_size,
                    per_device_train_batch_size=a.prompts_per_step * a.group_size, learning_rate=a.lr,
                    beta=a.kl_beta, loss_type="grpo", logging_steps=1, bf16=False, use_cpu=True)  # float32 on a CPU
trainer = SLCAGRPOTrainer(start, AutoTokenizer.from_pretrained(start), load_tasks(a.data), simulator, judge, config,
                          episode=settings(Episode, a))    # train.py's caps and sampler (rollout.Episode)
trainer.train()
trainer.save_model()                              # the trained policy, in <out>/trl
