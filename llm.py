"""The frozen LLMs of SLCA-GRPO: chat clients, and the judge role (SPEC §2.2, §5, §7).

Two roles need a frozen LLM: the SGLS tool simulator (simulator.py, the paper's
Qwen3-235B-A22B) and the summary judge (the paper's GPT-OSS-120B), both served by vLLM. A
client is any object with

    complete(batch, temperature, max_tokens) -> list[str | None]

where `batch` is a list of chat-message lists; item i of the result answers batch[i], and
None means "no answer" (the caller turns it into an error observation or a 0 score).

- `HFClient`: an in-process transformers causal LM (one batched `generate`, left padding).
- `HTTPClient`: an OpenAI-compatible `/v1/chat/completions` server (vLLM, …), stdlib only:
  the requests of a batch run on up to `workers` threads; timeouts, retries with exponential
  backoff on connection errors, timeouts, 429/5xx and malformed bodies; never raises.
- `add_client_flags` / `client_from_args`: `--sim-url/--sim-model/--sim-key` and
  `--judge-url/--judge-model/--judge-key`, with env fallbacks SLCA_SIM_URL, SLCA_SIM_MODEL,
  SLCA_SIM_KEY (SLCA_JUDGE_* likewise; the key then falls back to OPENAI_API_KEY).
  A URL gives an HTTPClient, else a model name or local path an HFClient, else None (offline).
- `LLMJudge`: the judge interface of rewards.py (`rate(question, tool_responses, response,
  facts) -> int | None`) on top of any client, greedy, answer form `Rating: [[<level>]]`.

Simplified: no streaming, no token-level logprobs, no prompt caching; a judge answer that
cannot be parsed is asked again (`retries`) and then scores 0, as in SPEC §2.2.

Point both roles at vLLM servers:

    python train.py --sim-url http://host:8000/v1 --judge-url http://host:8001/v1

Tests (a local HTTP server and a tiny local model): python -m pytest tests/test_llm.py -q
"""
import json
import logging
import os
import re
import threading
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from http.client import HTTPException

import torch

log = logging.getLogger(__name__)


def load_policy(name, dtype="float32", device="cpu", grad_ckpt=False):
    """A causal LM and its tokenizer from a hub name or local folder."""
    from transformers import AutoModelForCausalLM, AutoTokenizer
    tok = AutoTokenizer.from_pretrained(name)
    model = AutoModelForCausalLM.from_pretrained(name, dtype=getattr(torch, dtype)).to(device)
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    if grad_ckpt:
        model.activation_checkpointing_enable()
        model.config.use_cache = False
    return model, tok


class HFClient:
    """An in-process chat model. `model` is a hub name, a local path, or a (model, tokenizer) pair."""

    def __init__(self, model, dtype=None, device=None):
        if isinstance(model, str):
            from transformers import AutoModelForCausalLM, AutoTokenizer
            self.tokenizer = AutoTokenizer.from_pretrained(model)
            model = AutoModelForCausalLM.from_pretrained(model, dtype=dtype or "auto")
        else:
            model, self.tokenizer = model
        if self.tokenizer.pad_token is None:  # left padding needs one; some chat models ship none
            self.tokenizer.pad_token = self.tokenizer.eos_token
        device = device or ("cuda" if torch.cuda.is_available() else "cpu")
        self.model = model.to(device).eval()

    @torch.no_grad()
    def complete(self, batch, temperature, max_tokens):
        tok = self.tokenizer
        texts = [tok.apply_chat_template(m, add_generation_prompt=True, tokenize=False) for m in batch]
        enc = tok(texts, padding=True, padding_side="left", return_tensors="pt",
                  add_special_tokens=False).to(self.model.device)
        sampling = dict(do_sample=True, temperature=temperature) if temperature > 0 else dict(do_sample=False)
        out = self.model.generate(**enc, max_new_tokens=max_tokens, pad_token_id=tok.pad_token_id, **sampling)
        new = out[:, enc["input_ids"].shape[1]:]                       # (N, new tokens), prompt dropped
        return tok.batch_decode(new, skip_special_tokens=True)


