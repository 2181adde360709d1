"""lib/training/: the model and its optimisation: loading (model.py), the tiny default (tiny.py), LoRA, dtypes
and casts (precision.py), the guarded optimizer step (optim.py), torchrun and FSDP2 (dist.py), SFT, chunked
log-probs (logprobs.py), advantage.py's vectorised group statistics (groups.py).
"""
