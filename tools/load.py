"""Wall time of `python train.py` on an idle machine and beside one CPU-bound process, per thread setting.

    python -m tools.load                  # the demo itself, every setting idle and loaded (about 1.5 hours on 2 cores)
    python -m tools.load --quick          # a proxy: 200 SFT conversations, 8 RL steps, no eval (minutes)
    python -m tools.load --settings default      # train.py with no thread variable set

Why: a laptop always has something else running. At torch's default two threads every parallel
region (one matmul, one norm) ends at a barrier where both threads meet, thousands of times a
step; beside another CPU-bound process on 2 cores one of the two is often off its core, and its
sibling waits for it (spinning first, with libgomp's default wait). What each setting costs,
idle and loaded, is in docs/speed.md (beside another process).

Settings (each run in a fresh process, so OpenMP reads its environment at start):
    default   train.py as it runs with no thread variable set: torch's default count (its physical
              cores) while the machine is otherwise idle, fewer while it is not (lib/runs/threads.py)
    passive   two threads, OMP_WAIT_POLICY=PASSIVE
    spin      two threads, libgomp's default wait (spin, then sleep), as torch's default runs on
              2 cores; set here as an empty OMP_WAIT_POLICY, which libgomp rejects
              with one warning line and then uses its default
    1-thread  OMP_NUM_THREADS=1 (nothing to wait for)
    spin-10k  two threads, a short spin (GOMP_SPINCOUNT=10000 of libgomp's default 300,000), then sleep
Loaded: `python -c "while True: pass"` runs beside the run, started before it and killed after.
Settings and load alternate (idle, loaded, idle, loaded, ...) so slow drift hits every row alike;
each row is the median over --runs. Timing is noisy here: run it with nothing else running.
"""
import argparse
import collections
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SETTINGS = {  # name -> environment of the train.py process (beside this one's, the thread variables removed)
    "default": {},
    "passive": {"OMP_NUM_THREADS": "2", "OMP_WAIT_POLICY": "PASSIVE"},
    "spin": {"OMP_NUM_THREADS": "2", "OMP_WAIT_POLICY": ""},
    "1-thread": {"OMP_NUM_THREADS": "1"},
    "spin-10k": {"OMP_NUM_THREADS": "2", "OMP_WAIT_POLICY": "", "GOMP_SPINCOUNT": "10000"},
}
THREAD_VARS = ("OMP_NUM_THREADS", "OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "MKL_NUM_THREADS")  # set only by SETTINGS
QUICK = ["--sft-limit", "200", "--steps", "8", "--eval-data", ""]  # ~1/10 of the demo's SFT, 8 of its 60 RL steps


def timed_run(env, flags, loaded):
    """One `train.py` run in a fresh folder (with a CPU-bound process beside it when loaded): its
    seconds and its before/after-RL lines."""
    env = {**{k: v for k, v in os.environ.items() if k not in THREAD_VARS}, **env}
    burner = subprocess.Popen([sys.executable, "-c", "while True: pass"]) if loaded else None
    try:
        with tempfile.TemporaryDirectory() as out:
            t0 = time.perf_counter()
            p = subprocess.run([sys.executable, "train.py", *flags, "--out", out, "--show", "0"], cwd=ROOT,
                               env=env, capture_output=True, text=True)
            wall = time.perf_counter() - t0
            rows = [json.loads(x) for x in open(os.path.join(out, "metrics.jsonl"))] if not p.returncode else []
    finally:
        if burner:
            burner.kill()
            burner.wait()
    if p.returncode:
        sys.exit(f"train.py failed:\n{p.stdout[-2000:]}\n{p.stderr[-3000:]}")
    table = [x for x in p.stdout.splitlines() if x.startswith(("before RL", "after RL"))]
    ran = collections.Counter((r.get("stage") == "sft", r["threads"]) for r in rows if "threads" in r)  # steps per (stage, threads)
    on = ", ".join(f"{'SFT' if sft else 'RL'} {n} at {k} thread{'s' * (k > 1)}" for (sft, k), n in sorted(ran.items()))
    return wall, table[-2:] + [f"steps: {on}"]  # its before/after table (the same idle and loaded at one thread)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--settings", nargs="+", choices=list(SETTINGS), default=list(SETTINGS))
    p.add_argument("--runs", type=int, default=1, help="runs per (setting, load); the table shows medians")
    p.add_argument("--quick", action="store_true", help="the proxy run instead of the whole demo")
    a = p.parse_args(argv)
    flags = QUICK if a.quick else []
    times = {(s, ld): [] for s in a.settings for ld in (False, True)}
    for r in range(a.runs):
        for s in a.settings:
            for ld in (False, True):
                wall, table = timed_run(SETTINGS[s], flags, ld)
                times[(s, ld)].append(wall)
                print(f"run {r} {s} {'loaded' if ld else 'idle'}: {wall:.0f} s", *table, sep="\n  ", flush=True)
    what = "the proxy (" + " ".join(x or "''" for x in QUICK) + ")" if a.quick else "python train.py"
    print(f"\n{what}, {os.cpu_count()} cores, median of {a.runs} run(s); loaded = beside one CPU-bound process\n")
    print("| setting | idle s | loaded s | loaded / idle |\n|---|---|---|---|")
    for s in a.settings:
        idle, busy = statistics.median(times[(s, False)]), statistics.median(times[(s, True)])
        print(f"| {s} | {idle:.0f} | {busy:.0f} | {busy / idle:.2f}x |")
    return times


if __name__ == "__main__":
    main()
