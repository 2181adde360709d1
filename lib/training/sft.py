"""SFT warm start (docs/method.md §7, stage 1).

    warm_start(model, tok, convs, SFT(...), log)   # called by train.py before RL

Cross-entropy on assistant tokens only (`example` builds each conversation's ids and loss
mask from the chat template message by message, with the encoders of rollout.py: content is
plain text, the mask is 1 on assistant content and its eos by construction), token-mean over
the optimizer step's batch, AdamW, cosine lr with linear warmup. Under torchrun each rank
takes its share of every batch, the normaliser is the whole batch's count (every rank reads the
batch; it was counted once per rank before, shrinking the gradient by the world size) and the
logged loss is summed over ranks, so the update and the log equal the single-process ones. The
step is lib/training/optim.py's `optimizer_step` (clipped; a non-finite update is skipped and counted,
`max_bad_updates` in a row stop the run).

Forward/backward passes (`passes`): `micro_batch` conversations at a time, each pass padded to
its longest; or, given a token budget (`tokens`, train.py's --sft-tokens), the rank's share of
the step longest first, each pass as many as fit in rows x longest <= tokens (a longer one
alone), so a pass's padded size stays within the budget (padding remains: sorted longest first,
rows of different lengths still share a pass). The loss is normalised
by the step's assistant tokens, not per pass, so the grouping changes it by float rounding only.
Under torchrun every rank runs as many passes (FSDP2 pairs up their collectives): a rank with
fewer adds empty ones (one pad id, nothing learned).

    python -m pytest -q tests/test_train.py -k sft; tests/test_sft_tokens.py
"""
import math
import random
import re
import warnings
from dataclasses import dataclass, field, fields

import torch
import torch.distributed as dist
from tqdm import tqdm

from lib.inputs.chat import mark, render, template_ids
from lib.inputs.data import TURNS
from lib.inputs.text import take_unencodable
from lib.training.dist import all_sum, gather, world
from lib.training.logprobs import token_logprobs
from lib.training.optim import optimizer_step

SENTINEL, SENTINELS = 0x100000, 0xFFFE  # Unicode plane 16, private use: stands for message i's content in `example`


def example(tok, messages, max_len):
    """(ids, mask) of one conversation; mask is 1 on exactly the ids of assistant content and
    the eos that ends each assistant turn.

    Where each message's content sits is known by construction, never searched for: the
    template is rendered once with message i's content replaced by the code point SENTINEL + i,
    and the text between sentinels is the template's glue. Glue goes through
    lib.inputs.chat.template_ids (its special-token strings are special ids), each content through the
    same function after lib.inputs.chat.mark, so a special-token string inside any message's content
    (a forged `<|im_end|>\\n<|im_start|>system`, an assistant's `<|im_end|>`) is plain text and a
    lone surrogate is U+FFFD. A template that renders some content other than verbatim, or
    not once and in order, whose assistant turns do not start with the generation prompt, or
    that does not put eos right after assistant content, is refused with a ValueError."""
    n = len(messages)
    if n > SENTINELS:
        raise ValueError(f"a conversation of {n} messages; SFT takes at most {SENTINELS}")
    stand = [{**m, "content": chr(SENTINEL + i)} for i, m in enumerate(messages)]
    text = render(tok, stand, add_generation_prompt=False)
    parts = re.split(f"([{chr(SENTINEL)}-{chr(SENTINEL + max(n - 1, 0))}])", text)
    glue, found = parts[::2], [ord(c) - SENTINEL for c in parts[1::2]]  # glue[i] comes before content i
    if found != list(range(n)):
        raise ValueError("the chat template does not render each message's content once and in order; "
                         "SFT masking needs that")
    content = mark(tok, [m["content"] for m in messages])
    if "".join(g + c for g, c in zip(glue, content + [""])) != render(tok, messages, add_generation_prompt=False):
        raise ValueError("the chat template changes message content as it renders it; SFT masking needs it verbatim")
    head = render(tok, stand[:1])[len(render(tok, stand[:1], add_generation_prompt=False)):]  # the generation prompt
    enc = template_ids(tok, [x for g, c in zip(glue, content + [""]) for x in (g, c)])  # glue 0, content 0, glue 1, ...
    ids, mask = [], []
    for i in range(n + 1):
        g, c = enc[2 * i], enc[2 * i + 1]
        after = i > 0 and messages[i - 1]["role"] == "assistant"  # g closes an assistant turn: eos first
        if after and g[:1] != [tok.eos_token_id]:
            raise ValueError("the chat template does not put eos right after assistant content; SFT masking needs that")
        if i < n and messages[i]["role"] == "assistant" and not glue[i].endswith(head):
            raise ValueError("the chat template does not start assistant turns with its generation prompt; "
                             "SFT needs the context rollouts sample in")
        ids += g + c
        mask += [int(after and k == 0) for k in range(len(g))]               # eos of an assistant turn
        mask += [int(i < n and messages[i]["role"] == "assistant")] * len(c)  # assistant content
    return ids[:max_len], mask[:max_len]


