"""rollout.py: masks, observations, caps and the token-in/token-out prefix property."""
from types import SimpleNamespace

import torch

from helpers import tiny_model, tokenizer
from rollout import collate, prompt_ids, rollout
from segment import find_blocks, parse_block

CALL = '<tool_call>\n[{"name": "f", "arguments": {"x": 1}}]\n</tool_call>'
ANSWER = "The answer is 42.<|im_end|>"
TOOLS = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]


def task(system="Call tools."):
    return SimpleNamespace(messages=[{"role": "system", "content": system}, {"role": "user", "content": "q?"}],
                           tools=TOOLS, question="q?")


class Scripted:
    """A stand-in policy: row r says script(r, turn) in its turn; records every input."""
    device = torch.device("cpu")

    def __init__(self, script):
        self.tok, self.script, self.inputs = tokenizer(), script, []
        self.obs_id = self.tok.convert_tokens_to_ids("<tool_response>")

    def generate(self, input_ids, attention_mask, max_new_tokens, eos_token_id, pad_token_id, **kw):
        new = []
        for ids, attn in zip(input_ids.tolist(), attention_mask.tolist()):
            seq = [t for t, m in zip(ids, attn) if m]
            self.inputs.append(seq)
            row = int(self.tok.decode(seq).split("row=")[1][0])
            turn = seq.count(self.obs_id)  # one observation per tool turn so far
            new.append(self.tok.encode(self.script(row, turn), add_special_tokens=False)[:max_new_tokens])
        W = max(map(len, new))
        out = torch.tensor([n + [pad_token_id] * (W - len(n)) for n in new])
        return torch.cat([input_ids, out], 1)


class EchoSim:
    def __init__(self, obs="obs-text"):
        self.obs, self.seen = obs, []

    def respond(self, texts, tasks):
        self.seen.append(len(texts))
        out = []
        for t in texts:
            calls = [c for b in find_blocks(t) for c in parse_block(b)]
            out.append((calls, [self.obs] * max(1, len(calls))))
        return out


def tasks_rows(n):
    return [task(f"Call tools. row={i}") for i in range(n)]


def test_masks_line_up_and_observations_are_masked():
    tok = tokenizer()
    model = Scripted(lambda r, t: CALL if t < r else ANSWER)  # row r makes r tool turns
    rs = rollout(model, tok, tasks_rows(3), EchoSim(), max_turns=5, max_tokens=500)
    for r_i, r in enumerate(rs):
        assert r.stop == "done" and r.tool_turns == r_i and len(r.turns) == r_i + 1
        assert len(r.ids) == len(r.mask) == len(r.tool_mask) == len(r.summary_mask)
        policy = tok.decode([t for t, m in zip(r.ids, r.mask) if m], skip_special_tokens=False)
        assert policy == (CALL * r_i) + ANSWER
        glue = tok.decode([t for t, m in zip(r.ids, r.mask) if not m])
        assert glue.count("obs-text") == r_i and glue.count("<tool_response>") == r_i
        assert [a + b for a, b in zip(r.tool_mask, r.summary_mask)] == r.mask
        assert tok.decode([t for t, m in zip(r.ids, r.summary_mask) if m], skip_special_tokens=False) == ANSWER
        assert r.final == "The answer is 42." and r.observations == ["obs-text"] * r_i
    # the response reads exactly like the chat template renders the conversation
    r = rs[2]
    msgs = task("Call tools. row=2").messages + [
        {"role": "assistant", "content": CALL}, {"role": "tool", "content": "obs-text"},
        {"role": "assistant", "content": CALL}, {"role": "tool", "content": "obs-text"},
        {"role": "assistant", "content": "The answer is 42."}]
    assert tok.decode(r.prompt + r.ids) == tok.apply_chat_template(msgs, tools=TOOLS, tokenize=False).rstrip("\n")


def test_token_in_token_out_prefix_property():
    tok = tokenizer()
    model = Scripted(lambda r, t: CALL if t < 2 else ANSWER)
    rs = rollout(model, tok, tasks_rows(2), EchoSim(), max_turns=5, max_tokens=500)
    for r in rs:
        mine = [x for x in model.inputs if x[:len(r.prompt)] == r.prompt]
        assert len(mine) == 3
        for a, b in zip(mine, mine[1:]):
            assert b[:len(a)] == a  # each turn's input extends the last one, ids untouched
        assert mine[-1] + r.ids[len(mine[-1]) - len(r.prompt):] == r.prompt + r.ids


def test_turn_cap():
    model = Scripted(lambda r, t: CALL)
    sim = EchoSim()
    rs = rollout(model, tokenizer(), tasks_rows(2), sim, max_turns=3, max_tokens=2000)
    for r in rs:
        assert r.stop == "turns" and len(r.turns) == 3 and r.tool_turns == 3
        assert len(r.observations) == 2  # the capped turn's call is never answered
        assert r.final == ""              # it ends on a tool turn: no summary to judge (S_sum = 0)
        assert sum(r.summary_mask) == len(tokenizer().encode(CALL))  # that last call turn is the "summary" run
    assert sim.seen == [2, 2]


def test_length_cap_stops_before_the_observation():
    tok = tokenizer()
    n_call = len(tok.encode(CALL, add_special_tokens=False))
    model = Scripted(lambda r, t: CALL)
    rs = rollout(model, tok, tasks_rows(1), EchoSim("x" * 400), max_turns=5, max_tokens=n_call + 20)
    r, = rs
    assert r.stop == "length" and len(r.ids) == n_call and r.observations == [] and sum(r.mask) == n_call
    # a budget cut inside generation
    rs = rollout(Scripted(lambda r, t: "word " * 50), tok, tasks_rows(1), EchoSim(), max_tokens=7)
    assert rs[0].stop == "length" and len(rs[0].ids) == 7


def test_tools_not_injected_twice():
    tok = tokenizer()
    plain = tok.decode(prompt_ids(tok, task()))
    assert plain.count("<tools>\n") == 1  # injected from task.tools
    held = tok.decode(prompt_ids(tok, task("sys\n<tools>\n{}\n</tools>")))
    assert held.count("<tools>\n") == 1 and "# Tools" not in held  # already in the system message


def test_real_model_rollout_and_collate():
    torch.manual_seed(0)
    tok, model = tokenizer(), tiny_model()
    rs = rollout(model, tok, tasks_rows(4), EchoSim(), groups=[0, 0, 1, 1], max_turns=3, max_tokens=40)
    b = collate(rs, tok.pad_token_id)
    assert b["input_ids"].shape == b["response_mask"].shape
    for i, r in enumerate(rs):
        n = len(r.prompt) + len(r.ids)
        assert b["input_ids"][i, :n].tolist() == r.prompt + r.ids
        assert b["response_mask"][i, len(r.prompt):n].tolist() == r.mask
        assert b["attention_mask"][i].sum() == n and b["response_mask"][i, :len(r.prompt)].sum() == 0
        assert torch.equal(b["tool_mask"][i] + b["summary_mask"][i], b["response_mask"][i])
        assert r.stop in ("done", "turns", "length") and len(r.ids) <= 40
    # greedy is deterministic
    g1 = rollout(model, tok, tasks_rows(2), EchoSim(), temperature=0.0, max_tokens=30)
    g2 = rollout(model, tok, tasks_rows(2), EchoSim(), temperature=0.0, max_tokens=30)
    assert [r.ids for r in g1] == [r.ids for r in g2]
