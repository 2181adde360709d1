"""train.py itself under torchrun, for tests/test_distributed.py:

    torchrun --standalone --nproc_per_node 2 tests/dist_train.py TRAIN_ARGS...

It runs train.main unchanged, with two optional hooks set by environment variables:
DIST_RECORD=FOLDER saves each rank's first PPO update to FOLDER/ppo-rank<r>.pt (its inputs:
this rank's rollout batch, old and reference log-probs and advantages; and the stats it
returned), so a one-process update can be run on the same rollouts; DIST_KILL_AFTER=N makes
rank 0 SIGKILL the torchrun agent (the workers' parent) once checkpoint step-N is complete, as
`kill -9` of the job would; the workers must then die with it (dist.die_with_agent)."""
import os
import signal
import sys

import torch

from lib.training import dist
import train

real_update, real_save = train.ppo_update, train.save_checkpoint
record, kill_after = os.environ.get("DIST_RECORD"), os.environ.get("DIST_KILL_AFTER")


def ppo_update(model, opt, batch, a, bad):
    inputs = {"batch": {k: v.clone() for k, v in batch.items()}}
    stats, bad = real_update(model, opt, batch, a, bad)
    global record
    if record:
        torch.save({**inputs, "stats": stats}, os.path.join(record, f"ppo-rank{torch.distributed.get_rank()}.pt"))
        record = None                                                     # the first update only
    return stats, bad


def save_checkpoint(model, opt, config, step, order, rank, **kw):
    real_save(model, opt, config, step, order, rank, **kw)
    if kill_after and step == int(kill_after) and rank == 0:
        os.kill(os.getppid(), signal.SIGKILL)


train.ppo_update, train.save_checkpoint = ppo_update, save_checkpoint
if __name__ == "__main__":
    train.main(sys.argv[1:])
    dist.end_worker()
