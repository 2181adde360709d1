"""Loading models: the policy and its tokenizer, and in-process frozen LLMs.

`--model` (and --sim-model / --judge-model) is a hub name, a local folder or a .gguf file;
`hf_folder` dequantizes a .gguf file once into a cached Hugging Face folder, so everything
downstream loads an ordinary folder with `from_pretrained`.
"""
import fcntl
import functools
import logging
import os

import torch

log = logging.getLogger(__name__)


GGUF_CACHE = os.path.join(os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"),
                          "slca-grpo", "gguf")  # dequantized .gguf models (hf_folder); XDG's cache location


def hf_folder(name, cache=GGUF_CACHE):
    """`name` itself (a hub name or local folder), or for a `.gguf` file the Hugging Face folder
    its weights, dequantized to float32, and its tokenizer are saved in: converted once per
    file (transformers' GGUF loader, about 20 s for a 135M model on one CPU core) under
    `cache`, keyed by the file's name, size and mtime, so the policy, its reference copy and
    an in-process judge or simulator all load a plain folder."""
    if not name.endswith(".gguf"):
        return name
    if not os.path.isfile(name):
        raise FileNotFoundError(f"no such GGUF file: {name}")
    st = os.stat(name)
    out = os.path.join(cache, f"{os.path.basename(name)[:-len('.gguf')]}-{st.st_size}-{st.st_mtime_ns}")
    if os.path.isdir(out):
        return out
    os.makedirs(cache, exist_ok=True)
    with open(f"{out}.lock", "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)  # one conversion: torchrun's other ranks (or tests) wait, then read it
        if not os.path.isdir(out):
            convert(name, out)
    return out


def convert(name, out):
    from transformers import AutoModelForCausalLM, AutoTokenizer
    folder, file = os.path.split(os.path.abspath(name))
    log.warning("converting %s to a Hugging Face folder in %s (once)", name, out)
    tok = AutoTokenizer.from_pretrained(folder, gguf_file=file)
    model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=file, dtype=torch.float32)
    del model.config.quantization_config  # the weights are plain tensors now: save them as such
    model.hf_quantizer = None
    tmp = f"{out}.tmp{os.getpid()}"
    model.save_pretrained(tmp)
    tok.save_pretrained(tmp)
    os.replace(tmp, out)  # a crash leaves no half folder behind


def load_policy(name, dtype="float32", device="cpu", grad_ckpt=False):
    """A causal LM and its tokenizer from a hub name, a local folder or a .gguf file (`hf_folder`);
    a LoRA adapter folder (train.py --lora-r's final/) is loaded onto its base and merged into it."""
    from transformers import AutoModelForCausalLM, AutoTokenizer
    name = hf_folder(name)
    tok = AutoTokenizer.from_pretrained(name)
    if os.path.isfile(os.path.join(name, "adapter_config.json")):
        from peft import PeftConfig, PeftModel
        base = PeftConfig.from_pretrained(name).base_model_name_or_path  # relative to the adapter when a folder there
        near = os.path.join(name, base)
        model = load_policy(near if os.path.isdir(near) else base, dtype, device, grad_ckpt)[0]
        model = PeftModel.from_pretrained(model, name).merge_and_unload()
    else:
        model = AutoModelForCausalLM.from_pretrained(name, dtype=getattr(torch, dtype)).to(device)
        if grad_ckpt:
            model.activation_checkpointing_enable()
            model.config.use_cache = False
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    return model, tok


@functools.cache
def frozen(name, dtype="auto"):
    """An in-process frozen LLM and its tokenizer, loaded once per (name, dtype): a simulator
    and a judge named alike (--sim-model X --judge-model X) share one copy."""
    from transformers import AutoModelForCausalLM, AutoTokenizer
    name = hf_folder(name)
    return AutoModelForCausalLM.from_pretrained(name, dtype=dtype), AutoTokenizer.from_pretrained(name)