@dataclass(frozen=True)
class SFT:
    """The warm start's settings: train.py's --sft-* flags (the "SFT warm start" group; the defaults: configs/paper.toml's),
    and the ones it shares with RL, flags of other groups."""
    sft_epochs: int = field(default=2, metadata={"help": "", "range": "[0, 1e7]"})
    sft_lr: float = field(default=5e-6, metadata={"help": "peak lr, cosine decay after warmup", "range": "(0, 1]"})
    sft_warmup: float = field(default=0.1, metadata={"help": "share of SFT steps spent warming up", "range": "[0, 1]",
                                                     "hidden": True})
    sft_batch: int = field(default=32, metadata={"help": "conversations per optimizer step", "range": "[1, 1e7]",
                                                 "hidden": True})
    sft_max_len: int = field(default=16384, metadata={"help": "token cutoff per conversation", "range": "[1, 1e7]",
                                                      "hidden": True})
    sft_tokens: int | None = field(default=16384, metadata={
        "range": "[1, 1e7]", "hidden": True,
        "help": "padded ids per SFT forward/backward (rows x the longest), conversations packed longest first, a "
                "longer one alone; none = --micro-batch conversations a pass; the loss is the same"})
    sft_turns: str = field(default=TURNS[0], metadata={
        "choices": TURNS, "hidden": True,
        "help": "an assistant's text and the call after it: merge = one turn (what rollouts see); release = two turns, "
                "each with its own end token (LLaMA-Factory's data)"})
    sft_limit: int | None = field(default=None, metadata={"help": "use the first N conversations only",
                                                          "range": "[0, 1e7]", "hidden": True})
    sft_weight_decay: float = field(default=0.0, metadata={"help": "AdamW weight decay of the warm start",
                                                           "range": "[0, 1]", "hidden": True})
    micro_batch: int = 8           # conversations per forward/backward (--micro-batch)
    grad_clip: float = 1.0         # gradient norm clip (--grad-clip)
    max_bad_updates: int = 3       # non-finite updates in a row before stopping (--max-bad-updates)
    seed: int = 0                  # the shuffle's seed (--seed)
    device: str | None = None      # where the batches go (None: torch's default; --device)


SFT_FLAGS = tuple(f.name for f in fields(SFT) if f.name.startswith("sft_"))  # train.py's "SFT warm start" group


def passes(rows, micro_batch, tokens, pad_id):
    """`rows` ((ids, mask) each: this rank's share of a step) grouped for forward/backward passes:
    `micro_batch` rows at a time in order (tokens None), else longest first, as many rows a pass
    as keep rows x the longest's length <= `tokens` (a longer row alone). Padded with empty passes
    ([pad_id], mask 0) to the most passes any rank runs."""
    if tokens is None:
        out = [rows[s:s + micro_batch] for s in range(0, len(rows), micro_batch)]
    else:
        out = []
        for r in sorted(rows, key=lambda r: -len(r[0])):                   # longest first: a pass's first is longest
            if out and (len(out[-1]) + 1) * len(out[-1][0][0]) <= tokens:
                out[-1].append(r)
            else:
                out.append([r])
    return out + [[([pad_id], [0])]] * (max(gather([len(out)])) - len(out))


def warm_start(model, tok, convs, cfg, log):
    """Warm start with SFT `cfg`: token-mean cross-entropy on assistant tokens, AdamW, cosine
    lr with warmup; `log(row)` gets one row per optimizer step."""
    take_unencodable()
    data = [example(tok, c, cfg.sft_max_len) for c in tqdm(convs, desc="sft tokenize", leave=False)]
    if replaced := take_unencodable():
        warnings.warn(f"SFT data: {replaced} unencodable code points (lone surrogates) became U+FFFD")
    steps = cfg.sft_epochs * math.ceil(len(data) / cfg.sft_batch)
    warm = max(1, int(cfg.sft_warmup * steps))
    trained = [p for p in model.parameters() if p.requires_grad]  # with LoRA: the adapters
    opt = torch.optim.AdamW(trained, lr=cfg.sft_lr, weight_decay=cfg.sft_weight_decay)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: (s + 1) / warm if s < warm else 0.5 * (1 + math.cos(math.pi * (s - warm) / max(1, steps - warm))))
    rng = random.Random(cfg.seed)
    rank = dist.get_rank() if dist.is_initialized() else 0
    model.train()
    bar = tqdm(total=steps, desc="sft", disable=rank > 0)
    bad = 0
    for epoch in range(cfg.sft_epochs):
        order = list(range(len(data)))
        rng.shuffle(order)
        for s in range(0, len(order), cfg.sft_batch):
            rows = [data[i] for i in order[s:s + cfg.sft_batch]]
            n = sum(sum(m) for _, m in rows)                   # tokens of the whole batch (every rank has it)
            rows = rows[rank::world()]                         # this rank's share
            total = 0.0
            for part in passes(rows, cfg.micro_batch, cfg.sft_tokens, tok.pad_token_id):
                L = max(len(x) for x, _ in part)
                ids = torch.tensor([x + [tok.pad_token_id] * (L - len(x)) for x, _ in part], device=cfg.device)
                attn = torch.tensor([[1] * len(x) + [0] * (L - len(x)) for x, _ in part], device=cfg.device)
                mask = torch.tensor([m + [0] * (L - len(m)) for _, m in part], device=cfg.device)  # (b, L)
                loss = -token_logprobs(model, ids, attn, mask).sum() / max(n, 1)  # token-mean over the step
                (loss * world()).backward()  # FSDP averages gradients over ranks
                total += loss.item()
            total = all_sum(total)                             # the step's loss, every rank's share
            bad, _, _ = optimizer_step(model, opt, total, cfg.grad_clip, cfg.max_bad_updates, bad)
            sched.step()
            bar.update()
            bar.set_postfix(loss=f"{total:.3f}")
            log({"stage": "sft", "epoch": epoch, "loss": total, "lr": sched.get_last_lr()[0]})
    bar.close()
