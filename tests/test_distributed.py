"""torchrun + FSDP2 on CPU (gloo, 2 processes): given the same rollouts, the sharded update
equals the single-process one, for both loss aggregations (the normaliser is global)."""
import os
import subprocess
import sys

import pytest
import torch

import dist_update
from helpers import tiny_model

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.mark.slow
def test_gloo_two_process_fsdp_update_equals_one_process(tmp_path):
    out = tmp_path / "two.pt"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": os.pathsep.join([ROOT, os.path.join(ROOT, "tests")])}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port", "0",
           "--rdzv_backend", "c10d", "--rdzv_endpoint", "127.0.0.1:0", "tests/dist_update.py", str(out)]
    p = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    two = torch.load(out)
    start = tiny_model().state_dict()
    for agg, (state, loss, norm) in two.items():
        want, want_loss, want_norm = dist_update.update(agg)              # one process, no FSDP
        assert abs(loss - want_loss) < 1e-5 and abs(norm - want_norm) < 1e-4, agg
        assert state.keys() == want.keys() == start.keys()
        assert any(not torch.equal(v, start[k]) for k, v in want.items())  # the update moved the weights
        for k, v in want.items():
            assert torch.allclose(v, state[k], atol=2e-6, rtol=1e-5), (agg, k)
