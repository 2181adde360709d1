"""Checkpoints, --resume and the run folder. At one thread (OMP_NUM_THREADS=1), the condition
under which runs are bit-reproducible: train.py turns on torch's deterministic algorithms on CPU,
which made two-thread runs repeat on an idle machine, but a two-thread SIGTERM resume in a CI run
beside another CPU-bound job once ended a few ulps away (the matmul library's work split is not
pinned), so bit-exactness is claimed at one thread only; the uninterrupted reference runs at the
same count:
- a run killed with SIGKILL (between steps, or while a checkpoint is being written), or
  stopped by SIGTERM or SIGINT (during RL or SFT), then resumed, ends with exactly the weights of
  an uninterrupted run, and its logs hold every step exactly once;
- one run per --out at a time; a killed run does not leave the folder locked;
- a damaged newest checkpoint is skipped for an older one; a damaged run folder, a checkpoint of
  another model or config, a read-only --out and a full disk each give one line.
Each long case runs train.py in a child process, as a user would."""
import json
import os
import shutil
import signal
import subprocess
import sys
import time

import pytest
import torch
from safetensors.torch import load_file

from lib import parallel
from helpers import tiny_model, write_world

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
THREADS = "1"  # where a resumed run is bit-identical whatever else the machine runs (module docstring)
ARGS = ["--sft-limit", "8", "--sft-epochs", "1", "--eval-data", "", "--steps", "4", "--save-every", "1",
        "--group-size", "2", "--prompts-per-step", "2", "--mini-batch", "1", "--max-tokens", "40",
        "--max-turns", "2", "--tiny-size", "32", "1", "2", "--lr", "1e-3"]
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
# the child sends itself a signal: `SIGTERM step-1` during RL step 1, `SIGINT sft` as SFT starts,
# `sleep step-1` sleeps in RL step 1 (a long step to kill from outside)
SIGNAL_ITSELF = """
import os, signal, sys, time, train
what, at = sys.argv[1:3]
rl_step, warm_start = train.rl_step, train.warm_start
def step(*args):
    if at == f"step-{args[9]}":
        print("in", at, flush=True)
        time.sleep(300) if what == "sleep" else os.kill(os.getpid(), getattr(signal, what))
    return rl_step(*args)
def sft(*args):
    if at == "sft":
        os.kill(os.getpid(), getattr(signal, what))
    return warm_start(*args)
train.rl_step, train.warm_start = step, sft
train.main(sys.argv[3:])
"""
# the disk "fills up" after the first checkpoint: every later file write past 100 kB fails with the OS's EFBIG
FULL_DISK = """
import resource, signal, sys, train
save = train.save_checkpoint
def save_then_fill(*args):
    save(*args)
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (100_000, 100_000))
train.save_checkpoint = save_then_fill
train.main(sys.argv[1:])
"""


