"""JSONL result files: read what parses, append without losing a line cut by a crash; a training
run's logs (`Logs`: train.py's metrics, rollouts and eval), strict JSON (`json_safe`: a
non-finite number is written as null), cut back to a checkpoint's lengths on resume, and their
metrics and eval rows also as scalars in TensorBoard or W&B (`Report`, train.py --report-to)."""
import json
import math
import os
import shutil
from pathlib import Path

from lib.runs.runfolder import writing


# ---------------------------------------------------------------------------------------------
# result files
def read_jsonl(path):
    """The rows of `path` ([] if it is None or missing); lines that do not parse are dropped."""
    if path is None or not Path(path).exists():
        return []
    rows = []
    with open(path) as f:
        for line in f:
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError:  # empty, or cut by a crash: that item runs again
                pass
    return rows


def append_jsonl(path, rows):
    """Append one line per row (nothing if path is None), creating folders as needed."""
    if path is None:
        return
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    cut = False
    if path.exists() and path.stat().st_size > 0:
        with open(path, "rb") as f:
            f.seek(-1, os.SEEK_END)
            cut = f.read(1) != b"\n"  # the last line was cut by a crash
    with open(path, "a") as f:
        f.write("\n" if cut else "")
        f.writelines(json.dumps(row) + "\n" for row in rows)


def json_safe(x):
    """JSON-safe copy: non-finite floats become null (json.dumps would write bare NaN)."""
    if isinstance(x, float):
        return x if math.isfinite(x) else None
    if isinstance(x, dict):
        return {k: json_safe(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [json_safe(v) for v in x]
    return x


REPORTED = ("metrics", "eval")  # the logs a Report carries


def scalars(row, kind, sft_step):
    """(prefix, step, {name: value}) of one row of log `kind`: an SFT row's keys as sft/<key> at
    `sft_step` (its index among the SFT rows), an RL row's as rl/<key> at its step, an eval row's
    as eval/<split>/<key> (split: all, a parallel type, bonus) at the RL step it ran at (0: before
    RL). Numbers only: a string, or a null (a non-finite number), is left out."""
    prefix = "eval" if kind == "eval" else "sft" if row.get("stage") == "sft" else "rl"
    out = {}

    def walk(d, name):
        for k, v in d.items():
            if isinstance(v, dict):
                walk(v, f"{name}/{k}")
            elif isinstance(v, (int, float)):
                out[f"{name}/{k}"] = float(v)
    walk({k: v for k, v in row.items() if k not in ("stage", "step", "label")}, prefix)
    return prefix, sft_step if prefix == "sft" else row["step"], out


class Report:
    """--report-to: the rows of out/metrics.jsonl and out/eval.jsonl as scalars (names: `scalars`),
    in TensorBoard (out/tensorboard) or W&B (offline, out/wandb; `wandb sync` uploads it). Each
    (re)build starts afresh from the logs as they stand, so the events hold exactly the logs' rows
    also after a resumed run cut them back (a W&B run each time: the latest is whole). It is built
    at the first row written after it was made or its logs were cut (`close`), once per run or resume."""

    def __init__(self, out, to, config):
        self.out, self.to, self.config, self.run = out, to, config, None
        self.folder = os.path.join(out, to)

    def rebuild(self):
        self.close()
        self.sft = 0                                       # SFT rows so far: the next one's step
        if self.to == "tensorboard":
            from torch.utils.tensorboard import SummaryWriter
            shutil.rmtree(self.folder, ignore_errors=True)
            self.run = SummaryWriter(self.folder)
        else:
            import wandb
            self.run = wandb.init(mode="offline", dir=self.out, project="slca-grpo", config=self.config,
                                  name=os.path.basename(os.path.abspath(self.out)))
            for p in ("sft", "rl", "eval"):
                self.run.define_metric(f"{p}/*", step_metric=f"{p}/step")
        for kind in REPORTED:
            for row in read_jsonl(os.path.join(self.out, f"{kind}.jsonl")):
                self.write(row, kind)

    def write(self, row, kind):
        """Report one row, already in the logs (a rebuild reads it from there)."""
        if self.run is None:
            return self.rebuild()
        prefix, step, values = scalars(row, kind, self.sft)
        self.sft += prefix == "sft"
        if self.to == "tensorboard":
            for k, v in values.items():
                self.run.add_scalar(k, v, step)
            self.run.flush()
        else:
            self.run.log({**values, f"{prefix}/step": step})

    def close(self):
        if self.run is not None:
            if self.to == "tensorboard":
                self.run.close()
            else:
                self.run.finish()
            self.run = None


class Logs:
    """A run's JSONL logs, out/<name>.jsonl for each of `names`, opened for appending by rank 0
    (`main`); on the other ranks every method does nothing. A failed write is one line naming
    the file (lib.runs.runfolder.writing). `report_to` (tensorboard, wandb or none) also sends the
    metrics and eval rows there (`Report`; `config`, a dict, is the W&B run's config)."""

    def __init__(self, out, names, main, report_to="none", config=None):
        self.files, self.report = {}, None
        if main:
            with writing(out):
                self.files = {k: open(os.path.join(out, f"{k}.jsonl"), "a") for k in names}
            if report_to != "none":
                self.report = Report(out, report_to, config)
        self.main = main

    def write(self, row, kind="metrics"):
        """One strict-JSON line in log `kind`, flushed."""
        if self.main:
            f, row = self.files[kind], json_safe(row)
            with writing(f.name):
                f.write(json.dumps(row, allow_nan=False) + "\n")
                f.flush()
            if self.report and kind in REPORTED:
                with writing(self.report.folder):
                    self.report.write(row, kind)

    def sizes(self):
        """Each log's byte length: stored with a checkpoint, so a resumed run cuts off what came after."""
        return {k: os.fstat(f.fileno()).st_size for k, f in self.files.items()} if self.main else None

    def rewind(self, marks):
        """Cut the logs back to `marks` (their lengths at the point the run resumes from): what
        was logged after it is redone. None (a checkpoint of an older version): appended as is."""
        for k, f in self.files.items() if marks else ():
            if os.fstat(f.fileno()).st_size > marks.get(k, 0):  # a log the checkpoint's version did not write: all after it
                with writing(f.name):
                    f.truncate(marks.get(k, 0))
                    f.seek(0, os.SEEK_END)
        if self.report:
            self.report.close()  # rebuilt from the cut logs at the next row

    def close(self):
        for f in self.files.values():
            f.close()
        if self.report:
            self.report.close()
