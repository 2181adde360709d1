"""Processes, sharding, precision and checkpoints: what lets train.py run under torchrun and
survive a kill (docs/scaling.md).

Distributed: torchrun sets RANK/WORLD_SIZE/LOCAL_RANK and `setup_dist` joins the process
group (nccl on GPUs, gloo on CPUs); a worker dies with torchrun (`die_with_agent`); a plain
run is rank 0 of 1 and every helper here is then a no-op. `shard` wraps a model with FSDP2
(`fully_shard` per decoder layer, parameters gathered in the compute dtype, gradients reduced
in float32); `as_forward` runs work on the root's own parameters (the output head applied in
chunks) as a forward of the root; `gathered` holds the whole policy on every rank while it
samples, so ranks generate without collectives; `all_sum` and `gather` carry the loss
normaliser, the metrics and the records across ranks.

Precision: the trained weights, their gradients and AdamW's state stay float32; `autocast`
runs the forward passes in --dtype, and `cast_once` gives sampling (which changes no weight)
one cast of them instead of one per forward.

`rank_prompts` gives each rank an equal share of every mini-batch's prompts; `deterministic`
turns on torch's deterministic algorithms on CPU, so a one-thread run repeats bit for bit.

Run folder: `lock` lets one run at a time use an --out (an flock the kernel drops when the
process dies). `writing` turns a failed write (read-only folder, full disk) into one line naming
the path, removing the half-written temporary folder; nothing written earlier is touched.
`open_run` starts a run in its folder, or checks the one --resume continues. `stop_requests`
turns SIGTERM and SIGINT into a request that the run stops at its next step boundary
(`stop_if_asked`, agreed over ranks, checkpoints there and exits with 128 + the signal).

Checkpoints: ckpt/step-N/ is written to ckpt/.tmp-step-N and renamed (by rank 0, after every
rank has written), so a folder that exists is complete; it holds the model and optimizer state
(in state.pt in one process; under torchrun one shard per rank in shards/, written and read by
torch.distributed.checkpoint, nothing gathered), every rank's RNG state, the next step, the data
order, the byte length of each log file, and the config. `check_resume` refuses a resumed run
whose config differs, naming the keys; `resume_point` loads the newest checkpoint that reads
back (files loaded with weights_only, the shards' metadata through an allowlist), skips a
damaged one saying which and why, and stops with one line on one of another config, model
shape or process count.
"""
import ctypes
import dataclasses
import fcntl
import json
import logging
import os
import pickle
import random
import re
import shutil
import signal
import sys
import threading
from contextlib import contextmanager, nullcontext

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from safetensors import SafetensorError, safe_open
from torch.distributed.checkpoint import CheckpointException, FileSystemReader
from torch.distributed.checkpoint.filesystem import _StorageInfo
from torch.distributed.checkpoint.metadata import Metadata, StorageMeta, TensorStorageMetadata

