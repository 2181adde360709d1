"""Small shared fixtures: a tokenizer and a tiny Qwen2 built locally (no downloads)."""
import functools
import json

import tiny

CORPUS = ['{"name": "get_weather", "arguments": {"city": "Paris", "unit": "c"}}',
          "The weather in Paris is 21 degrees and sunny. The answer is 42.",
          '<tool_call>\n[{"name": "f", "arguments": {"x": 1}}]\n</tool_call>',
          '<tool_response>\n{"temp": 21}\n</tool_response>'] * 20


@functools.lru_cache(maxsize=None)
def tokenizer():
    return tiny.build_tokenizer(CORPUS, vocab_size=400)


def tiny_model(seed=0):
    return tiny.build_model(tokenizer(), seed=seed, hidden=32, layers=1, heads=2).eval()


def verl_row(question, gold, responses, facts=(), tools=None):
    """One RL row in the release's verl layout."""
    tools = tools or [{"type": "function", "function": {"name": "f", "description": "F.", "parameters": {
        "type": "object", "properties": {"x": {"type": "integer"}}, "required": ["x"]}}}]
    return {"prompt": [{"role": "system", "content": "Call tools."}, {"role": "user", "content": question}],
            "tools": json.dumps(tools),
            "reward_model": {"ground_truth": {"allowed_tools": [t["function"]["name"] for t in tools],
                                              "gold_tool_calls": json.dumps(gold), "question_content": question,
                                              "subset_name": "tool_call", "reference_facts": list(facts)}},
            "extra_info": {"parallel_type": "single_step_single_tool", "tool_responses": responses}}


CALL = '<tool_call>\n[{"name": "f", "arguments": {"x": 1}}]\n</tool_call>'


def write_jsonl(path, rows):
    with open(path, "w") as f:
        f.writelines(json.dumps(r) + "\n" for r in rows)
    return str(path)


def write_world(folder, n_rl=4, n_sft=8):
    """A small RL file and SFT file of one tool, f(x) -> 42: (rl path, sft path)."""
    gold = [[{"name": "f", "arguments": {"x": 1}}]]
    resp = [{"name": "f", "arguments": {"x": 1}, "response": '{"y": 42}'}]
    rl = write_jsonl(folder / "rl.jsonl", [verl_row(f"What is f of 1, case {i}?", gold, resp, ["42"])
                                            for i in range(n_rl)])
    sft = write_jsonl(folder / "sft.jsonl", [{"conversations": [
        {"from": "system", "value": "Call tools."}, {"from": "human", "value": f"What is f of 1, case {i}?"},
        {"from": "gpt", "value": CALL}, {"from": "human", "value": '<tool_response>\n{"y": 42}\n</tool_response>'},
        {"from": "gpt", "value": "f of 1 is 42."}]} for i in range(n_sft)])
    return rl, sft
