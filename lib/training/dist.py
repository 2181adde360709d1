"""Processes and sharding: what lets train.py run under torchrun (docs/scaling.md).

torchrun sets RANK/WORLD_SIZE/LOCAL_RANK and `setup_dist` joins the process group (nccl on
GPUs, gloo on CPUs); a worker dies with torchrun (`die_with_agent`); a plain run is rank 0 of 1
and every helper here is then a no-op. `shard` wraps a model with FSDP2 (`fully_shard` per
decoder layer, parameters gathered in the compute dtype, gradients reduced in float32);
`as_forward` runs work on the root's own parameters (the output head applied in chunks) as a
forward of the root; `gathered` holds the whole policy on every rank while it samples, so ranks
generate without collectives; `all_sum` and `gather` carry the loss normaliser, the metrics and
the records across ranks.

`rank_prompts` gives each rank an equal share of every mini-batch's prompts; `deterministic`
turns on torch's deterministic algorithms on CPU, so a one-thread run repeats bit for bit.
"""
import ctypes
import logging
import os
import signal
import sys
from contextlib import contextmanager

import torch
import torch.distributed as dist


def setup_dist(device=None):
    """Join the process group when launched by torchrun; returns (rank, world, device): `device`
    (default cuda when there is one, else cpu) in one process, this rank's GPU or cpu under torchrun."""
    if int(os.environ.get("WORLD_SIZE", "1")) == 1:
        return 0, 1, device or ("cuda" if torch.cuda.is_available() else "cpu")
    cuda = torch.cuda.is_available() and (device or "cuda").startswith("cuda")
    if cuda:
        torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    die_with_agent()
    dist.init_process_group("nccl" if cuda else "gloo")
    return dist.get_rank(), dist.get_world_size(), f"cuda:{os.environ['LOCAL_RANK']}" if cuda else "cpu"


def leave_dist():
    """Leave the process group at the end of a run, every rank at once (no-op in one process)."""
    if dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()


def end_worker():
    """End a torchrun worker without Python's teardown (the last line of a script; returns in one
    process). gloo's worker threads outlive destroy_process_group, and one still dropping its last
    collective's tensors while the interpreter finalizes dies in a destructor: SIGABRT, "terminate
    called without an active exception" (CPython 3.11; a failed run to torchrun after the weights
    were saved). Measured on tests/dist_update.py: 4 of 47 runs; with a barrier before leaving
    still 1 in a loaded test run. Every file is closed by then; the logs and stdio are flushed."""
    if int(os.environ.get("WORLD_SIZE", "1")) > 1:
        logging.shutdown()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)


PR_SET_PDEATHSIG = 1  # linux/prctl.h


def die_with_agent():
    """torchrun starts each worker in a session of its own, so a SIGKILL of torchrun (kill -9 of
    the job, the OOM killer) leaves the workers training and writing to --out, beside a later
    --resume. On Linux the kernel is asked to SIGKILL this worker when its parent, the agent, dies."""
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


def world():
    return dist.get_world_size() if dist.is_initialized() else 1


def all_sum(x):
    """Sum a float (or a list of floats) over ranks."""
    if world() == 1:
        return x
    t = torch.tensor(x, dtype=torch.float64)
    dist.all_reduce(t)
    return t.tolist()


def gather(items):
    """Concatenate each rank's list, in rank order (every rank gets the result)."""
    if world() == 1:
        return list(items)
    out = [None] * world()
    dist.all_gather_object(out, list(items))
    return [x for part in out for x in part]


def barrier():
    if world() > 1:
        dist.barrier()


def rank_prompts(n, mini_batch, rank, world):
    """Positions (in the step's list of n prompts) that this rank takes: an equal share of
    every mini-batch, so the union over ranks of each rank's k-th mini-batch is the
    single-process k-th mini-batch and the update is the same."""
    share = mini_batch // world
    return [k + rank * share + i for k in range(0, n, mini_batch) for i in range(share)]


def shard(model, dtype):
    """FSDP2: one unit per decoder layer (the model's `_no_split_modules`), then the root,
    gathering parameters in the compute dtype and reducing gradients in float32; a no-op in a
    single process."""
    if world() == 1:
        return model
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard, register_fsdp_forward_method
    mp = MixedPrecisionPolicy(param_dtype=getattr(torch, dtype), reduce_dtype=torch.float32)
    for layer in [m for m in model.modules() if type(m).__name__ in model._no_split_modules]:  # decoder layers
        fully_shard(layer, mp_policy=mp)
    fully_shard(model, mp_policy=mp)
    model.root_call = lambda fn: fn()            # `as_forward` runs fn inside the root's forward hooks
    register_fsdp_forward_method(model, "root_call")
    return model


def as_forward(model, fn):
    """fn() run as a forward pass of `model`, for work that uses the root's own parameters
    outside model(...) (lib/training/logprobs.py runs the trunk, then the output head in chunks). Under FSDP2
    the root's parameters (embeddings, final norm, lm_head, tied or not) are whole only inside
    a forward of the root: here they are gathered before fn, a hook on fn's output gathers them
    again for the backward, and their gradients are reduce-scattered after it, as for model(...).
    fn must call the model's parts (`model.get_decoder()`), never model(...) itself: a nested
    root forward would reshard them on its way out. A plain call in one process."""
    return model.root_call(fn) if hasattr(model, "root_call") else fn()


@contextmanager
def gathered(model):
    """Full weights on every rank while sampling, so each rank generates on its own without
    collectives (FSDP2 gathers once here instead of once per decoded token)."""
    from torch.distributed.fsdp import FSDPModule
    units = [m for m in model.modules() if isinstance(m, FSDPModule)] if world() > 1 else []
    for m in units:
        m.set_reshard_after_forward(False, recurse=False)
        m.unshard()
    try:
        yield model
    finally:
        for m in units:  # back to fully_shard's default: the root keeps its parameters from forward to backward
            m.reshard()
            m.set_reshard_after_forward(m is not model, recurse=False)


def deterministic(device):
    """On CPU, torch's deterministic algorithms. Without them, the backward of the rows' read of
    their group's shared prompt keys and values (lib/training/logprobs.py) adds the rows in whatever order
    the threads get there, and two-thread runs differ even on an idle machine."""
    if torch.device(device).type == "cpu":
        torch.use_deterministic_algorithms(True)
