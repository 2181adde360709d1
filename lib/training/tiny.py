"""The embedded default model: a tokenizer trained here and a tiny random Qwen2.

`python train.py` with no --model needs a policy that exists without a download. This module
trains a byte-level BPE tokenizer on the shipped tool world, gives it a Qwen2.5-style Hermes
chat template (tools in the system turn inside <tools></tools>, calls in <tool_call>, results
in a user turn as <tool_response>), builds a small Qwen2ForCausalLM from a seed, and saves
both as an ordinary Hugging Face folder. Everything downstream then loads it with
`from_pretrained(path)`: the same code path a real Qwen model takes.

    python -m lib.training.tiny --out runs/tiny-base          # build and save (a few seconds)
"""
import argparse
import json

import torch
from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

from lib.inputs.chat import TOOLS_HEAD, TOOLS_TAIL
from lib.inputs.text import encodable



SIZE = (128, 2, 4)  # hidden size, layers, attention heads of the demo model (train.py --tiny-size)
SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]  # Qwen2.5's: pad, turn start, eos
# Qwen2.5 also keeps these as single (non-special) tokens, so a turn can stop on </tool_call>
MARKUP = ["<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>",
          "<tools>", "</tools>", "<think>", "</think>"]


# Pieces BPE may merge within. Loading a qwen2 folder, AutoTokenizer gives Qwen2Tokenizer,
# which swaps in Qwen2.5's own split (one digit a piece, a word with one non-letter before
# it): merges learned on these finer pieces (digits alone, words without the space or quote
# before them) give the same ids under that split, so the built and the loaded tokenizer
# agree. A name is then one id in 'weather in Paris?', in '"city": "Paris"' and in
# '{"city":"Paris"}': passing a value from the question or a tool response into an
# argument or a summary copies that id.
PIECES = r"'s|'t|'re|'ve|'m|'ll|'d|\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+|\s+"


def _literal(text):
    """`text` as a single-quoted Jinja string literal."""
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'").replace("\n", "\\n") + "'"