RESUME_FREE = {"resume", "overwrite", "show", "device", "out", "report_to", "preset"}  # flags a resumed run may change (a run folder may move; the preset is checked by its values)


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
    outside model(...) (lib/logprobs.py runs the trunk, then the output head in chunks). Under FSDP2
    the root's parameters (embeddings, final norm, lm_head, tied or not) are whole only inside
    a forward of the root: here they are gathered before fn, a hook on fn's output gathers them
    again for the backward, and their gradients are reduce-scattered after it, as for model(...).
    fn must call the model's parts (`model.get_decoder()`), never model(...) itself: a nested
    root forward would reshard them on its way out. A plain call in one process."""
    return model.root_call(fn) if hasattr(model, "root_call") else fn()


def autocast(dtype, device):
    """Compute in `dtype` (a torch dtype's name) on `device` while the trained weights, their gradients and AdamW's state stay in
    float32 (a bf16 weight cannot take a 1e-6 step: its spacing near 0.02 is about 1e-4). The cast of
    each weight is not cached: torch's cache lives until the context exits, and train.py holds one
    context over many optimizer steps (all of SFT, all of an RL step's mini-batches), so a cached
    cast would run every later forward on the weights of the first one."""
    if dtype == "float32":
        return nullcontext()
    return torch.autocast(torch.device(device).type, dtype=getattr(torch, dtype), cache_enabled=False)


def native_bf16(device="cpu", cpuinfo="/proc/cpuinfo"):
    """Whether `device` computes in bf16 natively: a GPU, or a CPU whose flags hold AVX512-BF16 or
    AMX. Elsewhere torch emulates bf16 (on an AVX2-only EPYC here a (64, 576) x (576, 1536) matmul
    took 7.2x float32's time, and the smol preset's SFT step 120 s); unknown (no Linux flags) counts as native."""
    if torch.device(device).type != "cpu":
        return True
    try:
        with open(cpuinfo) as f:
            flags = set(next((line for line in f if line.startswith("flags")), "").split())
    except OSError:
        return True
    return not flags or bool(flags & {"avx512_bf16", "amx_bf16"})


def bf16_note(dtype, device):
    """The line train.py and eval.py print when `dtype` is bf16 on a CPU that emulates it, else None."""
    if dtype == "bfloat16" and not native_bf16(device):
        return ("note: this CPU has no native bfloat16 (no AVX512-BF16 or AMX flag): torch emulates it, "
                "several times slower than --dtype float32")
    return None


@contextmanager
def cast_once(model, dtype):
    """The weights sampling reads, cast to `dtype` once for the context instead of at every
    forward (autocast's cast cache is off, see `autocast`, so each decoded token would cast every
    weight again). In one process below float32, each nn.Linear's float32 weight and bias (what
    autocast casts: the matmuls' operands) is replaced by its cast for the context's duration and
    the float32 master put back on exit: the copy is made from the weights as they are on entry and
    freed on exit, so a context must hold no optimizer step. The cast is autocast's own, so every
    output is bit for bit what autocast alone computes; embeddings and norms stay float32, as
    autocast leaves them. A tied head is cast, its embedding not. Nested, or in float32: nothing to
    cast. Under FSDP2 nothing is done: `gathered` already holds the weights in the compute dtype
    (shard's MixedPrecisionPolicy gathers them so, once for the context)."""
    kept = []                                                # (module, name, float32 master)
    try:  # a failed cast (out of memory) puts back the ones made
        if dtype != "float32" and world() == 1:
            _cast_linears(model, dtype, kept)
        yield model
    finally:
        for m, k, p in kept:
            m._parameters[k] = p


def _cast_linears(model, dtype, kept, skip=()):
    """Replace each nn.Linear's float32 weight and bias (but those in `skip`) by its cast to `dtype`, one
    cast per tensor (a tied weight is cast once), appending (module, name, float32 master) to `kept`."""
    casts = {}                                               # id of a master -> its cast
    for m in [m for m in model.modules() if isinstance(m, torch.nn.Linear)]:
        for k, p in m._parameters.items():
            if p is not None and p.dtype == torch.float32 and id(p) not in skip:
                if id(p) not in casts:
                    casts[id(p)] = torch.nn.Parameter(p.detach().to(getattr(torch, dtype)), requires_grad=False)
                kept.append((m, k, p))
                m._parameters[k] = casts[id(p)]


def frozen_cast(model, dtype):
    """A frozen float32 model (the RL reference) stored the way cast_once and autocast compute the
    policy in one process: each nn.Linear's weight and bias in `dtype`, norms and embeddings float32,
    a head tied to the embeddings left to autocast's cast at each forward (no second copy). Its
    log-probs under autocast then equal the policy's bit for bit while the weights are equal (a
    reference loaded whole in bf16 rounds the norms and embeddings too: KL 6e-4 a token at RL step
    0 for SmolLM2-135M). In float32, or under FSDP2 (which gathers every parameter in `dtype` for
    policy and reference alike), `model` as it is."""
    if dtype != "float32" and world() == 1:
        embedded = {id(p) for m in model.modules() if isinstance(m, torch.nn.Embedding) for p in m.parameters()}
        _cast_linears(model, dtype, [], skip=embedded)
    return model


def deterministic(device):
    """On CPU, torch's deterministic algorithms. Without them, the backward of the rows' read of
    their group's shared prompt keys and values (lib/logprobs.py) adds the rows in whatever order
    the threads get there, and two-thread runs differ even on an idle machine."""
    if torch.device(device).type == "cpu":
        torch.use_deterministic_algorithms(True)


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


def model_state(model):
    """The model's state dict less its frozen parameters (LoRA's base weights, which the run loads
    from their folder again); the whole state dict when everything trains."""
    return {k: v.detach() for k, v in model.state_dict(keep_vars=True).items()
            if not isinstance(v, torch.nn.Parameter) or v.requires_grad}


def full_state(model):
    """model_state, whole, on CPU (gathered to rank 0 under FSDP; other ranks get {})."""
    if world() == 1:
        return model_state(model)
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict
    return get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))


# ---------------------------------------------------------------------------------------------
# the run folder: one run at a time, failed writes as one line, atomic checkpoints
LOCK = ".lock"  # in --out; holds the pid of the run that has the folder


class Unusable(Exception):
    """A checkpoint file that cannot be read back (zero bytes, truncated, garbled)."""


def reason(e):
    """The OS's words for a failed write (torch's zip writer wraps them in a RuntimeError), else
    the first line of the error; of a sharded save or load (dcp), its first rank's error."""
    if isinstance(e, CheckpointException):
        return reason(failure(e))
    for x in (e, e.__cause__, e.__context__):
        if isinstance(x, OSError) and x.strerror:
            return x.strerror
    line = (str(e).splitlines() or [""])[0][:200]
    return f"{type(e).__name__}: {line}" if line else type(e).__name__


def failure(e):
    """The error of the first rank that failed a dcp.save or dcp.load (every rank gets them all)."""
    return e.failures[min(e.failures)][0]


@contextmanager
def writing(path, tmp=None):
    """A failed write (a read-only folder, a full disk) becomes one line naming `path`, after the
    half-written folder `tmp` is removed; nothing written before is touched."""
    try:
        yield
    except (OSError, RuntimeError, SafetensorError, CheckpointException) as e:  # torch.save, safetensors, dcp.save
        if tmp:
            shutil.rmtree(tmp, ignore_errors=True)
        raise SystemExit(f"cannot write {path}: {reason(e)}") from None


def lock(out, rank):
    """One run per `out`: rank 0 takes an exclusive flock on out/.lock for the whole run (the
    kernel drops it when the process dies, so a killed run never leaves it stuck) and every rank
    learns the outcome, so a second torchrun job is refused as a whole. Returns the open lock
    file (rank 0; closing it releases the lock) or None."""
    path, f, busy = os.path.join(out, LOCK), None, ""
    if rank == 0:
        with writing(path):
            os.makedirs(out, exist_ok=True)
            f = open(path, "a+")
            try:
                fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
                f.truncate(0)
                f.write(f"{os.getpid()}\n")
                f.flush()
            except BlockingIOError:
                f.seek(0)
                pid = f.read(32).strip()
                f.close()
                f, busy = None, f"--out {out} is in use by another run (pid {pid or '?'}): wait for it or pick another --out"
    busy = gather([busy])[0]                                # rank 0's outcome, on every rank
    if busy:
        raise SystemExit(busy)
    return f


STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)  # what a scheduler sends before it kills a job; Ctrl-C


