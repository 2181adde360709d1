"""Shared test setup: one torch thread, repo root on the path, the reference run of the resume tests."""
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
