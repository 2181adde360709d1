"""Shared test setup: one torch thread, repo root on the path, the reference run of the resume tests, and
the `method` mark: the method's tests, which run with requirements.txt alone (a fork's loop)."""
import os
import sys

import pytest
import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
torch.set_num_threads(1)


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """An uninterrupted toy train.py run (tests/runs.py), once per test file that asks for it."""
    import runs
    return runs.reference(tmp_path_factory)


# the method's tests (segments, rewards and their release parity, advantages, loss, rollout glue, the toy train.py
# runs): `python -m pytest -m method` runs them, and imports no other test module (those may need the extras of
# requirements-bench*.txt: benchmarks, TRL, the real model); the system tests run in the full run (.ci/run)
METHOD = {"test_segment.py", "test_rewards.py", "test_release_parity.py", "test_advantage.py", "test_loss.py",
          "test_equations.py", "test_rollout.py", "test_train.py"}


def pytest_ignore_collect(collection_path, config):
    if config.option.markexpr == "method" and collection_path.suffix == ".py" and collection_path.name not in METHOD:
        return True
    return None


# the longest files (seconds at one thread, measured), started first: --dist loadfile keeps a file on one
# worker, and a long file started last leaves the other worker idle until it ends (test_smol.py did: 65 s);
# test_smol.py with the --world wrong toy: 305 s, measured beside another two-thread job
LONGEST = {"test_smol.py": 305, "test_distributed.py": 74, "test_resume.py": 49, "test_real_model.py": 44,
           "test_run_folder.py": 41, "test_reproduce.py": 36}


def pytest_collection_modifyitems(items):
    items.sort(key=lambda item: -LONGEST.get(item.path.name, 0))  # stable: the rest keep their order
    for item in items:
        if item.path.name in METHOD:
            item.add_marker(pytest.mark.method)