@contextmanager
def stop_requests():
    """SIGTERM and SIGINT ask the run to stop: the handler only records the signal (in the list
    yielded), and the run stops at its next step boundary. A second signal acts as it would
    have without this (SIGTERM kills, SIGINT raises KeyboardInterrupt)."""
    got = []
    if threading.current_thread() is not threading.main_thread():  # Python delivers signals to the main thread only
        yield got
        return

    def handler(sig, frame):
        got.append(sig)
        signal.signal(sig, old[sig])

    old = {s: signal.signal(s, handler) for s in STOP_SIGNALS}
    try:
        yield got
    finally:
        for s, h in old.items():
            signal.signal(s, h)


def stop_signal(got):
    """The stop signal that any rank got, else 0; every rank calls this at the same boundary."""
    return max(gather([got[0] if got else 0]))


def stop_if_asked(got, main_rank, out=None, step=None, steps=None, checkpoint=None):
    """At a boundary: when a stop signal came (stop_signal), exit with 128 + its number, after
    `checkpoint(step)` when given (an RL step boundary that is not on disk yet). step None:
    during SFT, which --resume redoes."""
    sig = stop_signal(got)
    if not sig:
        return
    if checkpoint:
        checkpoint(step)
    if main_rank and step is None:
        print(f"stopped by {signal.Signals(sig).name} during SFT; --resume redoes SFT from its start", flush=True)
    elif main_rank:
        print(f"stopped by {signal.Signals(sig).name} at RL step {step} of {steps} (a checkpoint is in "
              f"{os.path.join(out, 'ckpt', f'step-{step}')}); continue with --resume", flush=True)
    raise SystemExit(128 + sig)


