"""Processes, sharding, precision and checkpoints: what lets train.py run under torchrun and
survive a kill (README "Scaling out").

Distributed: torchrun sets RANK/WORLD_SIZE/LOCAL_RANK and `setup_dist` joins the process
group (nccl on GPUs, gloo on CPUs); a worker dies with torchrun (`die_with_agent`); a plain
run is rank 0 of 1 and every helper here is then a no-op. `shard` wraps a model with FSDP2
(`fully_shard` per decoder layer, parameters gathered in the compute dtype, gradients reduced
in float32); `as_forward` runs work on the root's own parameters (the output head applied in
chunks) as a forward of the root; `gathered` holds the whole policy on every rank while it
samples, so ranks generate without collectives; `all_sum` and `gather` carry the loss
normaliser, the metrics and the records across ranks.

Precision: the trained weights, their gradients and AdamW's state stay float32; `autocast`
runs the forward passes in --dtype.

Checkpoints: ckpt/step-N/ is written to ckpt/.tmp-step-N and renamed, so a folder that
exists is complete; it holds the whole model and optimizer state (gathered to rank 0), every
rank's RNG state, the next step and the data order, and the config. `check_resume` refuses a
resumed run whose config differs, naming the keys.
"""
import ctypes
import json
import os
import random
import re
import shutil
import signal
import sys
from contextlib import contextmanager, nullcontext

import torch
import torch.distributed as dist

RESUME_FREE = {"resume", "overwrite", "show", "device"}  # flags a resumed run may change


def setup_dist(a):
    """Join the process group when launched by torchrun; returns (rank, world)."""
    if int(os.environ.get("WORLD_SIZE", "1")) == 1:
        a.device = a.device or ("cuda" if torch.cuda.is_available() else "cpu")
        return 0, 1
    cuda = torch.cuda.is_available() and (a.device or "cuda").startswith("cuda")
    if cuda:
        torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    die_with_agent()
    dist.init_process_group("nccl" if cuda else "gloo")
    a.device = f"cuda:{os.environ['LOCAL_RANK']}" if cuda else "cpu"
    return dist.get_rank(), dist.get_world_size()


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
    outside model(...) (logprobs.py runs the trunk, then the output head in chunks). Under FSDP2
    the root's parameters (embeddings, final norm, lm_head, tied or not) are whole only inside
    a forward of the root: here they are gathered before fn, a hook on fn's output gathers them
    again for the backward, and their gradients are reduce-scattered after it, as for model(...).
    fn must call the model's parts (`model.get_decoder()`), never model(...) itself: a nested
    root forward would reshard them on its way out. A plain call in one process."""
    return model.root_call(fn) if hasattr(model, "root_call") else fn()


def autocast(a):
    """Compute in --dtype while the trained weights, their gradients and AdamW's state stay in
    float32 (a bf16 weight cannot take a 1e-6 step: its spacing near 0.02 is about 1e-4)."""
    if a.dtype == "float32":
        return nullcontext()
    return torch.autocast(torch.device(a.device).type, dtype=getattr(torch, a.dtype))


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


def full_state(model, opt=None):
    """(model, optimizer) state dicts, whole, on CPU (gathered to rank 0 under FSDP)."""
    if world() == 1:
        return model.state_dict(), opt.state_dict() if opt is not None else None
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict, get_optimizer_state_dict
    o = StateDictOptions(full_state_dict=True, cpu_offload=True)
    return get_model_state_dict(model, options=o), get_optimizer_state_dict(model, opt, options=o) if opt else None


def load_state(model, opt, msd, osd):
    if world() == 1:
        model.load_state_dict(msd)
        opt.load_state_dict(osd)
        return
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict, set_optimizer_state_dict
    o = StateDictOptions(full_state_dict=True, broadcast_from_rank0=True)
    set_model_state_dict(model, msd, options=o)
    set_optimizer_state_dict(model, opt, osd, options=o)


# ---------------------------------------------------------------------------------------------
# checkpoints: ckpt/step-N/ written to ckpt/.tmp-step-N and renamed, so a folder that exists is complete
CKPT_RE = re.compile(r"step-(\d+)$")


def checkpoints(out):
    """Complete checkpoints in `out`, oldest first."""
    folder = os.path.join(out, "ckpt")
    names = [n for n in os.listdir(folder) if CKPT_RE.match(n)] if os.path.isdir(folder) else []
    return [os.path.join(folder, n) for n in sorted(names, key=lambda n: int(CKPT_RE.match(n).group(1)))]


def rng_state():
    return {"python": random.getstate(), "torch": torch.get_rng_state(),
            "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else []}


def set_rng_state(s):
    random.setstate(s["python"])
    torch.set_rng_state(s["torch"])
    if s["cuda"]:
        torch.cuda.set_rng_state_all(s["cuda"])


def save_checkpoint(model, opt, a, step, order, rank):
    """Weights, optimizer, every rank's RNG, the next step and the data order, atomically."""
    folder = os.path.join(a.out, "ckpt")
    tmp, final = os.path.join(folder, f".tmp-step-{step}"), os.path.join(folder, f"step-{step}")
    msd, osd = full_state(model, opt)
    if rank == 0:
        shutil.rmtree(tmp, ignore_errors=True)
        os.makedirs(tmp)
        check_finite(msd)
    barrier()
    torch.save(rng_state(), os.path.join(tmp, f"rng-{rank}.pt"))
    if rank == 0:
        torch.save({"model": msd, "optimizer": osd, "step": step, "order": order, "world": world()},
                   os.path.join(tmp, "state.pt"))
        with open(os.path.join(tmp, "config.json"), "w") as f:
            json.dump(vars(a), f, indent=1)
    barrier()
    if rank == 0:
        os.replace(tmp, final) if not os.path.exists(final) else (shutil.rmtree(final), os.replace(tmp, final))
        for old in checkpoints(a.out)[:-a.keep]:
            shutil.rmtree(old)
    barrier()


def check_finite(state):
    bad = [k for k, v in state.items() if torch.is_tensor(v) and v.is_floating_point() and not torch.isfinite(v).all()]
    if bad:
        raise SystemExit(f"refusing to save non-finite weights ({len(bad)} tensors, e.g. {bad[0]})")


def save_final(model, tok, path, rank):
    """A Hugging Face folder of the whole model, never with non-finite weights."""
    msd, _ = full_state(model)
    if rank == 0:
        check_finite(msd)
        tmp = path + ".tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        model.save_pretrained(tmp, state_dict=msd)
        tok.save_pretrained(tmp)
        shutil.rmtree(path, ignore_errors=True)
        os.replace(tmp, path)
    barrier()


def check_resume(a):
    """The saved config must equal this run's, but for RESUME_FREE flags."""
    with open(os.path.join(a.out, "config.json")) as f:
        saved = json.load(f)
    now = json.loads(json.dumps(vars(a)))
    diff = sorted(k for k in set(saved) | set(now) if k not in RESUME_FREE and saved.get(k) != now.get(k))
    if diff:
        raise SystemExit(f"--resume: the config differs from the saved run in {', '.join('--' + k.replace('_', '-') for k in diff)}"
                         f" ({'; '.join(f'{k}: {saved.get(k)!r} -> {now.get(k)!r}' for k in diff)})")
