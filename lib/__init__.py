"""The support package: everything the eight top-level modules stand on that is not the method, in rooms by role.

    inputs/     what comes in: every data layout as one Task (data.py), the special-token-safe chat encoder
                (chat.py), untrusted text made safe to parse and tokenize (text.py)
    training/   the model and its optimisation: loading (model.py), the tiny default (tiny.py), LoRA, dtypes and
                casts (precision.py), the guarded optimizer step (optim.py), torchrun and FSDP2 (dist.py), SFT,
                chunked log-probs (logprobs.py), advantage.py's vectorised group statistics (groups.py)
    sampling/   the fast samplers beside rollout.generate: cached (sampler.py), compiled (compiled.py), their
                shared-prefix attention (prefix_attention.py), the reference sampler's log-probs (generation.py)
    frozen/     the frozen LLMs and what answers or rates the policy: clients (llm.py), judges (judges.py),
                SGLS's bounded schema check and framing (schema.py, sgls.py)
    runs/       the run: flags and presets (config.py), the loop's plumbing and guards (loop.py), the run folder,
                checkpoints, threads, logs and plots, eval.py's result files (evalcli.py)

Imports run one way: the top level imports this package, nothing here imports the top level, and a room
imports only the rooms listed above it (tests/test_layout.py).
"""
