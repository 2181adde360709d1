"""The README's demo numbers come from one source, docs/experiments/demo.md's tables, and every line of them
that names a data folder agrees with the eval rows committed there (train.py's eval.jsonl: the SFT start's and
the final model's held-out summaries)."""
import json
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "docs" / "experiments" / "demo.md"
SEED0 = "**Seed 0, the command as a user runs it.**"   # the line above each table on demo.md
SEEDS = "The same command for seeds 0, 1 and 2"


def table(above):
    """The markdown table after the line of demo.md that starts with `above`: its rows as lists of cells."""
    lines = PAGE.read_text(encoding="utf-8").split("\n")
    i = next(i for i, line in enumerate(lines) if line.startswith(above))
    while not lines[i].startswith("|"):
        i += 1
    rows = []
    while i < len(lines) and lines[i].startswith("|"):
        rows.append([c.strip() for c in lines[i].strip().strip("|").split("|")])
        i += 1
    return rows[2:]  # past the header and its rule


def readme():
    return " ".join((ROOT / "README.md").read_text(encoding="utf-8").split())  # one space between words


def test_seed0_lines_agree_with_their_committed_eval_rows():
    folders = [re.fullmatch(r"\[[\w-]+\]\((demo/[\w-]+)/\)", row[6]) for row in table(SEED0)]
    assert any(folders)
    for row, m in zip(table(SEED0), folders):
        if m:
            before, after = [json.loads(line)["all"]["success"] for line in (PAGE.parent / m[1] / "eval.jsonl").open()]
            assert row[4] == f"{before:.3f} → {after:.3f}", m[1]
            assert json.loads((PAGE.parent / m[1] / "config.json").read_text())["seed"] == 0, m[1]


def test_the_readme_quotes_the_first_seed0_line():
    command, commit, cpu, threads, success, wall, _ = table(SEED0)[0]
    assert command == "`python train.py`" and threads == "2"
    minutes = re.match(r"(\d+) min (\d+) s", wall)
    text = readme()
    assert f"Success@0.9 {success} in {minutes[0]}, seed 0 at two threads" in text
    assert f"{cpu.split(' (')[0].split(', ')[1]}) at {commit}" in text  # "... EPYC (Zen 4) at 116db91"
    assert f"# the demo: about {round(int(minutes[1]) + int(minutes[2]) / 60)} minutes" in text


def test_the_readme_quotes_the_three_seeds_gains():
    rows = [r for r in table(SEEDS) if r[0].isdigit()]
    gains = [float(r[3]) for r in rows]
    for seed, start, end, gain in rows:
        assert abs(float(end) - float(start) - float(gain)) < 1e-9, f"seed {seed}"
    assert "held-out Success@0.9 " + " / ".join(f"{g:+.3f}" for g in gains) + " on seeds 0-2" in readme()


def test_every_experiment_is_listed_indexed_and_on_a_page():
    names = sorted(p.stem for p in (ROOT / "experiments").glob("*.py") if p.stem not in ("__init__", "common"))
    listed = (ROOT / "experiments" / "__init__.py").read_text(encoding="utf-8")
    index = (ROOT / "docs" / "results.md").read_text(encoding="utf-8")
    for name in names:
        assert re.search(rf"^    {name} ", listed, flags=re.M), f"experiments/__init__.py does not list {name}"
        rows = [line for line in index.split("\n") if line.startswith("|") and re.search(rf"\b{name}\b|{name.replace('_', '')}", line)]
        pages = [ROOT / "docs" / m[1] for m in (re.search(r"\]\((experiments/[\w-]+\.md)", line) for line in rows) if m]
        assert pages, f"docs/results.md has no row for {name}"
        assert any(f"experiments.{name}" in p.read_text(encoding="utf-8") for p in pages), \
            f"no page of {name}'s rows names python -m experiments.{name}"
