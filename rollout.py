"""Batched multi-turn rollouts with transformers `generate` (SPEC §6).

Each task's prompt goes through the tokenizer's chat template once (tools are added only when
the system message does not already hold a <tools> block). Then, turn by turn, every live
sequence of the batch is left-padded into one `generate` call that stops at `</tool_call>`
or at eos. A turn that opened a `<tool_call>` is answered by the simulator; the end of the
assistant turn, the tool turn with every observation and the next assistant header are
appended BY ID with response mask 0. Earlier turns are never decoded and re-encoded
(token-in, token-out), so the ids the policy is trained on are the ids it sampled.

Caps (SPEC §6): `max_turns` assistant turns (10), `max_tokens` response tokens in all,
observations included (8,192); a trajectory that would overflow stops before the
observation. Observation length (2,048 chars) is the simulator's cap. Each rollout records
why it stopped: "done" (a turn without a call), "turns" or "length". Training samples at
temperature 1 with no top-k/top-p; temperature 0 is greedy (evaluation).

    rs = rollout(model, tok, tasks, simulator)   # one Rollout per task: repeat tasks G times for a group
"""
from dataclasses import asdict, dataclass, field

import torch

from segment import OPEN, segment_masks, strip_think

MAX_TURNS = 10       # SPEC §6: assistant turns per trajectory
MAX_TOKENS = 8192    # SPEC §6: response tokens per trajectory, observations included


@dataclass
class Rollout:
    task: object
    group: int
    prompt: list                                   # prompt ids
    ids: list = field(default_factory=list)        # response ids: policy turns + masked tool turns
    mask: list = field(default_factory=list)       # response mask: 1 on the policy's own tokens
    turns: list = field(default_factory=list)      # per assistant turn: {"text", "calls", "observations"}
    stop: str = ""                                 # "done" | "turns" | "length"
    tool_mask: list = field(default_factory=list)     # segment masks over `ids` (segment.py)
    summary_mask: list = field(default_factory=list)

    @property
    def text(self):
        """The policy's own text over all turns (what HierR scores)."""
        return "".join(t["text"] for t in self.turns)

    @property
    def final(self):
        """The last turn's text when it holds no tool call, else "" (SPEC §2.2)."""
        last = self.turns[-1]["text"] if self.turns else ""
        return "" if OPEN in strip_think(last) else last

    @property
    def observations(self):
        return [o for t in self.turns for o in t["observations"]]

    @property
    def tool_turns(self):
        return sum(OPEN in strip_think(t["text"]) for t in self.turns)


def prompt_ids(tok, task):
    """Chat-template the task's prompt; tools only if the system message lacks them."""
    has_tools = any(m["role"] == "system" and "<tools>" in m["content"] for m in task.messages)
    text = tok.apply_chat_template(task.messages, tools=None if has_tools else (task.tools or None),
                                   tokenize=False, add_generation_prompt=True)
    return tok.encode(text, add_special_tokens=False)


def tool_turn_ids(tok, observations, ended_on_eos):
    """Ids that close the assistant turn, carry the observations and open the next turn.

    The tool turn comes from the chat template itself (rendered alone; the default system
    turn the template adds in front is cut off), so any Hermes-style template works.
    """
    msgs = [{"role": "tool", "content": o} for o in observations]
    text = tok.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)
    text = text[len(tok.apply_chat_template([{}], tokenize=False)):]
    close = "\n" if ended_on_eos else tok.eos_token + "\n"
    return tok.encode(close + text, add_special_tokens=False)


def stop_ids(tok, stop_at_call=True):
    """Token ids that end a turn: eos, pad and, with `stop_at_call`, </tool_call> (a single
    token in Qwen2.5). eval.py's BFCL and τ² replies pass False: one reply may hold several blocks."""
    ids = {tok.eos_token_id, tok.pad_token_id}
    if stop_at_call:
        ids.add(tok.convert_tokens_to_ids("</tool_call>"))
    if tok.unk_token_id is not None:
        ids.discard(tok.unk_token_id)
    return sorted(i for i in ids if i is not None)


