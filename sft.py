"""SFT warm start (SPEC §7, stage 1) and the guarded optimizer step that SFT and RL share.

    warm_start(model, tok, convs, a, log)   # called by train.py before RL

Cross-entropy on assistant tokens only (`example` builds each conversation's ids and loss
mask from the chat template, with message content encoded as plain text), token-mean over
the optimizer step's batch, AdamW, cosine lr with linear warmup. Under torchrun each rank
takes its share of every batch and the normaliser is summed over ranks, so the update equals
the single-process one. `optimizer_step` clips the gradient and skips (and counts) an update
whose loss or gradient norm is non-finite; --max-bad-updates in a row stop the run.

    python -m pytest -q tests/test_train.py -k sft
"""
import math
import random

import torch
import torch.distributed as dist
from tqdm import tqdm

from logprobs import token_logprobs
from parallel import all_sum, world


def example(tok, messages, max_len):
    """(ids, mask) of one conversation; mask is 1 on assistant content and its eos.

    Message content is data: special-token strings inside it (a forged `<|im_start|>`) are
    encoded as plain text; only the chat template's own markers become special ids."""
    text = tok.apply_chat_template(messages, tokenize=False)
    spans, content, cursor = [], [], 0
    for i, m in enumerate(messages):
        if m["role"] == "assistant":
            start = len(tok.apply_chat_template(messages[:i], tokenize=False, add_generation_prompt=True))
            end = start + len(m["content"]) + len(tok.eos_token)
            if text[start:end] != m["content"] + tok.eos_token:
                raise ValueError("the chat template does not render assistant turns as a prefix-stable "
                                 "'<header>content<eos>'; SFT masking needs that")
            spans.append((start, end))
        at = text.find(m["content"], cursor) if m["content"] else -1
        if at >= 0:
            content.append((at, at + len(m["content"])))
            cursor = at + len(m["content"])
    ids, mask, pos = [], [], 0
    for s, e in content + [(len(text), len(text))]:  # template glue as is, content as plain text
        for lo, hi, plain in ((pos, s, False), (s, e, True)):
            if hi > lo:
                enc = tok(text[lo:hi], add_special_tokens=False, return_offsets_mapping=True, split_special_tokens=plain)
                ids += enc["input_ids"]
                mask += [int(any(a <= lo + x and lo + y <= b for a, b in spans)) for x, y in enc["offset_mapping"]]
        pos = e
    return ids[:max_len], mask[:max_len]


def warm_start(model, tok, convs, a, log):
    """Warm start: token-mean cross-entropy on assistant tokens, AdamW, cosine lr with warmup."""
    data = [example(tok, c, a.sft_max_len) for c in tqdm(convs, desc="sft tokenize", leave=False)]
    steps = a.sft_epochs * math.ceil(len(data) / a.sft_batch)
    warm = max(1, int(a.sft_warmup * steps))
    opt = torch.optim.AdamW(model.parameters(), lr=a.sft_lr, weight_decay=a.sft_weight_decay)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: (s + 1) / warm if s < warm else 0.5 * (1 + math.cos(math.pi * (s - warm) / max(1, steps - warm))))
    rng = random.Random(a.seed)
    rank = dist.get_rank() if dist.is_initialized() else 0
    model.train()
    bar = tqdm(total=steps, desc="sft", disable=rank > 0)
    bad = 0
    for epoch in range(a.sft_epochs):
        order = list(range(len(data)))
        rng.shuffle(order)
        for s in range(0, len(order), a.sft_batch):
            rows = [data[i] for i in order[s:s + a.sft_batch]]
            n = all_sum(float(sum(sum(m) for _, m in rows)))  # tokens of the whole batch
            rows = rows[rank::world()]                         # this rank's share
            total = 0.0
            for m0 in range(0, len(rows), a.micro_batch):
                part = rows[m0:m0 + a.micro_batch]
                L = max(len(x) for x, _ in part)
                ids = torch.tensor([x + [tok.pad_token_id] * (L - len(x)) for x, _ in part], device=a.device)
                attn = torch.tensor([[1] * len(x) + [0] * (L - len(x)) for x, _ in part], device=a.device)
                mask = torch.tensor([m + [0] * (L - len(m)) for _, m in part], device=a.device)  # (b, L)
                loss = -token_logprobs(model, ids, attn, mask).sum() / max(n, 1)  # token-mean over the step
                (loss * world()).backward()  # FSDP averages gradients over ranks
                total += loss.item()
            bad, _, _ = optimizer_step(model, opt, all_sum(total), a, bad)
            sched.step()
            bar.update()
            bar.set_postfix(loss=f"{total:.3f}")
            log({"stage": "sft", "epoch": epoch, "loss": total, "lr": sched.get_last_lr()[0]})
    bar.close()


def optimizer_step(model, opt, loss, a, bad):
    """Clip and step, unless the loss or the gradient norm is non-finite: then the update is
    skipped. Returns (non-finite updates in a row, grad norm, stepped); stops the run at
    --max-bad-updates."""
    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), a.grad_clip)
    norm = float(norm.full_tensor() if hasattr(norm, "full_tensor") else norm)
    stepped = math.isfinite(loss) and math.isfinite(norm)
    if stepped:
        opt.step()
        bad = 0
    else:
        bad += 1
        if bad >= a.max_bad_updates:
            raise SystemExit(f"stopping: {bad} non-finite updates in a row (loss {loss}, grad norm {norm}); "
                             "the weights were not changed by any of them")
    opt.zero_grad(set_to_none=True)
    return bad, norm, stepped
