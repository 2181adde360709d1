"""JSONL result files: read what parses, append without losing a line cut by a crash; logs are
strict JSON (`json_safe`: a non-finite number is written as null)."""
import json
import math
import os
from pathlib import Path


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