class HTTPClient:
    """An OpenAI-compatible chat server. `base_url` with or without the trailing `/v1`.

    Each request is tried 1 + `retries` times, sleeping backoff·2^k after failure k, on
    connection errors, timeouts (`timeout` seconds per socket operation), HTTP 429 and 5xx,
    and bodies without a string `choices[0].message.content`; other 4xx are not retried.
    If `model` is None it is discovered once, on the first batch, with GET /v1/models (first
    id); if that fails, requests go without a model field (vLLM then serves its only model).
    The key defaults to $OPENAI_API_KEY, then "EMPTY" (vLLM ignores it). `workers` = 20: the
    released code runs up to 20 calls of a turn at once (SPEC §5).
    """

    def __init__(self, base_url, model=None, api_key=None, timeout=60.0, retries=3, backoff=1.0, workers=20):
        base_url = base_url.rstrip("/")
        self.base_url = base_url if base_url.endswith("/v1") else base_url + "/v1"
        self.model, self._discover = model, model is None
        self.api_key = api_key or os.environ.get("OPENAI_API_KEY") or "EMPTY"
        self.timeout, self.retries, self.backoff, self.workers = timeout, retries, backoff, workers
        self._lock = threading.Lock()

    def complete(self, batch, temperature, max_tokens):
        if not batch:
            return []
        with self._lock:
            if self._discover:
                model = self._request("/models", None, lambda b: b["data"][0]["id"])
                self.model, self._discover = model if isinstance(model, str) else None, False
        payload = {"temperature": temperature, "max_tokens": max_tokens}
        if self.model is not None:
            payload["model"] = self.model

        def one(messages):
            return self._request("/chat/completions", {**payload, "messages": messages}, _content)

        with ThreadPoolExecutor(min(self.workers, len(batch))) as pool:
            return list(pool.map(one, batch))

    def _request(self, path, payload, parse):
        """GET (payload None) or POST one request; parse(body) its JSON. Returns None on failure."""
        data = None if payload is None else json.dumps(payload).encode()
        headers = {"Content-Type": "application/json", "Authorization": f"Bearer {self.api_key}"}
        reason = ""
        for attempt in range(1 + self.retries):
            if attempt:
                time.sleep(self.backoff * 2 ** (attempt - 1))
            req = urllib.request.Request(self.base_url + path, data=data, headers=headers)
            try:
                with urllib.request.urlopen(req, timeout=self.timeout) as resp:
                    return parse(json.loads(resp.read()))
            except urllib.error.HTTPError as e:
                reason = f"HTTP {e.code}"
                if e.code != 429 and e.code < 500:
                    break
            except (OSError, HTTPException) as e:              # connection errors and timeouts
                reason = f"{type(e).__name__}: {e}"
            except (ValueError, KeyError, IndexError, TypeError) as e:  # malformed body
                reason = f"malformed body: {type(e).__name__}: {e}"
        log.warning("%s%s failed after %d tries: %s", self.base_url, path, attempt + 1, reason)
        return None


def _content(body):
    content = body["choices"][0]["message"]["content"]
    if not isinstance(content, str):
        raise TypeError(f"content is {type(content).__name__}")
    return content


def add_client_flags(parser, role):
    """Add --{role}-url, --{role}-model, --{role}-key (role is "sim" or "judge")."""
    env = f"SLCA_{role.upper()}"
    parser.add_argument(f"--{role}-url", help=f"OpenAI-compatible server, e.g. http://host:8000/v1 (env {env}_URL)")
    parser.add_argument(f"--{role}-model", help=f"served model name with a URL, else a hub name or local "
                                                f"path to load in-process (env {env}_MODEL)")
    parser.add_argument(f"--{role}-key", help=f"API key (env {env}_KEY, then OPENAI_API_KEY)")


def client_from_args(args, role):
    """HTTPClient if a URL is set, else HFClient if a model is set, else None (offline)."""
    def get(field):
        return getattr(args, f"{role}_{field}", None) or os.environ.get(f"SLCA_{role.upper()}_{field.upper()}")

    url, model = get("url"), get("model")
    if url:
        return HTTPClient(url, model=model, api_key=get("key"))
    return HFClient(model) if model else None


LEVELS = {"very poor": 1, "poor": 2, "acceptable": 3, "good": 4, "excellent": 5}  # SPEC §2.2, r = 1..5
RATING_RE = re.compile(r"\[\[\s*([^\[\]]+?)\s*\]\]")
JUDGE_PROMPT = """You are grading the final answer of an assistant that used tools to help a user.

The user asked:
{question}

The tools returned these results (in order):
{responses}

The assistant's final answer:
{response}

Judge the final answer on three criteria: does it interpret the tool results correctly (no
invented or contradicted facts), is it complete (does it answer everything the user asked that
the results allow), and is it clear. Pick exactly one level:
very poor, poor, acceptable, good, excellent.

You may reason briefly first. Then end with one line of exactly this form, the level written
in words inside double square brackets:
Rating: [[<level>]]"""


def parse_rating(text):
    """The last `[[level]]` of a judge reply -> 1..5 (a digit 1-5 also counts), else None."""
    found = RATING_RE.findall(text or "")
    if not found:
        return None
    level = " ".join(found[-1].lower().split())
    return LEVELS.get(level) or (int(level) if level in ("1", "2", "3", "4", "5") else None)


class LLMJudge:
    """The summary judge of SPEC §2.2 on any client; greedy; an unparsable answer is asked again."""

    def __init__(self, client, retries=2, max_tokens=1024):  # room for a short reasoning before the rating
        self.client, self.retries, self.max_tokens = client, retries, max_tokens

    def rate(self, question, tool_responses, response, facts=None):
        return self.rate_batch([(question, tool_responses, response)])[0]

    def rate_batch(self, items):
        """items: (question, tool_responses, response[, facts]) tuples -> list of 1..5 or None."""
        prompts = [[{"role": "user", "content": JUDGE_PROMPT.format(
            question=q, response=r,
            responses="\n".join(f"[{i}] {t}" for i, t in enumerate(tr, 1)) or "(none)")}]
            for q, tr, r, *_ in items]
        ratings = [None] * len(items)
        todo = list(range(len(items)))
        for _ in range(1 + self.retries):
            if not todo:
                break
            replies = self.client.complete([prompts[i] for i in todo], 0.0, self.max_tokens)
            for i, reply in zip(todo, replies):
                ratings[i] = parse_rating(reply)
            todo = [i for i in todo if ratings[i] is None]
        return ratings
