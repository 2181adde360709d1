"""The run folder (--out): one run at a time, failed writes as one line, stop signals, and the
checks that start or resume a run in it (docs/scaling.md).

`lock` lets one run at a time use an --out (an flock the kernel drops when the process dies).
`writing` turns a failed write (read-only folder, full disk) into one line naming the path,
removing the half-written temporary folder; nothing written earlier is touched. `open_run`
starts a run in its folder, or checks the one --resume continues: `check_resume` refuses a
resumed run whose config differs, naming the keys. `stop_requests` turns SIGTERM and SIGINT
into a request that the run stops at its next step boundary (`stop_if_asked`, agreed over
ranks, checkpoints there and exits with 128 + the signal).
"""
import fcntl
import json
import os
import shutil
import signal
import threading
from contextlib import contextmanager

from safetensors import SafetensorError, safe_open
from torch.distributed.checkpoint import CheckpointException

from lib.training.dist import barrier, gather


# flags a resumed run may change (a run folder may move; the preset is checked by its values)
RESUME_FREE = {"resume", "overwrite", "show", "device", "out", "report_to", "preset"}
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


# ---------------------------------------------------------------------------------------------
# --resume: the config must match
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
    except (OSError, ValueError, RecursionError) as e:  # RecursionError: nested past json's stack
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
