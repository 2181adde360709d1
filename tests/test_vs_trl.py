"""tools/vs_trl.py: the FLOP count of its floor columns (by hand, and against torch's counter),
the passes it counts, and the script end to end on a toy size (the project and the floor)."""
import math

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode
from transformers import Qwen2Config

from helpers import tokenizer
from lib.training import tiny
from tools import vs_trl


def test_forward_flops_by_hand():
    cfg = Qwen2Config(vocab_size=10, hidden_size=4, intermediate_size=6, num_hidden_layers=2,
                      num_attention_heads=2, num_key_value_heads=1)
    # head_dim 2; weights per layer: q 4x4 + k 4x2 + v 4x2 + o 4x4 + gate, up, down 3x4x6 = 120
    # two spans: 3 new tokens after none (contexts 1, 2, 3), 2 after 3 (contexts 4, 5): 5 tokens, 15 keys read
    # per layer: 2 x 120 x 5 (linear) + 4 x 2 heads x 2 x 15 (QK^T, AV) = 1200 + 240; 2 layers: 2880
    # head on 2 positions: 2 x 4 x 10 x 2 = 160
    assert vs_trl.forward_flops(cfg, [(0, 3), (3, 2)], 2) == 2880 + 160
    assert vs_trl.forward_flops(cfg, [(0, 5)], 0) == vs_trl.forward_flops(cfg, [(0, 3), (3, 2)], 0)  # a cache changes nothing


def test_forward_flops_match_torch_flop_counter():
    """torch.utils.flop_counter on a tiny Qwen2's forward, with eager attention (plain matmuls):
    equal once attention is counted over the full L x L scores, as torch does (the causal mask
    is applied after the matmul; vs_trl counts each token's actual context, L(L+1)/2 keys per
    row). That is the only term that differs: -2.3% of the total here. (On a CPU tensor, torch's
    counter does not see the sdpa kernel at all.) A backward is 2x its forward."""
    model = tiny.build_model(tokenizer(), 0, hidden=64, layers=2, heads=4)
    model.config._attn_implementation = "eager"
    B, L = 2, 24
    ids = torch.randint(0, len(tokenizer()), (B, L))
    with FlopCounterMode(display=False) as fwd:
        logits = model(input_ids=ids).logits                                    # (B, L, V): the head on every position
    with FlopCounterMode(display=False) as bwd:
        logits.sum().backward()
    cfg, counted = model.config, fwd.get_total_flops()
    ours = vs_trl.forward_flops(cfg, [(0, L)] * B, B * L)
    full_minus_causal = cfg.num_hidden_layers * 4 * cfg.hidden_size * B * (L * L - L * (L + 1) // 2)
    assert ours + full_minus_causal == counted
    assert abs(ours / counted - 1) < 0.05
    assert abs(bwd.get_total_flops() / counted - vs_trl.BACKWARD) < 0.01


def test_logprob_flops_count_a_shared_prompt_once():
    cfg = tiny.build_model(tokenizer(), 0, hidden=32, layers=1, heads=2).config
    ids = torch.tensor([[5, 6, 7, 8, 9, 0], [5, 6, 7, 3, 0, 0]])              # a 3-id prompt, then each row's own
    attn = torch.tensor([[1, 1, 1, 1, 1, 0], [1, 1, 1, 1, 0, 0]])
    mask = torch.tensor([[0, 0, 0, 1, 1, 0], [0, 0, 0, 1, 0, 0]])
    shared = vs_trl.forward_flops(cfg, [(0, 3), (3, 2), (3, 1)], 3)
    assert vs_trl.logprob_flops(cfg, ids, attn, mask, torch.tensor([0, 0])) == shared
    assert vs_trl.logprob_flops(cfg, ids, attn, mask) == vs_trl.forward_flops(cfg, [(0, 5), (0, 4)], 3)
    assert vs_trl.logprob_flops(cfg, ids, attn, mask, torch.tensor([0, 1])) == vs_trl.logprob_flops(cfg, ids, attn, mask)
    # generate: every row whole, the head on its completion
    assert vs_trl.generate_flops(cfg, [[1, 2, 3], [1, 2]], [[4], [5, 6]]) == vs_trl.forward_flops(cfg, [(0, 4), (0, 4)], 3)


def test_floor_cells():
    rate = 2e9                                                                 # FLOP/s
    cells = vs_trl.floor_cells({"sample": 3.0, "no-grad": 0.0, "rest": 2.0}, {"sample": 2e9, "no-grad": 0, "rest": 4e9}, rate)
    assert cells == ["2.0", "2.0", "0.0", "4.0", "3.00", "3.00x", "-", "1.00x", "1.67x"]


def test_matmul_rate_is_positive():
    assert vs_trl.matmul_rate(tiny.build_model(tokenizer(), 0, hidden=32, layers=1, heads=2), tokens=16, repeats=1) > 0


@pytest.mark.slow
def test_vs_trl_project_and_floor_end_to_end(tmp_path, capsys):
    """The script on a toy size (the project and the floor; TRL is left out: minutes): every table
    row has its floor columns, with positive FLOPs and measured / floor ratios."""
    vs_trl.main(["--models", "demo", "--workloads", "single-turn", "--systems", "project", "floor", "--rounds", "1",
                 "--prompts", "1", "--group-size", "8", "--tokens", "4", "--threads", "1", "--tmp", str(tmp_path)])
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| ")]
    head, rows = [c.strip() for c in lines[0].strip("|").split("|")], lines[1:]
    assert len(rows) == 2 and head[-9:] == ["GFLOP/s", "sampling GFLOP", "no-grad GFLOP", "rest GFLOP", "floor s",
                                            "sampling x floor", "no-grad x floor", "rest x floor", "step x floor"]
    for line in rows:
        row = dict(zip(head, (c.strip() for c in line.strip("|").split("|"))))
        assert float(row["GFLOP/s"]) > 0 and float(row["sampling GFLOP"]) > 0 and float(row["rest GFLOP"]) > 0
        assert math.isfinite(float(row["step x floor"][:-1])) and float(row["step x floor"][:-1]) > 0
        assert (row["no-grad x floor"] == "-") == (row["system"] == "floor")  # the floor has no no-grad pass
        assert row["vs TRL"] == "-"                                           # no TRL row, no ratio to it