def open_run(out, config, resume, overwrite, main_rank):
    """Start the run in `out` (which this process holds: `lock`) or check the one `resume`
    continues against `config` (the run's flags, a dict). A fresh run writes config.json;
    an earlier run's files need `resume` or `overwrite` (which removes them, not the lock).
    False when the resumed run is finished (final/ exists): nothing to do."""
    final = os.path.join(out, "final")
    # rank 0's view, before it writes anything: another rank listing later would see its config.json
    earlier = gather([main_rank and any(n != LOCK for n in os.listdir(out))])[0]
    if resume:
        check_resume(out, config)
        if os.path.isdir(final):
            if main_rank:
                try:
                    n = read_json(os.path.join(final, "run.json")).get("rl_steps", "?")
                except Unusable:
                    n = "?"
                print(f"run in {out} already finished ({n} RL steps, model in {final}); nothing to do")
            return False
    elif not overwrite and earlier:
        raise SystemExit(f"--out {out} holds an earlier run: pass --resume to continue it or --overwrite to replace it")
    elif main_rank:
        with writing(out):
            for n in sorted(set(os.listdir(out)) - {LOCK}) if overwrite else []:  # not the lock this process holds
                p = os.path.join(out, n)
                if os.path.isdir(p) and not os.path.islink(p):
                    shutil.rmtree(p)
                else:
                    os.remove(p)
            with open(os.path.join(out, "config.json"), "w") as f:
                json.dump(config, f, indent=1)
    barrier()
    return True


CKPT_RE = re.compile(r"step-(\d+)$")


def checkpoints(out):
    """Checkpoint folders in `out` (complete ones: a half-written one has another name), oldest first."""
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


def save(obj, path):
    """torch.save through a Python file (so a failed write reports the OS's reason), synced to
    disk before the folder is renamed."""
    with open(path, "wb") as f:
        torch.save(obj, f)
        f.flush()
        os.fsync(f.fileno())


def save_checkpoint(model, opt, out, config, keep, step, order, rank, logs=None):
    """Weights, optimizer, every rank's RNG, the next step, the data order, `logs` (rank 0's
    byte length of each log file) and `config` (the run's flags, a dict), written to
    out/ckpt/.tmp-step-N and renamed. One process: the weights and optimizer in state.pt. Under
    torchrun: each rank writes its own shard of them to shards/ (dcp.save; tensors only) and
    state.pt holds the optimizer's param_groups instead. Keeps the last `keep` checkpoints up to
    this step (a later one, skipped as damaged on resume, is replaced when the run gets there)."""
    folder = os.path.join(out, "ckpt")
    tmp, final = os.path.join(folder, f".tmp-step-{step}"), os.path.join(folder, f"step-{step}")
    state = {"step": step, "order": order, "world": world(), "logs": logs}
    if world() == 1:
        msd = state["model"] = model_state(model)
        state["optimizer"] = opt.state_dict()
    else:
        from torch.distributed.checkpoint.state_dict import get_state_dict
        msd, osd = get_state_dict(model, opt)                     # this rank's shards (DTensors)
        state["groups"] = osd["param_groups"]
    check_finite(msd)
    if rank == 0:
        with writing(tmp, tmp):
            shutil.rmtree(tmp, ignore_errors=True)
            os.makedirs(tmp)
    barrier()
    if world() > 1:
        with writing(os.path.join(tmp, "shards"), tmp):
            dcp.save({"model": msd, "optimizer": osd["state"]}, checkpoint_id=os.path.join(tmp, "shards"))
    with writing(os.path.join(tmp, f"rng-{rank}.pt"), tmp):
        save(rng_state(), os.path.join(tmp, f"rng-{rank}.pt"))
    if rank == 0:
        with writing(os.path.join(tmp, "state.pt"), tmp):
            save(state, os.path.join(tmp, "state.pt"))
        with writing(os.path.join(tmp, "config.json"), tmp), open(os.path.join(tmp, "config.json"), "w") as f:
            json.dump(config, f, indent=1)
    barrier()
    if rank == 0:
        with writing(final):
            if os.path.exists(final):
                shutil.rmtree(final)
            os.replace(tmp, final)
            for old in [c for c in checkpoints(out) if int(CKPT_RE.search(c).group(1)) <= step][:-keep]:
                shutil.rmtree(old)
    barrier()


