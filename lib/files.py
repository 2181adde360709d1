"""JSONL result files: read what parses, append without losing a line cut by a crash; a training
run's logs (`Logs`: train.py's metrics, rollouts and eval), strict JSON (`json_safe`: a
non-finite number is written as null), cut back to a checkpoint's lengths on resume."""
import json
import math
import os
from pathlib import Path

from lib.parallel import writing


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


class Logs:
    """A run's JSONL logs, out/<name>.jsonl for each of `names`, opened for appending by rank 0
    (`main`); on the other ranks every method does nothing. A failed write is one line naming
    the file (lib.parallel.writing)."""

    def __init__(self, out, names, main):
        self.files = {}
        if main:
            with writing(out):
                self.files = {k: open(os.path.join(out, f"{k}.jsonl"), "a") for k in names}
        self.main = main

    def write(self, row, kind="metrics"):
        """One strict-JSON line in log `kind`, flushed."""
        if self.main:
            f = self.files[kind]
            with writing(f.name):
                f.write(json.dumps(json_safe(row), allow_nan=False) + "\n")
                f.flush()

    def sizes(self):
        """Each log's byte length: stored with a checkpoint, so a resumed run cuts off what came after."""
        return {k: os.fstat(f.fileno()).st_size for k, f in self.files.items()} if self.main else None

    def rewind(self, marks):
        """Cut the logs back to `marks` (their lengths at the point the run resumes from): what
        was logged after it is redone. None (a checkpoint of an older version): appended as is."""
        for k, f in self.files.items() if marks else ():
            if os.fstat(f.fileno()).st_size > marks[k]:
                with writing(f.name):
                    f.truncate(marks[k])
                    f.seek(0, os.SEEK_END)

    def close(self):
        for f in self.files.values():
            f.close()
