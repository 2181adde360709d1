"""Checkpoints and --resume. At one thread (OMP_NUM_THREADS=1), the condition under which runs are
bit-reproducible: train.py turns on torch's deterministic algorithms on CPU, which made two-thread
runs repeat on an idle machine, but a two-thread SIGTERM resume in a CI run beside another
CPU-bound job once ended a few ulps away (the matmul library's work split is not pinned), so
bit-exactness is claimed at one thread only; the uninterrupted reference runs at the same count:
- a run killed with SIGKILL (between steps, or while a checkpoint is being written), or
  stopped by SIGTERM or SIGINT (during RL or SFT), then resumed, ends with exactly the weights of
  an uninterrupted run, and its logs hold every step exactly once;
- a damaged newest checkpoint is skipped for an older one; a damaged run folder or a checkpoint
  of another model or config gives one line;
- a sharded checkpoint's metadata (torchrun's; test_distributed.py runs those) runs no code.
Each long case runs train.py in a child process, as a user would (tests/runs.py). The run folder
itself (one run per --out, a read-only --out, a full disk): test_run_folder.py."""
import json
import os
import shutil
import signal
import time

import pytest
import torch

from lib.training import dist
from lib.runs import checkpoints, runfolder
from helpers import tiny_model
from runs import ARGS, SIGNAL_ITSELF, killed_then_resumed, logged, run, same, weights

# the child SIGKILLs itself after writing the weights of checkpoint 3, before the folder is renamed
KILL_IN_WRITE = """
import os, signal, sys, torch, train
save = torch.save
def dying_save(obj, path, *a, **k):
    save(obj, path, *a, **k)
    if os.path.join(".tmp-step-3", "state.pt") in str(getattr(path, "name", path)):
        os.kill(os.getpid(), signal.SIGKILL)
torch.save = dying_save
train.main(sys.argv[1:])
"""


@pytest.mark.slow
def test_sigkill_between_steps_then_resume_is_bit_exact(reference):
    tmp, rl, sft, want = reference
    out = tmp / "killed"
    killed_then_resumed(out, rl, sft)
    assert same(weights(out), want)
    assert len(os.listdir(out / "ckpt")) <= 2              # --keep 2


@pytest.mark.slow
def test_out_and_resume_alone_read_the_run_back_and_end_bit_exact(reference):
    """`train.py --out DIR --resume`, no other flag: the run's settings come from DIR/config.json, saved whole."""
    tmp, rl, sft, want = reference
    out = tmp / "bare"
    killed_then_resumed(out, rl, sft, bare=True)
    assert same(weights(out), want)


@pytest.mark.slow
def test_sigkill_during_checkpoint_write_is_ignored_on_resume(reference):
    tmp, rl, sft, want = reference
    out = tmp / "torn"
    p = run(["-c", KILL_IN_WRITE], out, rl, sft)
    p.communicate(timeout=300)
    assert p.returncode == -signal.SIGKILL
    assert os.path.isdir(out / "ckpt" / ".tmp-step-3") and not os.path.isdir(out / "ckpt" / "step-3")
    p = run(["train.py"], out, rl, sft, "--resume")
    log = p.communicate(timeout=300)[0]
    assert p.returncode == 0, log
    assert "resumed from" in log and "step-2" in log
    assert same(weights(out), want)


@pytest.mark.slow
@pytest.mark.parametrize("sig, at, code, said", [
    ("SIGTERM", "step-1", 143, "stopped by SIGTERM at RL step 2 of 4"),
    ("SIGINT", "sft", 130, "stopped by SIGINT during SFT"),
])
def test_a_stop_signal_checkpoints_and_resume_is_bit_exact_with_each_line_once(reference, sig, at, code, said):
    tmp, rl, sft, want = reference
    out = tmp / f"stopped-{sig}"
    p = run(["-c", SIGNAL_ITSELF, sig, at], out, rl, sft, "--save-every", "0")   # the default: no checkpoints
    log = p.communicate(timeout=300)[0]
    assert p.returncode == code and said in log, log
    assert not os.path.isdir(out / "final")
    assert os.path.isdir(out / "ckpt" / "step-2") == (at == "step-1") and os.path.isdir(out / "sft") == (at == "step-1")
    p = run(["train.py"], out, rl, sft, "--save-every", "0", "--resume")
    log = p.communicate(timeout=300)[0]
    assert p.returncode == 0, log
    assert same(weights(out), want)
    assert logged(out) == logged(tmp / "straight") and logged(out)[1] == [0, 1, 2, 3]


