"""The run folder: one run per --out at a time and a killed run leaves no lock; a rerun never
truncates an earlier run; a config change on --resume names the keys; a read-only --out and a
full disk each give one line and lose nothing. The long cases run train.py in a child process at
one thread (tests/runs.py); resume itself: test_resume.py."""
import os
import shutil
import subprocess
import sys

import pytest

from lib.runs import runfolder
from helpers import write_world
from runs import ARGS, ROOT, SIGNAL_ITSELF, logged, run, same, weights

# the disk "fills up" after the first checkpoint: every later file write past 100 kB fails with the OS's EFBIG
FULL_DISK = """
import resource, signal, sys, train
save = train.save_checkpoint
def save_then_fill(*args, **kw):
    save(*args, **kw)
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (100_000, 100_000))
train.save_checkpoint = save_then_fill
train.main(sys.argv[1:])
"""


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


HOLD = "import sys, time; from lib.runs import runfolder; f = runfolder.lock(sys.argv[1], 0); print('held', flush=True); time.sleep(300)"


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
            runfolder.lock(str(tmp_path), 0)
    finally:
        p.kill()
        p.wait()
    runfolder.lock(str(tmp_path), 0).close()


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


@pytest.mark.parametrize("text", ["[" * 100_000 + "]" * 100_000, "{not json", "[1, 2]"])
def test_resume_of_a_hostile_config_json_is_one_line(tmp_path, text):
    """`--out DIR --resume` reads DIR/config.json back: one nested past json's stack, one that does not parse and
    one that holds no object each stop in one line naming the file, before anything loads."""
    import train
    out = tmp_path / "run"
    out.mkdir()
    (out / "config.json").write_text(text)
    with pytest.raises(SystemExit, match=r"^--resume: .*config\.json (is not valid JSON|holds no JSON object)"):
        train.main(["--out", str(out), "--resume"])
