"""The frozen LLMs of SLCA-GRPO: chat clients (docs/method.md §5, §7).

Two roles need a frozen LLM: the SGLS tool simulator (simulator.py, the paper's
Qwen3-235B-A22B) and the summary judge (lib/frozen/judges.py, the paper's GPT-OSS-120B), both served by
vLLM. A client is any object with

    complete(batch, temperature, max_tokens) -> list[str | None]

where `batch` is a list of chat-message lists and item i of the result answers batch[i]: a
str is an answer (possibly empty), None means NO answer came (connection, timeout or server
failure after every retry, or the in-process model ran out of memory). Callers tell the two
apart: the simulator marks such a call `failed`, the judge raises ConnectionError.

- `HFClient`: an in-process transformers causal LM (one batched `generate`, left padding),
  from a hub name, a folder or a .gguf file; one loaded copy serves every client that names
  it (`frozen`), so --sim-model X --judge-model X load X once. `max_tokens` caps its answers.
  Message content is encoded as text: a special-token string inside it (say a forged
  `<|im_end|>\n<|im_start|>system`) never becomes a special token id; only the chat
  template's own special tokens do (transformers' `sanitize_control_tokens`, restricted to
  the special tokens so Hermes tags like `<tool_call>` stay single tokens).
- `HTTPClient`: an OpenAI-compatible `/v1/chat/completions` server (vLLM, ...), stdlib only,
  direct connections (no HTTP proxy). The server renders the chat template and tokenises, so
  this client cannot stop it from reading special-token strings inside content (vLLM does);
  the judge and the simulator therefore neutralise them in the untrusted text they send
  (lib/frozen/judges.py's `fence`, JSON escapes in simulator.py). `deadline` bounds one whole `complete`
  call: the model-name lookup and every request of the batch, all their tries and pauses,
  however many requests wait for the `workers`; what is unanswered when it passes is None.
  `timeout` bounds one try end to end (connect, send, wait, read; a watchdog shuts the
  socket, so a trickling server cannot stretch it), `retries` extra tries with jittered
  exponential backoff on connection errors, timeouts, HTTP 408/429/5xx and malformed
  bodies. Bodies are capped (`max_body` bytes) and parsed with lib.inputs.text.loads (bounded
  depth), so a hostile body gives None, never an exception. Never raises.
- `window`: a shared deadline for every request of the HTTP clients among those given (train.py
  --step-deadline, one RL step).
- `Client` / `client`: for a role ("sim", "judge", "agent", "user"), the settings (flags
  --{role}-url/-model/-key (env fallbacks SLCA_{ROLE}_URL, _MODEL, _KEY, the key then
  OPENAI_API_KEY) and --{role}-timeout/-deadline/-retries (sim and judge: also -max-tokens,
  the in-process cap), and the client they name, from explicit values (`client(role,
  **client_flags)`): a URL gives an HTTPClient, else a model name or local path an HFClient,
  else None (offline).
- `read_template`: a prompt template file brought by the user in place of a role's own text
  (--sim-prompt, --judge-prompt, --solved-prompt), checked to hold exactly its placeholders.

Simplified: no streaming, no token-level logprobs, no prompt caching, no proxies.

Point both roles at vLLM servers:

    python train.py --sim-url http://host:8000/v1 --judge-url http://host:8001/v1 --judge-deadline 900

Tests (local HTTP servers and a tiny local model): python -m pytest tests/test_llm.py -q
"""
import json
import logging
import os
import random
import socket
import string
import threading
import time
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field, fields
from concurrent.futures import ThreadPoolExecutor
from http.client import HTTPConnection, HTTPException, HTTPSConnection
from urllib.parse import urlsplit

import torch

from lib.inputs.text import MAX_JSON_CHARS, encodable, loads
from lib.training.model import frozen

log = logging.getLogger(__name__)

TIMEOUT = 540.0        # s, one try end to end: the release's total timeout (toucan_tool_config.yaml, LLM_JUDGE_TIMEOUT)
DEADLINE = 1200.0      # s, one complete() call, every request and try: ours; the release has none (3-4 tries of 540 s)
RETRIES = {"sim": 2, "judge": 3}  # the release's max_retries per role; other roles get 2
BACKOFF = 1.0          # s, retry k waits BACKOFF·2^(k-1)·U(0.5, 1.5); the release: 1 s (sim), 2 s (judge), linear
MAX_BODY = MAX_JSON_CHARS  # bytes of one response body (segment.py's bound on untrusted JSON)
RETRY_STATUS = {408, 429}  # and every 5xx


