"""LoRA through `peft` (train.py --lora-r N): the trained weights are low-rank adapters on a frozen base.

    model = add_adapter(model, r, alpha, dropout, targets, seed)   # a PeftModel: only the adapters train
    with adapters_off(model): ...                                  # the base alone: the RL reference (Eq. 11)
    model = merge(model)                                           # base + adapter, a plain model again

Stages (train.py): SFT trains adapter A; A is merged into the base in float32 and the result saved
as <out>/sft (the SFT policy, a whole Hugging Face folder); RL trains a fresh adapter B on it, so
the reference "the same weights with the adapters off" is the SFT policy exactly, with no second
copy. The base stays float32 (lib/training/precision.autocast): a bf16 base would round the merged SFT update
away (its spacing near 0.02 is about 1e-4). `base_folder` points a saved adapter at its base, so
lib/training/model.load_policy loads an adapter folder as a merged model.
"""
import functools
import os
from contextlib import nullcontext

import torch

# LLaMA-Factory's defaults (the release's SFT trainer; its finetuning_args): alpha = 2 r, no dropout, every linear
# layer of the decoder ("all"), which for Qwen2 / Llama-style blocks are these seven
TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
DROPOUT = 0.0


def add_adapter(model, r, alpha, dropout, targets, seed):
    """`model` wrapped by peft with a fresh LoRA adapter (rank r, scale alpha / r) on the `targets`
    modules; every base weight frozen. The adapter's random init draws from a generator seeded with
    `seed`, so a run that resumes after SFT builds the same adapter as one that never stopped. A
    target that names no module stops the run in one line."""
    from peft import LoraConfig, get_peft_model
    from peft.utils.error import NoMatchingPeftModuleError
    cfg = LoraConfig(r=r, lora_alpha=alpha, lora_dropout=dropout, target_modules=list(targets), task_type="CAUSAL_LM")
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        try:
            return get_peft_model(model, cfg)
        except NoMatchingPeftModuleError as e:
            raise SystemExit(f"--lora-targets: {e}") from None


def adapters_off(model):
    """A context in which `model` computes without its adapters (peft's disable_adapter); nothing for a plain model."""
    return model.disable_adapter() if hasattr(model, "disable_adapter") else nullcontext()


def merge(model):
    """The adapter added into the base weights (in their dtype): the plain model (changed in place),
    every weight trainable again, as after load_policy."""
    return model.merge_and_unload().requires_grad_(True)


def base_folder(model, base, final):
    """Point the adapter saved in `final` at `base` (a folder, a file or a hub name): relative to `final`
    when `base` is a folder beside it in the run, so the run folder can move; absolute when it is another
    local path, so it loads from any working directory; a hub name as it is. Its save writes no embedding
    layers (no adapter is on them; peft's "auto" would look the base up on the hub to decide)."""
    near = os.path.isdir(base) and os.path.dirname(os.path.abspath(base)) == os.path.dirname(os.path.abspath(final))
    local = os.path.exists(base)
    model.peft_config["default"].base_model_name_or_path = (os.path.relpath(base, final) if near else
                                                            os.path.abspath(base) if local else base)
    model.save_pretrained = functools.partial(model.save_pretrained, save_embedding_layers=False)