# Output-identical to Qwen2.5-Instruct's template for the parts this project uses
# (system/user/assistant/tool messages, tools, add_generation_prompt).
CHAT_TEMPLATE = (
    "{%- if tools %}"
    "{{- '<|im_start|>system\\n' }}"
    "{%- if messages[0].role == 'system' %}{{- messages[0].content }}"
    "{%- else %}{{- 'You are a helpful assistant.' }}{%- endif %}"
    "{{- '\\n\\n' + " + _literal(TOOLS_HEAD) + " }}"
    "{%- for tool in tools %}{{- '\\n' }}{{- tool | tojson }}{%- endfor %}"
    "{{- " + _literal(TOOLS_TAIL) + " + '<|im_end|>\\n' }}"
    "{%- elif messages[0].role == 'system' %}"
    "{{- '<|im_start|>system\\n' + messages[0].content + '<|im_end|>\\n' }}"
    "{%- else %}{{- '<|im_start|>system\\nYou are a helpful assistant.<|im_end|>\\n' }}{%- endif %}"
    "{%- for m in messages %}"
    "{%- if m.role == 'user' or (m.role == 'system' and not loop.first) or (m.role == 'assistant' and not m.tool_calls) %}"
    "{{- '<|im_start|>' + m.role + '\\n' + m.content + '<|im_end|>\\n' }}"
    "{%- elif m.role == 'assistant' %}"
    "{{- '<|im_start|>assistant' }}{%- if m.content %}{{- '\\n' + m.content }}{%- endif %}"
    "{%- for tc in m.tool_calls %}{%- if tc.function is defined %}{%- set tc = tc.function %}{%- endif %}"
    "{{- '\\n<tool_call>\\n{\"name\": \"' + tc.name + '\", \"arguments\": ' }}{{- tc.arguments | tojson }}"
    "{{- '}\\n</tool_call>' }}{%- endfor %}{{- '<|im_end|>\\n' }}"
    "{%- elif m.role == 'tool' %}"
    "{%- if loop.index0 == 0 or messages[loop.index0 - 1].role != 'tool' %}{{- '<|im_start|>user' }}{%- endif %}"
    "{{- '\\n<tool_response>\\n' + m.content + '\\n</tool_response>' }}"
    "{%- if loop.last or messages[loop.index0 + 1].role != 'tool' %}{{- '<|im_end|>\\n' }}{%- endif %}"
    "{%- endif %}{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)


def tool_lines(texts, limit=64):
    """The `limit` most frequent lines of <tools> blocks in `texts` (tool definitions, one JSON
    object a line), with TOOLS_HEAD and TOOLS_TAIL when such a block occurs. The limit only
    bounds the vocabulary on other data: the shipped world has 16 tools."""
    counts = {}
    for text in texts:
        start = text.find(TOOLS_HEAD)
        end = text.find(TOOLS_TAIL, start + 1)
        if start < 0 or end < 0:
            continue
        for line in text[start + len(TOOLS_HEAD):end].split("\n"):
            if line:
                counts[line] = counts.get(line, 0) + 1
    lines = sorted(counts, key=lambda x: (-counts[x], x))[:limit]
    return lines + [TOOLS_HEAD, TOOLS_TAIL] if lines else []


def build_tokenizer(texts, vocab_size=2048):
    """Byte-level BPE trained on `texts`, wrapped as a fast HF tokenizer with the template.

    Every tool-definition line of the tool blocks in `texts`, and the fixed text around
    them, becomes one token (`tool_lines`): the text is Qwen2.5's, only its ids are fewer.
    A 2-layer model trained from scratch cannot read a JSON Schema anyway; it learns each
    offered tool as one embedding, and a prompt of the shipped world shrinks from ~440 to
    ~65 tokens, which is most of the cost of SFT and of every RL forward pass."""
    texts = list(texts)
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Split(Regex(PIECES), "isolated"),
                                                 pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=SPECIAL,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(texts, trainer)
    hf = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>",
                                 additional_special_tokens=["<|im_start|>"])
    hf.add_tokens(MARKUP)  # single tokens that survive skip_special_tokens, as in Qwen2.5
    hf.add_tokens(tool_lines(texts))
    hf.chat_template = CHAT_TEMPLATE
    return hf


def build_model(tokenizer, seed=0, hidden=SIZE[0], layers=SIZE[1], heads=SIZE[2]):
    """A randomly initialised Qwen2 sized for a CPU (~0.55M parameters at the defaults on the shipped world)."""
    torch.manual_seed(seed)
    config = Qwen2Config(vocab_size=len(tokenizer), hidden_size=hidden, intermediate_size=3 * hidden,
                         num_hidden_layers=layers, num_attention_heads=heads, num_key_value_heads=heads // 2,
                         max_position_embeddings=4096, tie_word_embeddings=True,
                         eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id,
                         bos_token_id=None)
    return Qwen2ForCausalLM(config)


def world_texts(tasks, convs):
    """Training text for the tokenizer: every message and tool schema of loaded data, made
    encodable (a lone surrogate in a data row would crash the trainer)."""
    for t in tasks:
        yield from (encodable(m["content"]) for m in t.messages)
        yield json.dumps(t.tools)  # ASCII: json escapes a surrogate
    for c in convs:
        yield from (encodable(m["content"]) for m in c)


def build(out, texts, seed=0, size=SIZE, vocab_size=2048):
    """Train the tokenizer on `texts`, build the model of `size` (hidden, layers, heads), save both under `out`."""
    tok = build_tokenizer(texts, vocab_size)
    model = build_model(tok, seed, *size)
    tok.save_pretrained(out)
    model.save_pretrained(out)
    return out


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", default="runs/tiny-base")
    p.add_argument("--sft", default="data/world/sft.jsonl", help="SFT conversations to train the tokenizer on")
    p.add_argument("--rl", default="data/world/rl.jsonl", help="RL prompts to train the tokenizer on")
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args()
    from lib.inputs.data import load_sft, load_tasks
    print("saved", build(a.out, world_texts(load_tasks(a.rl), load_sft(a.sft)), a.seed))