def check_finite(state):
    """Refuse to save non-finite weights: `state` is this rank's (whole on rank 0, {} on the
    others, or each rank's shards); every rank stops alike."""
    local = lambda v: v.to_local() if hasattr(v, "to_local") else v  # noqa: E731 a DTensor's shard on this rank
    bad = list(dict.fromkeys(gather([k for k, v in state.items()   # in order, once (ranks share names)
                                     if torch.is_tensor(v) and v.is_floating_point() and not torch.isfinite(local(v)).all()])))
    if bad:
        raise SystemExit(f"refusing to save non-finite weights ({len(bad)} tensors, e.g. {bad[0]})")


def save_final(model, tok, path, rank, info=None, merged=None):
    """A Hugging Face folder of the whole model (a LoRA model's: its adapter, lib/lora.py), never
    with non-finite weights, written to path.tmp and renamed; `info` (a dict) goes to its run.json.
    `merged` (a function of the model, the run's last use of it) also writes the model it returns
    to path/merged, with the tokenizer and run.json."""
    msd = full_state(model)
    check_finite(msd)
    if rank == 0:
        tmp = path + ".tmp"
        with writing(path, tmp):
            shutil.rmtree(tmp, ignore_errors=True)
            def hf(m, folder, **kw):
                m.save_pretrained(folder, **kw)
                tok.save_pretrained(folder)
                if info is not None:
                    with open(os.path.join(folder, "run.json"), "w") as f:
                        json.dump(info, f)
            hf(model, tmp, state_dict=msd)
            if merged:
                hf(merged(model), os.path.join(tmp, "merged"))
            shutil.rmtree(path, ignore_errors=True)
            os.replace(tmp, path)
    barrier()


# ---------------------------------------------------------------------------------------------
# --resume: the config must match, and the newest checkpoint that reads back is the one used
def config_diff(saved, config, where):
    """One line naming the flags whose value in `saved` differs from `config` (this run's; both
    dicts), but for RESUME_FREE ones and flags `saved` does not have (added since that run was
    started: it ran with their default behaviour); '' when none."""
    now = json.loads(json.dumps(config))
    diff = sorted(k for k in saved if k not in RESUME_FREE and saved[k] != now.get(k))
    if not diff:
        return ""
    return (f"--resume: the config differs from {where} in {', '.join('--' + k.replace('_', '-') for k in diff)}"
            f" ({'; '.join(f'{k}: {saved.get(k)!r} -> {now.get(k)!r}' for k in diff)})")


def read_json(path):
    """A JSON object from `path`; Unusable naming the file and what is wrong."""
    try:
        with open(path) as f:
            x = json.load(f)
    except FileNotFoundError:
        raise Unusable(f"{path} is missing") from None
    except (OSError, ValueError) as e:
        raise Unusable(f"{path} is not valid JSON ({os.path.getsize(path)} bytes: {reason(e)})") from None
    if not isinstance(x, dict):
        raise Unusable(f"{path} holds no JSON object")
    return x


def check_folder(path):
    """A saved model folder must read back: every JSON file parses, every safetensors file is
    whole; else one line naming the file and what is wrong."""
    for n in sorted(os.listdir(path)):
        f = os.path.join(path, n)
        try:
            if n.endswith(".json"):
                read_json(f)
            elif n.endswith(".safetensors"):
                with safe_open(f, "pt"):
                    pass
        except (Unusable, SafetensorError) as e:
            why = e if isinstance(e, Unusable) else f"{f} is damaged ({os.path.getsize(f)} bytes; {reason(e)})"
            raise SystemExit(f"--resume: {why}: restore it, or start afresh with --overwrite") from None


