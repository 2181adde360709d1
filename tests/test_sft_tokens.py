"""SFT passes by token budget (train.py --sft-tokens, lib/training/sft.py `passes`): through train.py, the
padded ids of every forward/backward counted against the budget, and the losses and gradients
against the row-count passes."""
import json

import pytest
import torch
from safetensors.torch import load_file

import train
from lib.training import sft
from helpers import CALL, write_jsonl, write_world
from test_distributed import tail, torchrun

BUDGET = 360  # padded ids per pass: below the longest conversation here (400 ids), twice the shortest ones


def conversations(folder, n=12):
    """SFT conversations of 103 to 400 ids (the demo tokenizer trained on them and write_world's)."""
    return write_jsonl(folder / "sft.jsonl", [{"conversations": [
        {"from": "system", "value": "Call tools."}, {"from": "human", "value": "What is f of 1? " * (1 + 3 * (i % 6))},
        {"from": "gpt", "value": CALL}, {"from": "human", "value": '<tool_response>\n{"y": 42}\n</tool_response>'},
        {"from": "gpt", "value": "f of 1 is 42. " * (1 + i)}]} for i in range(n)])


def argv(tmp_path, out, *flags):
    """train.py's flags for SFT only: 12 conversations, 4 a step, the tiny model."""
    rl, _ = write_world(tmp_path)
    return ["--data", rl, "--sft-data", conversations(tmp_path), "--eval-data", "", "--sft-epochs", "1",
            "--sft-batch", "4", "--micro-batch", "4", "--steps", "0", "--tiny-size", "32", "1", "2",
            "--out", str(out), "--show", "0", *flags]


def sft_run(tmp_path, monkeypatch, name, *flags):
    """train.py, SFT only (4 conversations a step, 3 steps): per optimizer step, the (rows, length)
    of each pass and the gradient it took; and the logged losses."""
    shapes, grads, step = [], [], sft.optimizer_step
    log_probs = sft.token_logprobs

    def logprobs(model, ids, *args):
        shapes[-1].append(tuple(ids.shape))
        return log_probs(model, ids, *args)

    def optimizer_step(model, *args):
        grads.append({n: p.grad.clone() for n, p in model.named_parameters()})
        shapes.append([])
        return step(model, *args)

    shapes.append([])
    monkeypatch.setattr(sft, "token_logprobs", logprobs)
    monkeypatch.setattr(sft, "optimizer_step", optimizer_step)
    out = tmp_path / name
    train.main(argv(tmp_path, out, *flags))
    monkeypatch.undo()
    losses = [json.loads(x)["loss"] for x in open(out / "metrics.jsonl")]
    return shapes[:-1], grads, losses


def test_sft_passes_fit_the_token_budget_with_the_same_loss_and_gradient(tmp_path, monkeypatch):
    """--sft-tokens: every pass pads at most the budget's ids (rows x length) but for a
    conversation longer than the budget, which runs alone; each step sees all its conversations;
    the loss and the gradient of each step equal the row-count passes' (--micro-batch
    conversations padded to their longest) within float rounding."""
    rows, g_rows, l_rows = sft_run(tmp_path, monkeypatch, "rows")
    tokens, g_tok, l_tok = sft_run(tmp_path, monkeypatch, "tokens", "--sft-tokens", str(BUDGET))
    assert [sum(b for b, _ in s) for s in tokens] == [sum(b for b, _ in s) for s in rows] == [4, 4, 4]
    assert max(b * L for s in rows for b, L in s) > BUDGET                      # the row count pads past the budget
    alone = [L for s in tokens for b, L in s if b * L > BUDGET]
    assert alone and all(L > BUDGET for L in alone)                              # over budget: only a long row, alone
    assert all(b * L <= BUDGET or b == 1 for s in tokens for b, L in s)
    assert any(b > 1 for s in tokens for b, _ in s)                              # short ones share a pass
    assert len(l_tok) == len(l_rows) == 3
    assert all(abs(a - b) <= 1e-5 * abs(b) for a, b in zip(l_tok, l_rows)), (l_tok, l_rows)
    for a, b in zip(g_tok, g_rows):
        assert all(torch.allclose(a[k], b[k], rtol=1e-4, atol=1e-7) for k in a)


def test_sft_passes_agree_on_their_number_over_ranks(monkeypatch):
    """Under torchrun every rank runs as many passes (FSDP2 pairs up their collectives): a rank
    with fewer passes, or no conversation, adds empty ones, which learn nothing."""
    rows = [([1] * 5, [1] * 5), ([1] * 3, [0, 1, 1])]
    monkeypatch.setattr(sft, "gather", lambda xs: [*xs, 4])                     # another rank runs 4 passes
    for tokens in (None, 10):
        got = sft.passes(rows, 2, tokens, 0)
        assert len(got) == 4 and all(p == [([0], [0])] for p in got[-3 if tokens is None else -2:])
    assert sft.passes([], 2, None, 0) == [[([0], [0])]] * 4


@pytest.mark.slow
def test_sft_passes_by_tokens_under_torchrun_equal_one_process(tmp_path):
    """`torchrun --nproc_per_node 2 train.py --sft-tokens N` (gloo, FSDP2): each rank packs its
    share of a step by the budget, so the ranks' pass counts differ (the third step here: 2 and
    1) and the shorter adds an empty pass; the logged losses (every rank's share) and the SFT
    weights equal one process's (the normaliser counts the step's tokens once, not once per rank)."""
    flags = ["--sft-tokens", str(BUDGET)]
    p = torchrun("train.py", *argv(tmp_path, tmp_path / "two", *flags))
    assert p.returncode == 0, tail(p)
    train.main(argv(tmp_path, tmp_path / "one", *flags))
    losses = {n: [json.loads(x)["loss"] for x in open(tmp_path / n / "metrics.jsonl")] for n in ("one", "two")}
    assert len(losses["one"]) == 3 and all(abs(a - b) <= 1e-6 * b for a, b in zip(losses["two"], losses["one"]))
    one, two = (load_file(tmp_path / n / "sft" / "model.safetensors") for n in ("one", "two"))
    assert all(torch.allclose(one[k], two[k], atol=1e-5) for k in one)