def run(cmd, out, rl, sft, *extra):
    env = {**os.environ, "OMP_NUM_THREADS": THREADS, "PYTHONPATH": ROOT}
    argv = ["--data", rl, "--sft-data", sft, "--out", str(out), *ARGS, *extra]
    return subprocess.Popen([sys.executable, *cmd, *argv], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def weights(out):
    return load_file(os.path.join(out, "final", "model.safetensors"))


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("resume")
    rl, sft = write_world(tmp)
    p = run(["train.py"], tmp / "straight", rl, sft)
    log = p.communicate(timeout=300)[0]
    assert p.returncode == 0, log
    return tmp, rl, sft, weights(tmp / "straight")


def same(a, b):
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


@pytest.mark.slow
def test_sigkill_between_steps_then_resume_is_bit_exact(reference):
    tmp, rl, sft, want = reference
    out = tmp / "killed"
    p = run(["train.py"], out, rl, sft)
    deadline = time.time() + 300
    while not os.path.isdir(out / "ckpt" / "step-2") and p.poll() is None and time.time() < deadline:
        time.sleep(0.05)
    p.send_signal(signal.SIGKILL)
    p.communicate()
    assert not os.path.isdir(out / "final")               # it really died mid-run
    p = run(["train.py"], out, rl, sft, "--resume")
    log = p.communicate(timeout=300)[0]
    assert p.returncode == 0, log
    assert "resumed from" in log
    assert same(weights(out), want)
    assert len(os.listdir(out / "ckpt")) <= 2              # --keep 2


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


def test_resume_with_another_config_names_the_keys(tmp_path):
    import train
    rl, sft = write_world(tmp_path)
    out = tmp_path / "run"
    out.mkdir()
    a = train.get_args(["--data", rl, "--sft-data", sft, "--out", str(out), *ARGS])
    import json
    (out / "config.json").write_text(json.dumps(vars(a)))
    with pytest.raises(SystemExit, match=r"--lr.*--seed|--seed.*--lr"):
        train.main(["--data", rl, "--sft-data", sft, "--out", str(out), *ARGS, "--lr", "5e-4", "--seed", "3",
                    "--resume"])


def test_a_rerun_never_truncates_an_earlier_run(tmp_path):
    import train
    rl, sft = write_world(tmp_path)
    out = tmp_path / "run"
    out.mkdir()
    (out / "metrics.jsonl").write_text('{"step": 0}\n')
    with pytest.raises(SystemExit, match="--resume.*--overwrite"):
        train.main(["--data", rl, "--sft-data", sft, "--out", str(out), *ARGS])
    with pytest.raises(SystemExit):                        # a bad flag after that loses nothing either
        train.main(["--data", rl, "--out", str(out), "--group-size", "0"])
    assert (out / "metrics.jsonl").read_text() == '{"step": 0}\n'


def logged(out):
    """(SFT lines, RL steps) of metrics.jsonl, and the steps of rollouts.jsonl."""
    rows = [json.loads(x) for x in open(os.path.join(out, "metrics.jsonl"))]
    rolls = [json.loads(x)["step"] for x in open(os.path.join(out, "rollouts.jsonl"))]
    return sum(r.get("stage") == "sft" for r in rows), [r["step"] for r in rows if "step" in r], sorted(set(rolls)), len(rolls)


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


HOLD = "import sys, time; from lib import parallel; f = parallel.lock(sys.argv[1], 0); print('held', flush=True); time.sleep(300)"


@pytest.mark.slow
def test_one_run_per_out_and_a_killed_run_leaves_no_lock(reference):
    tmp, rl, sft, want = reference
    out = tmp / "shared"
    import train
    p = run(["-c", SIGNAL_ITSELF, "sleep", "step-1"], out, rl, sft)       # a long RL step 1
    try:
        for line in p.stdout:
            if "in step-1" in line:                                      # after a progress bar's \r
                break
        assert p.poll() is None
        for extra in ([], ["--resume"], ["--overwrite"]):                 # a second run of any kind is refused
            with pytest.raises(SystemExit) as e:
                train.main(["--data", rl, "--sft-data", sft, "--out", str(out), *ARGS, *extra])
            assert e.value.code == f"--out {out} is in use by another run (pid {p.pid}): wait for it or pick another --out"
    finally:
        p.kill()
        p.communicate()
    q = run(["train.py"], out, rl, sft, "--resume")                       # the kernel dropped the lock
    log = q.communicate(timeout=300)[0]
    assert q.returncode == 0 and "resumed from" in log, log
    assert same(weights(out), want) and logged(out)[1] == [0, 1, 2, 3]


def test_the_lock_is_released_when_its_holder_dies(tmp_path):
    p = subprocess.Popen([sys.executable, "-c", HOLD, str(tmp_path)], cwd=ROOT, stdout=subprocess.PIPE, text=True,
                         env={**os.environ, "PYTHONPATH": ROOT})
    try:
        assert p.stdout.readline() == "held\n"
        with pytest.raises(SystemExit, match=rf"in use by another run \(pid {p.pid}\)"):
            parallel.lock(str(tmp_path), 0)
    finally:
        p.kill()
        p.wait()
    parallel.lock(str(tmp_path), 0).close()


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


@pytest.mark.slow
def test_a_full_disk_is_one_line_and_loses_nothing(reference):
    tmp, rl, sft, want = reference
    out = tmp / "full"
    p = run(["-c", FULL_DISK], out, rl, sft)
    log = p.communicate(timeout=300)[0]
    assert p.returncode == 1, log
    assert log.strip().splitlines()[-1] == f"cannot write {out / 'ckpt' / '.tmp-step-2' / 'state.pt'}: File too large"
    assert os.listdir(out / "ckpt") == ["step-1"]                          # the torn one removed, the last good kept
    p = run(["train.py"], out, rl, sft, "--resume")
    log = p.communicate(timeout=300)[0]
    assert p.returncode == 0 and "resumed from" in log and "step-1" in log, log
    assert same(weights(out), want) and logged(out) == logged(tmp / "straight")


def read_only(folder, cmd):
    """`cmd` with `folder` read-only: chmod for an ordinary user; as root (whom chmod does not stop),
    a read-only bind mount in a private user and mount namespace."""
    if os.geteuid() != 0:
        os.chmod(folder, 0o555)
        return cmd
    if not shutil.which("unshare") or subprocess.call(["unshare", "-rm", "true"], stderr=subprocess.DEVNULL):
        pytest.skip("running as root without unshare: no way to make a folder read-only")
    script = 'mount --bind "$0" "$0" && mount -o remount,bind,ro "$0" && exec "$@"'
    return ["unshare", "-rm", "sh", "-c", script, str(folder), *cmd]


@pytest.mark.slow
def test_a_read_only_out_is_one_line(tmp_path):
    rl, sft = write_world(tmp_path)
    out = tmp_path / "ro"
    out.mkdir()
    (out / "metrics.jsonl").write_text('{"step": 0}\n')
    (out / "config.json").write_text("{}")
    for flag in ("--overwrite", "--resume"):
        argv = [sys.executable, "train.py", "--data", rl, "--sft-data", sft, "--out", str(out), *ARGS, flag]
        p = subprocess.run(read_only(out, argv), cwd=ROOT, capture_output=True, text=True,
                           env={**os.environ, "PYTHONPATH": ROOT})
        lines = (p.stdout + p.stderr).strip().splitlines()
        assert p.returncode == 1 and lines[-1].startswith(f"cannot write {out / '.lock'}: "), p.stdout + p.stderr
        assert (out / "metrics.jsonl").read_text() == '{"step": 0}\n'


def test_the_shared_prompt_backward_is_bit_identical_at_two_threads():
    """What made two-thread runs differ: the backward of the rows' read of their group's prompt
    keys and values adds the rows in thread order, unless train.py's deterministic mode is on."""
    from lib.logprobs import token_logprobs
    was, threads = torch.are_deterministic_algorithms_enabled(), torch.get_num_threads()
    parallel.deterministic("cpu")
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