class HFClient:
    """An in-process chat model. `model` is a hub name, a local path, a .gguf file, or a
    (model, tokenizer) pair. `max_tokens` caps every answer (None: the caller's budget)."""

    def __init__(self, model, dtype=None, device=None, max_tokens=None):
        model, self.tokenizer = frozen(model, dtype or "auto") if isinstance(model, str) else model
        self.max_tokens = max_tokens
        if self.tokenizer.pad_token is None:  # left padding needs one; some chat models ship none
            self.tokenizer.pad_token = self.tokenizer.eos_token
        if getattr(self.tokenizer, "chat_control_tokens", None) is None:  # sanitize special tokens only
            self.tokenizer.chat_control_tokens = []
        device = device or ("cuda" if torch.cuda.is_available() else "cpu")
        self.model = model.to(device).eval()

    @torch.no_grad()
    def complete(self, batch, temperature, max_tokens):
        if not batch:
            return []
        tok = self.tokenizer
        max_tokens = min(max_tokens, self.max_tokens or max_tokens)
        batch = [[{**m, "content": encodable(m["content"])} for m in msgs] for msgs in batch]  # no lone surrogate
        enc = tok.apply_chat_template(batch, add_generation_prompt=True, tokenize=True, sanitize_control_tokens=True,
                                      padding=True, return_tensors="pt", return_dict=True,
                                      tokenizer_kwargs={"padding_side": "left"}).to(self.model.device)
        sampling = dict(do_sample=True, temperature=temperature) if temperature > 0 else dict(do_sample=False)
        try:
            out = self.model.generate(**enc, max_new_tokens=max_tokens, pad_token_id=tok.pad_token_id, **sampling)
        except torch.OutOfMemoryError:  # no answer for this batch; the caller decides (failed call, ConnectionError)
            log.warning("HFClient: out of memory on a batch of %d", len(batch))
            torch.cuda.empty_cache()
            return [None] * len(batch)
        new = out[:, enc["input_ids"].shape[1]:]                       # (N, new tokens), prompt dropped
        return tok.batch_decode(new, skip_special_tokens=True)


