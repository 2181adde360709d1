"""The models behind the benchmarks' callables: generate(list_of_messages, list_of_tools) -> texts.

bench/bfcl.py and bench/tau2.py call a plain `generate`; this module builds one from a
model (docs/method.md §9):

- `local_generate`: an in-process policy (lib.training.model.load_policy), one assistant turn per prompt
  through transformers' `generate` (`decode`: left-padded batches; rollout.py's sampler has
  no way to end a row on a loop). Framing "toucan" (the release's, default):
  bench/hermes.py writes the system prompt, the tools and the tool turns as text and the
  model's chat template only wraps the turns; the reply stops at eos, pad or the first
  `</tool_call>` (the framing asks for every call of a step in ONE block, so nothing is
  lost). Framing "qwen": the model's own chat template renders the tools and the reply goes
  on past `</tool_call>` (Qwen writes one block per call). In both, a reply also ends at
  `<|im_start|>` (the model opening another turn) and when it has degenerated into a loop
  (`LoopStop`: its last LOOP_WINDOW tokens repeat one unit of at most LOOP_PERIOD tokens).
  Deviation (a flag): the release's vLLM would run such a loop on to the budget; the cut
  reply is the same failure, minutes sooner (a small model loops on unfamiliar prompts).
  `loop_stop=False` (`python -m bench ... --no-loop-cut`) runs it on to the budget, as the release.
  A reply also ends where the model's context ends, and a prompt that fills the context
  gets an empty reply, as an OpenAI-compatible server refuses it (the demo model has 4,096
  positions; BFCL's multi-turn prompts are longer).
- `client_generate`: a chat client of lib/frozen/llm.py (an OpenAI-compatible endpoint, or an
  in-process chat model); the tools and tool turns go as Hermes text (bench/hermes.py);
  a failed request is an empty reply.
- `Batched`: one batch generate shared by threads (τ²'s concurrent tasks).

Temperature 0 is greedy. The reply budget is `max_tokens` per reply (BFCL 8,192, τ² 1,024
in the release's settings; eval.py sets them).

    python -c "from bench import models; help(models.local_generate)"
"""
import threading
from concurrent.futures import Future

import torch
from transformers import StoppingCriteria, StoppingCriteriaList

from bench.hermes import TOUCAN_RULES, as_text
from lib.inputs.chat import chat_ids
from rollout import stop_ids

LOOP_WINDOW, LOOP_PERIOD = 128, 16  # a loop: 128 tokens repeating a unit of <= 16 tokens (>= 8 repeats)


class LoopStop(StoppingCriteria):
    """Per row: True once its newest LOOP_WINDOW generated tokens are periodic with a period of
    at most LOOP_PERIOD. `start` is the (padded) prompt length."""

    def __init__(self, start):
        self.start = start

    def __call__(self, input_ids, scores, **kwargs):
        done = torch.zeros(input_ids.shape[0], dtype=torch.bool, device=input_ids.device)  # (B,)
        if input_ids.shape[1] - self.start >= LOOP_WINDOW:
            tail = input_ids[:, -LOOP_WINDOW:]                                               # (B, W)
            for p in range(1, LOOP_PERIOD + 1):
                done |= (tail[:, p:] == tail[:, :-p]).all(dim=1)
        return done


