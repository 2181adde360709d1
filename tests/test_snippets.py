"""The code blocks a reader pastes from README.md and docs/integrations.md run as written, at toy size. BLOCKS
lists each fenced block with the tests that run it (or, where it cannot run here, its largest part that can);
a block that is not listed fails here. A test that runs a block changes only what its substitution table names
(tests/blocks.py): `python` is this interpreter, the hosts are local servers, a count is a toy one; flags it
appends set the run's folder, the toy data and the toy sizes."""
import ast
import os
import shlex
import subprocess
import sys

import pytest
import torch
from safetensors.torch import load_file

from blocks import ROOT, block, blocks, commands, substituted
from helpers import write_caller_sft, write_world

PAGES = ("README.md", "docs/integrations.md")
TRL_RUN = "python train.py --steps 0"             # how the TRL example's commands begin, on both pages
BLOCKS = {  # (page, how the block begins): the tests that run it, as tests/<file>::<test>
    ("README.md", "pip install -r requirements.txt && python train.py"): (
        "test_snippets.py::test_the_install_and_test_lines_are_the_ones_ci_runs",
        "test_resume.py::test_sigkill_between_steps_then_resume_is_bit_exact"),        # python train.py: tests/runs.py
    ("README.md", "hf download"): (
        "test_headline.py::test_the_download_line_fills_the_cache_train_py_reads",
        "test_headline.py::test_a_served_simulator_and_judge_train_on_the_release_splits",
        "test_headline.py::test_the_torchrun_line_is_the_served_command_on_more_processes",
        "test_distributed.py::test_torchrun_train_py_float32_first_update_equals_one_process"),
    ("README.md", TRL_RUN): (
        "test_snippets.py::test_the_trl_example_is_the_file_the_pages_quote",
        "test_snippets.py::test_the_trl_example_trains_from_the_sft_start_train_py_writes"),
    ("README.md", "export PYTHONPATH"): (
        "test_integrations_verl.py::test_the_launch_lines_run_verls_own_main_up_to_ray",),
    ("docs/integrations.md", "pip install"): (
        "test_snippets.py::test_the_install_and_test_lines_are_the_ones_ci_runs",),
    ("docs/integrations.md", "export PYTHONPATH"): (
        "test_integrations_verl.py::test_the_launch_lines_run_verls_own_main_up_to_ray",),
    ("docs/integrations.md", TRL_RUN): (
        "test_snippets.py::test_the_trl_example_is_the_file_the_pages_quote",
        "test_snippets.py::test_the_trl_example_trains_from_the_sft_start_train_py_writes"),
    ("docs/integrations.md", "import os"): (
        "test_snippets.py::test_the_trl_example_is_the_file_the_pages_quote",
        "test_snippets.py::test_the_trl_example_trains_from_the_sft_start_train_py_writes"),
}


def test_every_block_is_listed_with_tests_that_exist():
    listed = []
    for page in PAGES:
        for _, text in blocks(page):
            starts = [s for p, s in BLOCKS if p == page and text.startswith(s)]
            assert len(starts) == 1, f"{page}: a block listed {len(starts)} times in BLOCKS: {text[:80]!r}"
            listed.append((page, starts[0]))
    assert sorted(listed) == sorted(BLOCKS), "a listed block is not on its page, or two blocks begin alike"
    for name in {test for tests in BLOCKS.values() for test in tests}:
        file, test = name.split("::")
        defined = {n.name for n in ast.parse((ROOT / "tests" / file).read_text()).body if isinstance(n, ast.FunctionDef)}
        assert test in defined, f"{name} is no test"


def test_the_install_and_test_lines_are_the_ones_ci_runs():
    """The README's test command is .ci/run's, verbatim; the other lines' installs and docs/integrations.md's
    are parts of it; -m method is a declared mark. (CI runs the lines; a test cannot install or run the suite.)"""
    [ci] = [shlex.split(line) for line in (ROOT / ".ci" / "run").read_text().splitlines() if line.startswith("pip")]
    demo, suite, method = commands(block("README.md", "pip install -r requirements.txt && python train.py"))
    assert suite == ci
    steps = " ".join(ci).split(" && ")
    assert commands(block("docs/integrations.md", "pip install")) == [shlex.split(s) for s in steps[:2]]
    assert " ".join(demo) == "pip install -r requirements.txt && python train.py"     # tests/runs.py adds toy flags
    assert " ".join(method) == "pip install -r requirements.txt && python -m pytest -m method"
    assert steps[0].startswith("pip install -r requirements.txt ")
    assert "\n    method:" in (ROOT / "pytest.ini").read_text()


def example():
    """integrations/trl_example.py: (its docstring's command lines, its code after the docstring)."""
    text = (ROOT / "integrations" / "trl_example.py").read_text()
    doc = ast.get_docstring(ast.parse(text), clean=False)
    lines = "".join(line[4:] + "\n" for line in doc.splitlines() if line.startswith("    "))
    return lines, text[text.index('"""', 3) + 4:]


def test_the_trl_example_is_the_file_the_pages_quote():
    lines, code = example()
    assert block("README.md", TRL_RUN) == block("docs/integrations.md", TRL_RUN) == lines
    assert block("docs/integrations.md", "import os") == code


def run(argv):
    """A command line as a reader runs it, in the repository's root, on one thread."""
    p = subprocess.run(argv, cwd=ROOT, env={**os.environ, "OMP_NUM_THREADS": "1"}, capture_output=True, text=True,
                       timeout=300)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    return p.stdout + p.stderr


@pytest.mark.slow
def test_the_trl_example_trains_from_the_sft_start_train_py_writes(tmp_path):
    """The two commands, the second from the first's folder: a tiny SFT start that calls the tool often but
    not always (so rewards differ within a group), then two TRL steps of 2 prompts x G = 4 from it."""
    pytest.importorskip("trl", reason="optional: pip install -r requirements-bench.txt")
    rl, _ = write_world(tmp_path)
    out = str(tmp_path / "runs" / "slca-s0")
    sft, trl = commands(block("README.md", TRL_RUN))
    run(substituted(sft, {"python": sys.executable}) + [
        "--out", out, "--data", rl, "--sft-data", write_caller_sft(tmp_path / "sft.jsonl"), "--sft-epochs", "60",
        "--sft-lr", "1e-2", "--sft-batch", "4", "--tiny-size", "32", "1", "2"])
    assert os.path.isfile(os.path.join(out, "sft", "model.safetensors"))
    log = run(substituted(trl, {"python": sys.executable, "10": "2"}) + [
        "--out", out, "--data", rl, "--group-size", "4", "--prompts-per-step", "2", "--mini-batch", "2",
        "--max-tokens", "64", "--max-turns", "3"])
    assert log.count("'rewards/summary_reward/mean'") == 2                       # TRL logged two steps
    start, trained = (load_file(os.path.join(out, f, "model.safetensors")) for f in ("sft", "trl"))
    assert start.keys() == trained.keys() and any(not torch.equal(start[k], trained[k]) for k in start)