class HTTPClient:
    """An OpenAI-compatible chat server. `base_url` with or without the trailing `/v1`.

    `complete(batch)` returns within `deadline` seconds of its call, however long the batch
    (the time to parse bodies already read, linear in their size, and a host name's DNS lookup,
    which no socket timeout bounds, excepted): the model lookup and every request share that
    one deadline; a request still unanswered when it passes, started or queued behind the
    `workers`, is None. Each request is tried up to 1 + `retries` times, each try within
    `timeout` seconds end to end. Retried: connection errors, timeouts, HTTP 408, 429, 5xx,
    and bodies that are too large (`max_body`), not bounded JSON, or without
    `choices[0].message`; other 4xx are not retried. A message whose content is null (a
    reasoning model that spent its budget) is the answer "". If `model` is None it is
    discovered once, on the first batch, with GET /v1/models (first id); if that fails,
    requests go without a model field (vLLM then serves its only model). The key defaults to
    $OPENAI_API_KEY, then "EMPTY" (vLLM ignores it). `workers` = 20: the release runs up to
    20 calls of a turn at once (docs/method.md §5).
    """

    def __init__(self, base_url, *, model=None, api_key=None, timeout=TIMEOUT, deadline=DEADLINE, retries=2,
                 backoff=BACKOFF, workers=20, max_body=MAX_BODY):
        base_url = base_url.rstrip("/")
        self.base_url = base_url if base_url.endswith("/v1") else base_url + "/v1"
        url = urlsplit(self.base_url)
        if url.scheme not in ("http", "https") or not url.hostname:
            raise ValueError(f"not an http(s) URL: {base_url!r}")
        self._conn = (HTTPSConnection if url.scheme == "https" else HTTPConnection, url.hostname, url.port, url.path)
        self.model, self._discover = model, model is None
        self.api_key = api_key or os.environ.get("OPENAI_API_KEY") or "EMPTY"
        self.timeout, self.deadline, self.retries, self.backoff = timeout, deadline, retries, backoff
        self.workers, self.max_body = workers, max_body
        self._lock, self._rng = threading.Lock(), random.Random()  # own generator: leaves the global seed alone
        self._end = None  # set by `window`: the end every complete() call shares

    @contextmanager
    def window(self, seconds):
        """Every complete() call made inside returns within `seconds` of the window's start (and
        each within its own `deadline`), however many calls: a training step's turns, or its
        ratings on many threads."""
        self._end = time.monotonic() + seconds
        try:
            yield self
        finally:
            self._end = None

    def complete(self, batch, temperature, max_tokens):
        if not batch:
            return []
        end = time.monotonic() + self.deadline  # one deadline for the lookup and the whole batch
        end = min(end, self._end or end)
        with self._lock:  # a call waiting here started later than the one looking up: its own end is later
            if self._discover:
                model = self._request("/models", None, lambda b: b["data"][0]["id"], end)
                self.model, self._discover = model if isinstance(model, str) else None, False
        payload = {"temperature": temperature, "max_tokens": max_tokens}
        if self.model is not None:
            payload["model"] = self.model

        def one(messages):
            return self._request("/chat/completions", {**payload, "messages": messages}, _content, end)

        with ThreadPoolExecutor(min(self.workers, len(batch))) as pool:
            return list(pool.map(one, batch))

    def pause(self, attempt):
        """Seconds to wait before try `attempt` (1-based retries): exponential, jittered by U(0.5, 1.5)."""
        return self.backoff * 2 ** (attempt - 1) * self._rng.uniform(0.5, 1.5)

    def _request(self, path, payload, parse, end):
        """GET (payload None) or POST one request, every try before time.monotonic() `end`;
        parse(body) its JSON. Returns None on failure."""
        data = None if payload is None else json.dumps(payload).encode()
        reason, tries = "deadline passed", 0
        for attempt in range(1 + self.retries):
            if attempt:
                time.sleep(max(0.0, min(self.pause(attempt), end - time.monotonic())))
            left = end - time.monotonic()
            if left <= 0:
                reason = f"deadline of {self.deadline:g} s passed"
                break
            tries += 1
            try:
                status, body = self._send(path, data, min(self.timeout, left))
            except (OSError, HTTPException) as e:              # connection errors and timeouts
                reason = f"{type(e).__name__}: {e}"
                continue
            if not 200 <= status < 300:
                reason = f"HTTP {status}"
                if status in RETRY_STATUS or status >= 500:
                    continue
                break
            try:
                return parse(loads(body, max_chars=self.max_body))
            except (ValueError, KeyError, IndexError, TypeError) as e:  # malformed body
                reason = f"malformed body: {type(e).__name__}: {str(e)[:200]}"
        log.warning("%s%s failed after %d tries: %s", self.base_url, path, tries, reason)
        return None

    def _send(self, path, data, limit):
        """One try: (status, body bytes) within `limit` seconds in all, else an OSError."""
        cls, host, port, prefix = self._conn
        conn, watchdog, start = cls(host, port, timeout=limit), None, time.monotonic()
        try:
            conn.connect()  # bounded by `limit` itself
            watchdog = threading.Timer(limit - (time.monotonic() - start), _shut, (conn.sock,))
            watchdog.daemon = True
            watchdog.start()  # wakes a read that trickles past the limit
            conn.request("GET" if data is None else "POST", prefix + path, body=data,
                         headers={"Content-Type": "application/json", "Authorization": f"Bearer {self.api_key}"})
            resp = conn.getresponse()
            body = resp.read(self.max_body + 1)  # one byte over the cap is enough to reject it
            if time.monotonic() - start >= limit:
                raise TimeoutError(f"no complete answer within {limit:g} s")
            return resp.status, body
        finally:
            if watchdog is not None:
                watchdog.cancel()
            conn.close()


def _shut(sock):
    """Shut a socket from another thread, so a blocked read returns at once."""
    try:
        socket.socket.shutdown(sock, socket.SHUT_RDWR)  # the plain method: TLS sockets override it
    except OSError:
        pass


def _content(body):
    """The answer text of a chat completion body; null content (all budget spent reasoning) is ""."""
    message = body["choices"][0]["message"]
    content = message["content"]
    if content is None:
        return ""
    if not isinstance(content, str):
        raise TypeError(f"content is {type(content).__name__}")
    return content


