"""CPU threads that follow the machine's load, as train.py runs on a CPU.

torch runs one thread per physical core, and every parallel region (one matmul, one norm) ends
at a barrier where all of them meet, thousands of times a step. Beside another CPU-bound
process one of them is often off its core and the others wait for it: on this project's 2-core
machine the demo ran 2.9x slower at two threads beside `while True: pass`, 1.07x at one
(docs/speed.md). So between steps `Threads.update()` reads how many cores the rest of the
machine kept busy since its last reading (all CPUs' busy time in /proc/stat minus this
process's own CPU time) and runs on the cores left: the count the process started with while
the machine is otherwise idle, fewer (at least one) while it is not. A change needs the same
answer from two readings in a row, so one noisy interval does not flip it.

Left alone (a fixed count): off a CPU device, without /proc/stat (not Linux), with OMP_NUM_THREADS set (the
user's choice, and torchrun's one thread per rank), or when the process starts on one thread
(as the tests do). Two-thread runs are not bit-reproducible (lib/training/dist.py), so neither is
an auto run that used two threads; set OMP_NUM_THREADS=1 for bits.
"""
import os
import time

import torch

EVERY = 2.0  # seconds between readings: dozens of the demo's SFT steps, about one of its RL steps
ROUND = 0.5  # cores left = CPUs - cores others kept busy, rounded: half a core's work counts as a core taken
BUSY = (0, 1, 2, 5, 6, 7)  # /proc/stat cpu fields counted busy: user nice system, irq softirq steal (not 3 idle, 4 iowait)


def machine():
    """(CPUs, seconds all of them spent busy since boot) from /proc/stat, or None where there is none."""
    try:
        with open("/proc/stat") as fh:
            lines = fh.read().splitlines()
    except OSError:
        return None
    head = lines[0].split() if lines else []
    if len(head) < 9 or head[0] != "cpu" or not all(x.isdigit() for x in head[1:9]):
        return None
    jiffies = [int(x) for x in head[1:9]]
    cpus = sum(1 for x in lines[1:] if x.startswith("cpu") and x[3:4].isdigit())
    return cpus, sum(jiffies[i] for i in BUSY) / os.sysconf("SC_CLK_TCK")


def own():
    """CPU seconds this process has used, all its threads (its children not counted)."""
    t = os.times()
    return t.user + t.system


def fit(most, cpus, others):
    """Threads for the cores `others` (in cores) left of `cpus`: between 1 and `most`."""
    return max(1, min(most, int(cpus - others + ROUND)))


class Threads:
    """torch's thread count, re-chosen from the load at each `update()` (at most every `every` s)."""

    def __init__(self, on=True, every=None):
        self.most, self.every = torch.get_num_threads(), EVERY if every is None else every
        on = on and self.most > 1 and "OMP_NUM_THREADS" not in os.environ
        self.last, self.want = self.reading() if on else None, self.most
        self.on = self.last is not None

    def reading(self):
        """(time, CPUs, their busy seconds, this process's CPU seconds), or None without /proc/stat."""
        t, m = time.monotonic(), machine()
        return None if m is None else (t, *m, own())

    def update(self):
        """Read the load since the last reading and set the count; returns torch's count. A
        /proc/stat that stops reading back leaves the count as it is from then on."""
        if self.on and time.monotonic() - self.last[0] >= max(self.every, 1e-3):
            now = self.reading()
            if now is None:
                self.on = False
                return torch.get_num_threads()
            (t0, _, busy0, own0), (t1, cpus, busy1, own1) = self.last, now
            others = max(0.0, (busy1 - busy0) - (own1 - own0)) / (t1 - t0)  # cores others kept busy
            n, self.last = fit(self.most, cpus, others), now
            if n == self.want and n != torch.get_num_threads():  # the second reading in a row that says so
                torch.set_num_threads(n)
            self.want = n
        return torch.get_num_threads()
