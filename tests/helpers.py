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