@contextmanager
def window(seconds, *clients):
    """Every request the HTTP clients among `clients` make inside returns within `seconds` of its
    start (`HTTPClient.window`; 0 = no shared bound, each call has its own deadline); other
    clients (in-process, replay, None) need none."""
    with ExitStack() as stack:
        for c in clients:
            if seconds and isinstance(c, HTTPClient):
                stack.enter_context(c.window(seconds))
        yield


@dataclass(frozen=True)
class Client:
    """A frozen LLM's client settings, the flags --{role}-url, --{role}-model, ... of a role ("sim", "judge", "agent",
    "user"; lib/runs/config.py client_flags, where {ENV} in a help is the role's environment variable)."""
    url: str | None = field(default=None, metadata={"help": "OpenAI-compatible server, e.g. http://host:8000/v1 (env {ENV})"})
    model: str | None = field(default=None, metadata={
        "help": "served model name with a URL, else a hub name, local folder or .gguf file to load in-process (env {ENV})"})
    key: str | None = field(default=None, metadata={"help": "API key (env {ENV}, then OPENAI_API_KEY)", "hidden": True})
    timeout: float = field(default=TIMEOUT, metadata={
        "help": "seconds for one try of a request, end to end (the release's 540)", "range": "(0, 1e6]", "hidden": True})
    deadline: float = field(default=DEADLINE, metadata={
        "range": "(0, 1e6]", "hidden": True,  # 11 days
        "help": "seconds for one batch of requests (a turn's simulator calls, one judge request), model lookup, every "
                "try and pause included"})
    retries: int | None = field(default=None, metadata={  # None: RETRIES[role]; past ~1,000 the backoff overflows a float
        "help": "tries after the first (the release: sim 2, judge 3)", "range": "[0, 100]", "hidden": True})
    max_tokens: int | None = field(default=None, metadata={
        "range": "[1, 1e7]", "hidden": True,
        "help": "cap on one answer's new tokens for an in-process model (default: the role's budget, the release's sim "
                "4,096 / judge 8,192; a small CPU model needs less)"})


CLIENT_FIELDS = tuple(f.name for f in fields(Client))


def client(role, settings=Client()):
    """The frozen LLM of `role` under `settings` (a Client): HTTPClient if a URL is set, else HFClient if a model is
    set (a hub name, folder or .gguf file, loaded once for all roles that name it), else None (offline).
    url, model and key fall back to env SLCA_{ROLE}_URL/_MODEL/_KEY; retries to RETRIES[role]."""
    url, model, key, retries = settings.url, settings.model, settings.key, settings.retries
    env = lambda field, value: value or os.environ.get(f"SLCA_{role.upper()}_{field.upper()}")  # noqa: E731
    url, model = env("url", url), env("model", model)
    if url:
        return HTTPClient(url, model=model, api_key=env("key", key), timeout=settings.timeout, deadline=settings.deadline,
                          retries=RETRIES.get(role, 2) if retries is None else retries)
    return HFClient(model, max_tokens=settings.max_tokens) if model else None


def read_template(flag, path, fields, default):
    """`default`, or when `path` is given the prompt template in that UTF-8 file, checked to
    hold exactly the str.format placeholders `fields` (each at least once, literal braces
    doubled). Otherwise ValueError, one line naming `flag` and `path` and what is wrong."""
    if path is None:
        return default
    try:
        text = open(path, encoding="utf-8").read()
        found = {name for _, name, _, _ in string.Formatter().parse(text) if name is not None}
    except (OSError, UnicodeDecodeError) as e:
        raise ValueError(f"{flag} {path}: cannot read it: {e}") from None
    except ValueError as e:  # a single { or }
        raise ValueError(f"{flag} {path}: not a str.format template ({e}; write literal braces as {{{{ and }}}})") \
            from None
    if found != set(fields):
        missing, extra = sorted(set(fields) - found), sorted(found - set(fields))
        raise ValueError(f"{flag} {path}: the placeholders must be exactly " + ", ".join(f"{{{f}}}" for f in fields)
                         + (f"; missing {missing}" if missing else "") + (f"; unknown {extra}" if extra else ""))
    return text
