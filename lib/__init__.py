"""The support package: everything the eight top-level modules stand on that is not the method.

    config.py    the run's settings: preset files (configs/*.toml) under the flags, the compact view
    text.py      bounded JSON for untrusted text; lone surrogates made encodable
    chat.py      the one special-token-safe encoder (chat templates, tool blocks)
    lib/data.py      data layouts: the shipped world, the release's verl and Toucan files, SFT chats
    model.py     loading the policy (a hub name, a folder or a .gguf file) and in-process frozen LLMs
    lib/tiny.py      the embedded default model: a tokenizer trained on the world and a tiny Qwen2
    groups.py    advantage.py's group statistics (Eq. 7), vectorised over a batch
    schema.py    SGLS check 4 (simulator.py): JSON-schema validation, bounded in steps and time
    lib/llm.py       frozen-LLM clients (in-process and OpenAI-compatible HTTP) and the LLM judge
    lib/logprobs.py  token log-probs: the plain full-sequence pass and the shared-prompt pass
    lib/sampler.py   rollout.py's cache-reusing sampler (--sampler cached): KV caches kept across turns
    dist.py         torchrun / FSDP2: the process group, sharding, collectives
    precision.py    the compute dtype: autocast and the casts of the weights
    runfolder.py    the run folder: the lock, failed writes, open/resume checks, stop signals
    checkpoints.py  checkpoints: save, resume, the final model
    lib/sft.py       the warm start (supervised fine-tuning on the loss mask)
    loop.py      the RL loop's plumbing: the plan line, the RL state, the metrics row and log, the guards
    files.py     JSONL result files
    plots.py     training curves (matplotlib, the benchmark extra)

Imports run one way: the top level imports this package; nothing here imports the top level.
"""