def check_resume(out, config):
    """The config saved in `out` must equal `config` (this run's), but for RESUME_FREE flags."""
    try:
        saved = read_json(os.path.join(out, "config.json"))
    except Unusable as e:
        raise SystemExit(f"--resume: {e}") from None
    diff = config_diff(saved, config, "the saved run")
    if diff:
        raise SystemExit(diff)


def unreadable(path, e):
    """Unusable naming a checkpoint file that did not read back, its size and why."""
    if not os.path.exists(path):
        return Unusable(f"{path} is missing")
    return Unusable(f"{path} cannot be read back ({os.path.getsize(path)} bytes; {reason(e)})")


def read(path):
    """torch.load of a checkpoint file with weights_only (nothing in it can run code); Unusable
    naming the file and what is wrong."""
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # torch reports a torn zip, an empty file and a bad pickle each its own way
        raise unreadable(path, e) from None


class Shards(FileSystemReader):
    """dcp's reader of a checkpoint's shards/, as `read` reads state.pt, so that nothing in it can
    run code: its .metadata (a pickle) is unpickled with only the classes dcp's metadata holds
    allowed (exact names: a dotted name would reach into a module's imports), and it must describe
    tensors only (dcp reads a tensor with weights_only, but a "bytes" entry with a full unpickle),
    each in one of the folder's own shard files, untransformed. A file that does not read back, or
    metadata that breaks these rules, is Unusable, named."""
    SAFE = {("torch", "Size"), ("torch.serialization", "_get_layout"), ("pathlib", "PosixPath"),
            ("torch.distributed.checkpoint.filesystem", "_StorageInfo"),
            *(("torch.distributed.checkpoint.metadata", n) for n in (
                "Metadata", "TensorStorageMetadata", "ChunkStorageMetadata", "TensorProperties", "MetadataIndex",
                "StorageMeta", "_MEM_FORMAT_ENCODING"))}
    FILE = re.compile(r"__\d+_\d+\.distcp")  # dcp's shard file names, relative to the folder

    class Unpickler(pickle.Unpickler):
        def find_class(self, module, name):
            if "." not in name and ((module, name) in Shards.SAFE
                                    or module == "torch" and isinstance(getattr(torch, name, None), torch.dtype)):
                return super().find_class(module, name)
            raise pickle.UnpicklingError(f"{module}.{name} is not allowed")

    def read_metadata(self, *args, **kwargs):
        path = os.path.join(self.path, ".metadata")
        try:
            with open(path, "rb") as f:
                md = Shards.Unpickler(f).load()
        except Exception as e:
            raise unreadable(path, e) from None
        if not isinstance(md, Metadata):
            raise Unusable(f"{path} is not a checkpoint's metadata")
        if not all(isinstance(v, TensorStorageMetadata) for v in md.state_dict_metadata.values()) or not all(
                isinstance(v, _StorageInfo) and isinstance(v.relative_path, str) and Shards.FILE.fullmatch(v.relative_path)
                and not v.transform_descriptors for v in (md.storage_data or {}).values()):
            raise Unusable(f"{path} describes more than tensors in its own shard files")
        md.storage_meta = md.storage_meta or StorageMeta()              # as FileSystemReader does
        md.storage_meta.load_id = self.load_id
        return md

    def read_data(self, plan, planner):
        """FileSystemReader's, one file at a time, so a failure names its file."""
        files = {}
        for item in plan.items:
            files.setdefault(self.storage_data[item.storage_index].relative_path, []).append(item)
        for name, items in files.items():
            try:
                super().read_data(dataclasses.replace(plan, items=items), planner).wait()
            except Exception as e:
                raise unreadable(os.path.join(self.path, name), e) from None
        done = torch.futures.Future()
        done.set_result(None)
        return done


STATE_KEYS = ("model", "optimizer", "step", "order", "world")   # state.pt of one process
SHARDED_KEYS = ("groups", "step", "order", "world")             # state.pt under torchrun, beside shards/