@torch.no_grad()
def generate_turn(model, tok, seqs, budgets, temperature, batch_size, stop_at_call=True):
    """One assistant turn for each sequence: the new ids, cut at the first stop token."""
    stops, pad = stop_ids(tok, stop_at_call), tok.pad_token_id
    out = []
    for s in range(0, len(seqs), batch_size):
        chunk, budget = seqs[s:s + batch_size], budgets[s:s + batch_size]
        L = max(map(len, chunk))
        ids = torch.tensor([[pad] * (L - len(q)) + q for q in chunk], device=model.device)  # (b, L)
        attn = torch.tensor([[0] * (L - len(q)) + [1] * len(q) for q in chunk], device=model.device)
        sample = dict(do_sample=True, temperature=temperature, top_k=0, top_p=1.0) if temperature > 0 \
            else dict(do_sample=False)
        gen = model.generate(input_ids=ids, attention_mask=attn, max_new_tokens=max(budget),
                             eos_token_id=stops, pad_token_id=pad, repetition_penalty=1.0, **sample)
        for row, b in zip(gen[:, L:].tolist(), budget):  # (b, new)
            cut = next((i + 1 for i, t in enumerate(row) if t in stops), len(row))
            out.append(row[:min(cut, b)])
    return out


def rollout(model, tok, tasks, simulator, groups=None, temperature=1.0,
            max_turns=MAX_TURNS, max_tokens=MAX_TOKENS, batch_size=64):
    """Run every task to the end; returns one Rollout per task, in order."""
    groups = list(range(len(tasks))) if groups is None else groups
    rs = [Rollout(t, g, prompt_ids(tok, t)) for t, g in zip(tasks, groups)]
    stops = set(stop_ids(tok))
    live = list(range(len(rs)))
    for turn in range(max_turns):
        if not live:
            break
        new = generate_turn(model, tok, [rs[i].prompt + rs[i].ids for i in live],
                            [max_tokens - len(rs[i].ids) for i in live], temperature, batch_size)
        callers, texts = [], []
        for i, ids in zip(live, new):
            r = rs[i]
            r.ids += ids
            r.mask += [1] * len(ids)
            text = tok.decode(ids, skip_special_tokens=True)
            r.turns.append({"text": text, "calls": [], "observations": []})
            if OPEN not in strip_think(text):
                r.stop = "done" if ids and ids[-1] in stops else "length"
            elif len(r.ids) >= max_tokens:
                r.stop = "length"
            elif turn == max_turns - 1:  # the cap: this call is never answered
                r.stop = "turns"
            else:
                callers.append(i)
                texts.append(text)
        live = []
        answers = simulator.respond(texts, [rs[i].task for i in callers]) if callers else []
        for i, (calls, obs) in zip(callers, answers):
            r = rs[i]
            r.turns[-1]["calls"] = [asdict(c) for c in calls]
            glue = tool_turn_ids(tok, obs, r.ids[-1] == tok.eos_token_id)
            if len(r.ids) + len(glue) >= max_tokens:  # no room for the observation and a reply
                r.stop = "length"
            else:
                r.turns[-1]["observations"] = obs
                r.ids += glue
                r.mask += [0] * len(glue)
                live.append(i)
    for r in rs:
        m = torch.tensor([r.mask])                                      # (1, T)
        tool, summ, _, _ = segment_masks(m)
        r.tool_mask, r.summary_mask = tool[0].tolist(), summ[0].tolist()
    return rs


def collate(rs, pad_id):
    """Right-padded training tensors over prompt + response, each (B, L): ids, attention, and
    the response, tool and summary masks (0 on the prompt)."""
    L = max(len(r.prompt) + len(r.ids) for r in rs)

    def pad(x, fill=0):
        return x + [fill] * (L - len(x))

    def resp(r, m):
        return torch.tensor(pad([0] * len(r.prompt) + m))

    return {"input_ids": torch.tensor([pad(r.prompt + r.ids, pad_id) for r in rs]),        # (B, L)
            "attention_mask": torch.tensor([pad([1] * (len(r.prompt) + len(r.ids))) for r in rs]),
            "response_mask": torch.stack([resp(r, r.mask) for r in rs]),
            "tool_mask": torch.stack([resp(r, r.tool_mask) for r in rs]),
            "summary_mask": torch.stack([resp(r, r.summary_mask) for r in rs])}