def test_resume_of_a_finished_run_says_so_and_trains_nothing(reference, capsys):
    import train
    tmp, rl, sft, want = reference
    out = tmp / "straight"
    before = {f: (out / f).read_bytes() for f in ("metrics.jsonl", "rollouts.jsonl", "final/model.safetensors")}
    train.main(["--data", rl, "--sft-data", sft, "--out", str(out), *ARGS, "--resume"])
    assert f"run in {out} already finished (4 RL steps" in capsys.readouterr().out
    assert {f: (out / f).read_bytes() for f in before} == before


@pytest.fixture
def killed(reference):
    """A copy of the reference run as a kill after checkpoint 3 would have left it (no final/)."""
    tmp, rl, sft, want = reference
    out = tmp / f"copy-{time.monotonic_ns()}"
    shutil.copytree(tmp / "straight", out)
    shutil.rmtree(out / "final")
    return out, ["--data", rl, "--sft-data", sft, "--out", str(out), *ARGS, "--resume"]


def zero(path):
    path.write_bytes(b"")


def halve(path):
    path.write_bytes(path.read_bytes()[:path.stat().st_size // 2])


def garble(path):
    path.write_bytes(bytes(range(256)) * (path.stat().st_size // 256 + 1))


@pytest.mark.parametrize("name, damage, said", [
    ("state.pt", zero, "state.pt cannot be read back (0 bytes"),
    ("state.pt", halve, "state.pt cannot be read back"),
    ("state.pt", garble, "state.pt cannot be read back"),
    ("rng-0.pt", zero, "rng-0.pt cannot be read back (0 bytes"),
    ("config.json", zero, "config.json is not valid JSON (0 bytes"),
])
def test_a_damaged_newest_checkpoint_falls_back_to_the_one_before(killed, capsys, name, damage, said):
    import train
    out, argv = killed
    damage(out / "ckpt" / "step-3" / name)
    train.main(argv)
    log = capsys.readouterr().out
    assert f"--resume: skipping {out / 'ckpt' / 'step-3'}: {out / 'ckpt' / 'step-3' / name}" in log and said in log
    assert f"resumed from {out / 'ckpt' / 'step-2'}: RL step 2" in log
    assert os.path.isdir(out / "final") and logged(out)[1] == [0, 1, 2, 3]


def other_shape(folder):
    state = torch.load(folder / "state.pt", weights_only=True)
    k = next(iter(state["model"]))
    state["model"][k] = torch.zeros(3, 5)
    torch.save(state, folder / "state.pt")
    return rf"--resume: {folder} holds another model: {k} is \(3, 5\) there, \(\d+, \d+\) here"


def other_config(folder):
    cfg = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**cfg, "lr": 0.5}))
    return rf"--resume: the config differs from {folder} in --lr \(lr: 0.5 -> 0.001\)"


def every_checkpoint(folder):
    zero(folder / "state.pt")
    zero(folder.parent / "step-2" / "state.pt")
    return rf"--resume: no usable checkpoint: {folder / 'state.pt'} cannot be read back \(0 bytes; EOFError\); 1 older"


def damaged_sft(folder):
    halve(folder.parent.parent / "sft" / "model.safetensors")
    return (rf"--resume: {folder.parent.parent / 'sft' / 'model.safetensors'} is damaged \(\d+ bytes; SafetensorError: "
            r"Error while deserializing header: incomplete metadata, file not fully covered\): restore it, or start "
            r"afresh with --overwrite")


def damaged_config(folder):
    zero(folder.parent.parent / "config.json")
    return rf"--resume: {folder.parent.parent / 'config.json'} is not valid JSON \(0 bytes"


@pytest.mark.parametrize("damage", [other_shape, other_config, every_checkpoint, damaged_sft, damaged_config])
def test_a_damaged_or_foreign_run_folder_is_one_line(killed, damage):
    import train
    out, argv = killed
    said = damage(out / "ckpt" / "step-3")
    with pytest.raises(SystemExit, match=said) as e:
        train.main(argv)
    assert "\n" not in str(e.value.code)
    assert not os.path.isdir(out / "final")


def test_the_shared_prompt_backward_is_bit_identical_at_two_threads():
    """What made two-thread runs differ: the backward of the rows' read of their group's prompt
    keys and values adds the rows in thread order, unless train.py's deterministic mode is on."""
    from lib.training.logprobs import token_logprobs
    was, threads = torch.are_deterministic_algorithms_enabled(), torch.get_num_threads()
    dist.deterministic("cpu")
    torch.set_num_threads(2)
    try:
        model = tiny_model().train()
        g = torch.Generator().manual_seed(0)
        prompt = torch.randint(0, 300, (1, 320), generator=g).expand(8, -1)            # (8, 320) one group of 8
        ids = torch.cat([prompt, torch.randint(0, 300, (8, 24), generator=g)], 1)       # (8, 344)
        attn, mask = torch.ones_like(ids), torch.cat([torch.zeros_like(prompt), torch.ones(8, 24, dtype=torch.long)], 1)
        grads = []
        for _ in range(4):
            model.zero_grad()
            token_logprobs(model, ids, attn, mask, groups=torch.zeros(8, dtype=torch.long)).sum().backward()
            grads.append([p.grad.clone() for p in model.parameters()])
        assert all(torch.equal(x, y) for gs in grads[1:] for x, y in zip(grads[0], gs))
    finally:
        torch.use_deterministic_algorithms(was)
        torch.set_num_threads(threads)


def test_shard_metadata_is_read_through_an_allowlist(tmp_path):
    """A sharded checkpoint's .metadata is a pickle (torch.distributed.checkpoint's): checkpoints.Shards
    reads dcp's own (written here in one process) but refuses one that would call anything else,
    and names a garbled one."""
    import pickle
    import torch.distributed.checkpoint as dcp
    path, state = tmp_path / "shards", tiny_model().state_dict()
    dcp.save({"model": state}, checkpoint_id=str(path), no_dist=True)
    md = checkpoints.Shards(str(path)).read_metadata()
    assert {k: tuple(v.size) for k, v in md.state_dict_metadata.items()} == {f"model.{k}": v.shape for k, v in state.items()}

    class Evil:
        def __reduce__(self):
            return os.system, (f"touch {tmp_path / 'ran'}",)
    (path / ".metadata").write_bytes(pickle.dumps(Evil()))
    with pytest.raises(runfolder.Unusable,
                       match=r"\.metadata cannot be read back \(\d+ bytes; UnpicklingError: posix\.system is not allowed"):
        checkpoints.Shards(str(path)).read_metadata()
    assert not (tmp_path / "ran").exists()
    # a dotted name reaches through an allowed module into its imports (pickle protocol 4 follows dots)
    module, name, cmd = b"torch.distributed.checkpoint.metadata", b"os.system", f"touch {tmp_path / 'ran'}".encode()
    u = lambda b: pickle.SHORT_BINUNICODE + bytes([len(b)]) + b  # noqa: E731
    (path / ".metadata").write_bytes(b"\x80\x04" + u(module) + u(name) + pickle.STACK_GLOBAL + u(cmd) + pickle.TUPLE1
                                     + pickle.REDUCE + pickle.STOP)
    with pytest.raises(runfolder.Unusable, match=r"UnpicklingError: torch\.distributed\.checkpoint\.metadata\.os\.system is"):
        checkpoints.Shards(str(path)).read_metadata()
    assert not (tmp_path / "ran").exists()
    # metadata that is dcp's own classes but points outside the folder, or at a "bytes" entry (a full unpickle)
    from torch.distributed.checkpoint.metadata import BytesStorageMetadata
    for bad in ("path", "bytes"):
        dcp.save({"model": state}, checkpoint_id=str(path), no_dist=True)
        md = checkpoints.Shards(str(path)).read_metadata()
        if bad == "path":
            info = next(iter(md.storage_data.values()))
            info.relative_path = "../../elsewhere.distcp"
            (path / ".metadata").write_bytes(pickle.dumps(md))
            with pytest.raises(runfolder.Unusable, match=r"describes more than tensors in its own shard files"):
                checkpoints.Shards(str(path)).read_metadata()
        else:
            md.state_dict_metadata["model.extra"] = BytesStorageMetadata()
            (path / ".metadata").write_bytes(pickle.dumps(md))
            with pytest.raises(runfolder.Unusable, match=r"BytesStorageMetadata is not allowed"):
                checkpoints.Shards(str(path)).read_metadata()
    garble(path / ".metadata")
    with pytest.raises(runfolder.Unusable, match=r"\.metadata cannot be read back"):
        checkpoints.Shards(str(path)).read_metadata()


def test_a_flag_added_since_a_run_started_does_not_block_its_resume():
    """A checkpoint's config lacks the flags added after its run started (it ran with their default
    behaviour): only the flags both have, and those this run dropped, are compared."""
    saved = {"lr": 1e-3, "seed": 0, "gone": 1}
    assert runfolder.config_diff(saved, {"lr": 1e-3, "seed": 0, "gone": 1, "lora_r": 0}, "x") == ""
    assert "--lr" in runfolder.config_diff(saved, {"lr": 2e-3, "seed": 0, "gone": 1, "lora_r": 0}, "x")
    assert "--gone" in runfolder.config_diff(saved, {"lr": 1e-3, "seed": 0}, "x")