def check_checkpoint(folder, model, config, rank):
    """Read one checkpoint: (state, this rank's RNG state); under torchrun the shards' metadata,
    not the shards (load_checkpoint). Unusable when a file cannot be read back; SystemExit naming
    the difference when it belongs to another config, model shape or process count (a file
    copied in from elsewhere, not a damaged one)."""
    diff = config_diff(read_json(os.path.join(folder, "config.json")), config, folder)
    if diff:
        raise SystemExit(diff)
    path = os.path.join(folder, "state.pt")
    state = read(path)
    if not isinstance(state, dict):
        raise Unusable(f"{path} is not a checkpoint")
    if state.get("world", world()) != world():
        raise SystemExit(f"--resume: {folder} was written by {state['world']} processes, this run has {world()}")
    keys = STATE_KEYS if world() == 1 else SHARDED_KEYS
    if any(k not in state for k in keys):
        raise Unusable(f"{path} is not a checkpoint (no {', '.join(k for k in keys if k not in state)})")
    if world() > 1:
        md = Shards(os.path.join(folder, "shards")).read_metadata()
        theirs = {k[len("model."):]: tuple(v.size) for k, v in md.state_dict_metadata.items()
                  if k.startswith("model.") and hasattr(v, "size")}
    elif isinstance(state["model"], dict):
        theirs = {k: tuple(v.shape) if torch.is_tensor(v) else None for k, v in state["model"].items()}
    else:
        raise Unusable(f"{path} is not a checkpoint (no model state)")
    mine = {k: tuple(v.shape) for k, v in model_state(model).items()}    # whole shapes, also of FSDP2's shards
    for k in sorted(set(mine) | set(theirs)):
        if k not in theirs or k not in mine or theirs[k] != mine[k]:
            raise SystemExit(f"--resume: {folder} holds another model: {k} is "
                             f"{theirs.get(k, 'absent')} there, {mine.get(k, 'absent')} here")
    path = os.path.join(folder, f"rng-{rank}.pt")
    rng, now = read(path), rng_state()
    try:
        set_rng_state(rng)
    except Exception as e:
        raise Unusable(f"{path} holds no RNG state ({reason(e)})") from None
    finally:
        set_rng_state(now)
    return state, rng


def load_checkpoint(folder, state, model, opt):
    """Put a checkpoint that check_checkpoint passed into `model` and `opt`: from state.pt in one
    process; under torchrun each rank reads its shards (dcp.load, a collective: a shard that does
    not read back is Unusable on every rank, named)."""
    if world() == 1:
        model.load_state_dict(state["model"], strict=len(state["model"]) == len(model.state_dict()))  # LoRA's: no frozen weights
        opt.load_state_dict(state["optimizer"])
        return
    from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
    msd, osd = get_state_dict(model, opt)                               # this rank's shards, loaded in place
    shards = os.path.join(folder, "shards")
    try:
        dcp.load({"model": msd, "optimizer": osd["state"]}, storage_reader=Shards(shards))
    except CheckpointException as e:
        why = failure(e)
        raise why if isinstance(why, Unusable) else Unusable(f"{shards} cannot be read back ({reason(why)})") from None
    set_state_dict(model, opt, model_state_dict=msd, optim_state_dict={"state": osd["state"], "param_groups": state["groups"]})


def resume_point(out, model, opt, config, rank):
    """The newest checkpoint of `out` whose config matches `config` (a dict; see check_checkpoint)
    and that reads back on every rank, loaded into `model` and `opt`: (folder, state, this rank's
    RNG state), or None when there is no checkpoint. A damaged one is skipped, saying which and
    why; when none reads back, one line naming the newest one's file and what is wrong."""
    skipped = []
    for folder in reversed(checkpoints(out)):
        try:
            state, rng = check_checkpoint(folder, model, config, rank)
            why = ""
        except Unusable as e:
            state, rng, why = None, None, str(e)
        whys = [w for w in gather([why]) if w]              # every rank's verdict
        if not whys:
            try:
                load_checkpoint(folder, state, model, opt)
            except Unusable as e:                            # a shard: the same on every rank
                whys = [str(e)]
        if not whys:
            if rank == 0:
                for f, w in skipped:
                    print(f"--resume: skipping {f}: {w}")
            return folder, state, rng
        skipped.append((folder, whys[0]))
    if skipped:
        more = f"; {len(skipped) - 1} older checkpoint(s) damaged too" if len(skipped) > 1 else ""
        raise SystemExit(f"--resume: no usable checkpoint: {skipped[0][1]}{more}")
    return None