@torch.no_grad()
def decode(model, tok, seqs, max_tokens, *, temperature, batch_size, stops, loop_stop=True):
    """One reply (ids) per prompt: left-padded batches through model.generate; a row ends at its
    first id in `stops` (kept), at a loop (LoopStop, unless not `loop_stop`), after max_tokens, or where the model's
    context (config.max_position_embeddings) ends; a prompt that fills it gets no reply (an
    OpenAI-compatible server refuses it). Temperature 0 is greedy, else plain temperature
    sampling (no top-k / top-p)."""
    pad, ends = tok.pad_token_id, set(stops) | {tok.pad_token_id}
    ctx = getattr(model.config, "max_position_embeddings", None) or float("inf")
    budget = [int(min(max_tokens, ctx - len(q))) for q in seqs]
    out = [[] for _ in seqs]
    todo = [i for i, b in enumerate(budget) if b >= 1]
    sample = dict(do_sample=True, temperature=temperature, top_k=0, top_p=1.0) if temperature > 0 \
        else dict(do_sample=False)
    for s in range(0, len(todo), batch_size):
        rows = todo[s:s + batch_size]
        L = max(len(seqs[i]) for i in rows)
        ids = torch.tensor([[pad] * (L - len(seqs[i])) + seqs[i] for i in rows], device=model.device)   # (b, L)
        attn = torch.tensor([[0] * (L - len(seqs[i])) + [1] * len(seqs[i]) for i in rows], device=model.device)
        gen = model.generate(input_ids=ids, attention_mask=attn, max_new_tokens=max(budget[i] for i in rows),
                             eos_token_id=stops, pad_token_id=pad,
                             stopping_criteria=StoppingCriteriaList([LoopStop(L)] if loop_stop else []), **sample)
        for i, row in zip(rows, gen[:, L:].tolist()):  # a finished row is padded: cut at its first end id
            out[i] = row[:min(budget[i], next((k + 1 for k, t in enumerate(row) if t in ends), len(row)))]
    return out


def local_generate(model, tok, batch_size, max_tokens, *, temperature=0.0, framing="toucan", keep_system=True,
                   rules=TOUCAN_RULES, loop_stop=True):
    """An in-process policy as generate(list_of_messages, list_of_tools) -> texts (module docstring)."""
    start = tok.convert_tokens_to_ids("<|im_start|>")
    stops = sorted(set(stop_ids(tok, stop_at_call=framing == "toucan"))
                   | ({start} if start not in (None, tok.unk_token_id) else set()))

    def prompt(messages, tools):
        if framing == "toucan":
            messages, tools = as_text(messages, tools, framing, keep_system, rules), None
        return chat_ids(tok, messages, tools or None)  # special-token strings in benchmark text stay text

    def generate(batch, tools):
        new = decode(model, tok, [prompt(m, t) for m, t in zip(batch, tools)], max_tokens, temperature=temperature,
                     batch_size=batch_size, stops=stops, loop_stop=loop_stop)
        return [tok.decode(ids, skip_special_tokens=True) for ids in new]
    return generate


def client_generate(client, max_tokens, temperature=0.0, framing="qwen", keep_system=True, rules=TOUCAN_RULES):
    """A chat client (lib/frozen/llm.py) as generate(...) -> texts: tools and tool turns as Hermes text."""
    def generate(batch, tools):
        replies = client.complete([as_text(m, t, framing, keep_system, rules) for m, t in zip(batch, tools)],
                                  temperature, max_tokens)
        return [r or "" for r in replies]
    return generate


class Batched:
    """A batch generate(...) -> texts, shared by threads as fn(messages, tools) -> text.

    A call waits while a batch runs; the calls waiting then (up to `size`) go into the next
    batch together, so τ²'s concurrent tasks share one model call per round of turns."""

    def __init__(self, generate, size):
        self.generate, self.size = generate, size
        self.queue, self.lock, self.busy = [], threading.Lock(), threading.Lock()

    def __call__(self, messages, tools):
        job = Future()
        with self.lock:
            self.queue.append((messages, tools, job))
        while not job.done():
            with self.busy:  # one batch at a time; whoever holds it serves the head of the queue
                with self.lock:
                    batch, self.queue = self.queue[:self.size], self.queue[self.size:]
                if not batch:
                    continue
                try:
                    texts = self.generate([b[0] for b in batch], [b[1] for b in batch])
                    if len(texts) != len(batch):
                        raise ValueError(f"generate returned {len(texts)} texts for {len(batch)} prompts")
                except Exception as e:  # every waiting task sees the failure (scored 0 by tau2)
                    for *_, j in batch:
                        j.set_exception(e)
                    continue
                for (*_, j), text in zip(batch, texts):
                    j.set_result(text)
        return job.result()
