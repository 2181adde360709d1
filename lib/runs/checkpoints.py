"""Checkpoints: what lets a run survive a kill (docs/scaling.md).

ckpt/step-N/ is written to ckpt/.tmp-step-N and renamed (by rank 0, after every rank has
written), so a folder that exists is complete; it holds the model and optimizer state (in
state.pt in one process; under torchrun one shard per rank in shards/, written and read by
torch.distributed.checkpoint, nothing gathered), every rank's RNG state, the next step, the
data order, the byte length of each log file, and the config. `resume_point` loads the newest
checkpoint that reads back (files loaded with weights_only, the shards' metadata through an
allowlist), skips a damaged one saying which and why, and stops with one line on one of another
config, model shape or process count. `save_final` writes the whole model as a Hugging Face
folder, renamed into place the same way.
"""
import dataclasses
import json
import os
import pickle
import random
import re
import shutil

import torch
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint import CheckpointException, FileSystemReader
from torch.distributed.checkpoint.filesystem import _StorageInfo
from torch.distributed.checkpoint.metadata import Metadata, StorageMeta, TensorStorageMetadata

from lib.training.dist import barrier, gather, world
from lib.runs.runfolder import Unusable, config_diff, failure, read_json, reason, writing


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


def save_checkpoint(model, opt, config, step, order, rank, *, logs=None):
    """Weights, optimizer, every rank's RNG, the next step, the data order, `logs` (rank 0's
    byte length of each log file) and `config` (the run's flags, a dict), written to
    <config["out"]>/ckpt/.tmp-step-N and renamed. One process: the weights and optimizer in state.pt. Under
    torchrun: each rank writes its own shard of them to shards/ (dcp.save; tensors only) and
    state.pt holds the optimizer's param_groups instead. Keeps the last `keep` checkpoints up to
    this step (a later one, skipped as damaged on resume, is replaced when the run gets there)."""
    out, keep = config["out"], config["keep"]
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
    """A Hugging Face folder of the whole model (a LoRA model's: its adapter, lib/training/lora.py), never
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
# --resume: the newest checkpoint that reads back is the one used
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
