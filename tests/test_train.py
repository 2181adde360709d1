"""train.py: flags, SFT masking and loss, chunked log-probs, and one RL step end to end."""
import json
import math
import os

import pytest
import torch

import llm
import train
from helpers import tiny_model, tokenizer, verl_row

CALL = '<tool_call>\n[{"name": "f", "arguments": {"x": 1}}]\n</tool_call>'


def test_chunked_logprobs_match_full_softmax():
    torch.manual_seed(0)
    model, tok = tiny_model(), tokenizer()
    ids = torch.randint(0, len(tok), (3, 17))
    attn = torch.ones_like(ids)
    attn[2, 12:] = 0                                        # right padding
    mask = (torch.rand(3, 17) < 0.6).long() * attn
    with torch.no_grad():
        full = model(input_ids=ids, attention_mask=attn).logits.log_softmax(-1)  # (B, L, V)
        ref = torch.zeros(3, 17)
        for b in range(3):
            for t in range(1, 17):
                if mask[b, t]:
                    ref[b, t] = full[b, t - 1, ids[b, t]]
        got = train.token_logprobs(model, ids, attn, mask, chunk=4)
    assert torch.allclose(got, ref, atol=1e-5)
    # gradients flow through the checkpointed chunks
    train.token_logprobs(model, ids, attn, mask, chunk=4).sum().backward()
    assert model.lm_head.weight.grad.abs().sum() > 0


def test_sft_mask_covers_assistant_tokens_only():
    tok = tokenizer()
    msgs = [{"role": "system", "content": "sys"}, {"role": "user", "content": "q"},
            {"role": "assistant", "content": CALL}, {"role": "user", "content": "<tool_response>\nr\n</tool_response>"},
            {"role": "assistant", "content": "The answer is 42."}]
    ids, mask = train.sft_example(tok, msgs, 10_000)
    assert len(ids) == len(mask)
    learned = tok.decode([t for t, m in zip(ids, mask) if m], skip_special_tokens=False)
    assert learned == CALL + "<|im_end|>" + "The answer is 42.<|im_end|>"
    assert train.sft_example(tok, msgs, 9)[0] == ids[:9]


def write_jsonl(path, rows):
    with open(path, "w") as f:
        f.writelines(json.dumps(r) + "\n" for r in rows)
    return str(path)


@pytest.fixture
def world(tmp_path):
    gold = [[{"name": "f", "arguments": {"x": 1}}]]
    resp = [{"name": "f", "arguments": {"x": 1}, "response": '{"y": 42}'}]
    rl = write_jsonl(tmp_path / "rl.jsonl", [verl_row(f"What is f of 1, case {i}?", gold, resp, ["42"]) for i in range(4)])
    sft = write_jsonl(tmp_path / "sft.jsonl", [{"conversations": [
        {"from": "system", "value": "Call tools."}, {"from": "human", "value": f"What is f of 1, case {i}?"},
        {"from": "gpt", "value": CALL}, {"from": "human", "value": '<tool_response>\n{"y": 42}\n</tool_response>'},
        {"from": "gpt", "value": "f of 1 is 42."}]} for i in range(8)])
    return tmp_path, rl, sft


def test_sft_loss_falls(world):
    tmp, _, sft = world
    a = train.get_args(["--data", str(tmp / "rl.jsonl"), "--sft-lr", "1e-2", "--sft-batch", "4", "--sft-epochs", "8"])
    from data import load_sft
    rows = []
    model = tiny_model()
    train.sft(model, tokenizer(), load_sft(sft), a, rows.append)
    losses = [r["loss"] for r in rows]
    assert len(losses) == 16 and all(math.isfinite(x) for x in losses)
    assert losses[-1] < 0.5 * losses[0]


@pytest.mark.slow
def test_one_rl_step_changes_weights_and_logs_every_field(world):
    tmp, rl, _ = world
    out = tmp / "run"
    train.main(["--data", rl, "--sft-data", "", "--eval-data", "", "--steps", "1", "--group-size", "4",
                "--prompts-per-step", "2", "--mini-batch", "1", "--micro-batch", "3", "--max-tokens", "48",
                "--max-turns", "2", "--lr", "1e-3", "--grad-cosine", "--out", str(out)])
    from transformers import AutoModelForCausalLM
    before = AutoModelForCausalLM.from_pretrained(out / "base")
    after = AutoModelForCausalLM.from_pretrained(out / "final")
    changed = [n for (n, p), q in zip(before.named_parameters(), after.parameters()) if not torch.equal(p, q)]
    assert changed
    m, = [json.loads(l) for l in open(out / "metrics.jsonl")]
    for k in ["format", "name", "key", "value", "parallel", "process", "summary", "score", "omission",
              "r_tool", "r_sum", "adv_tool_mean", "adv_tool_std", "adv_tool_zero_groups", "adv_sum_mean",
              "adv_sum_std", "adv_sum_zero_groups", "sign_conflict", "clip_frac", "kl", "approx_kl", "ratio",
              "grad_norm", "tool_turns", "length", "rollout_tok_s", "train_tok_s", "grad_cosine"]:
        assert k in m and math.isfinite(m[k]), k
    assert -1 <= m["grad_cosine"] <= 1
    rollouts = [json.loads(l) for l in open(out / "rollouts.jsonl")]
    assert len(rollouts) == 8 and {r["group"] for r in rollouts} == {0, 1}
    assert json.load(open(out / "config.json"))["algo"] == "slca"


@pytest.mark.parametrize("argv,flag", [
    (["--data", "missing.jsonl"], "--data"),
    (["--model", "some/model"], "--data"),
    (["--sft-data", "nope.jsonl"], "--sft-data"),
    (["--prompts-per-step", "8", "--mini-batch", "3"], "--prompts-per-step"),
    (["--group-size", "0"], "--group-size"),
    (["--algo", "ppo"], "--algo"),
    (["--hierr-weights", "1", "0", "0", "0", "-1"], "--hierr-weights"),
])
def test_bad_flags_name_the_flag(argv, flag, capsys):
    with pytest.raises(SystemExit) as e:
        train.get_args(argv)
    assert e.value.code == 2 and flag in capsys.readouterr().err


def test_bad_data_row_names_file_row_and_field(tmp_path):
    bad = verl_row("q", [], [])
    bad["prompt"] = 7
    path = write_jsonl(tmp_path / "bad.jsonl", [verl_row("q", [], []), bad])
    with pytest.raises(ValueError, match=r"bad.jsonl row 1: field 'prompt'"):
        train.main(["--data", path, "--sft-data", "", "--eval-data", "", "--steps", "0", "--out", str(tmp_path / "r")])


def test_load_policy_with_activation_checkpointing(tmp_path):
    torch.manual_seed(0)
    tiny_model().save_pretrained(tmp_path)
    tokenizer().save_pretrained(tmp_path)
    plain, tok = llm.load_policy(str(tmp_path))
    ckpt, _ = llm.load_policy(str(tmp_path), grad_ckpt=True)
    assert ckpt.is_activation_checkpointing and not plain.is_activation_checkpointing
    ids = torch.randint(0, len(tok), (2, 9))
    attn, mask = torch.ones_like(ids), torch.ones_like(ids)
    plain.train(), ckpt.train()
    a, b = train.token_logprobs(plain, ids, attn, mask), train.token_logprobs(ckpt, ids, attn, mask)
    assert torch.allclose(a, b, atol=1e-6)
    a.sum().backward(), b.sum().backward()
    for p, q in zip(plain.parameters(), ckpt.parameters()):
        assert torch.allclose(p.grad, q.grad, atol=1e-6)
