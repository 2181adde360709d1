"""The run's settings: a preset file (configs/*.toml) under the command line's flags, and their
compact view printed at start (the whole config goes to <out>/config.json).

A preset is a plain TOML file of flag values, read as if its flags came first on the command line,
so a flag given always wins: configs/demo.toml without --model, configs/paper.toml with one, or
--preset NAME (a file in configs/) or PATH. Two rules follow the flags given: --epochs without
--steps drops the preset's steps (they follow the epochs); below float32 --old-logprobs is recompute.
"""
import hashlib
import json
import os
import sys
import textwrap
import tomllib

CONFIGS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "configs")
WHY = {"demo": "no --model; --preset paper for the paper's recipe",           # the default's reason, by --model
       "paper": "a named --model; --preset demo for the demo's settings"}


def read_preset(name):
    """The settings of preset `name`: configs/<name>.toml, or the .toml file `name` is a path to."""
    with open(name if name.endswith(".toml") else os.path.join(CONFIGS, f"{name}.toml"), "rb") as f:
        return tomllib.load(f)


def preset_argv(settings, p):
    """`settings` (a preset's) as the flags of parser `p` that set them, one flag a value."""
    flags = {act.dest: act.option_strings for act in p._actions}
    argv = []
    for k, v in settings.items():
        if k not in flags or k in ("model", "preset", "help"):
            p.error(f"--preset: {k!r} is not a flag a preset sets")
        if isinstance(v, bool):
            argv += [flags[k][0 if v else 1]] if v or len(flags[k]) > 1 else []  # --x / --no-x
        elif isinstance(v, list):
            argv += [flags[k][0], *map(str, v)]
        else:
            argv.append(f"{flags[k][0]}={v}")
    return argv


def with_preset(p, argv, a):
    """Parse `argv` again under the preset `a` (argv's parse) names: default demo without --model,
    paper with one. Refuses a file that cannot be read, a key that is no flag, and leaves no flag
    unset that both shipped presets set."""
    a.preset = a.preset or ("demo" if a.model is None else "paper")
    try:
        settings = read_preset(a.preset)
    except (OSError, tomllib.TOMLDecodeError) as e:
        p.error(f"--preset {a.preset}: {e}")
    if a.epochs is not None and a.steps is None:  # --epochs given: the steps follow it, whatever the preset
        settings.pop("steps", None)
    if (a.dtype or settings.get("dtype")) != "float32":  # sampled log-probs carry the decode's own rounding there
        settings["old_logprobs"] = "recompute"
    a = p.parse_args(preset_argv(settings, p) + list(sys.argv[1:] if argv is None else argv))
    a.preset = a.preset or ("demo" if a.model is None else "paper")
    need = read_preset("demo").keys() & read_preset("paper").keys()
    for k in sorted(k for k in need if getattr(a, k) is None):
        p.error(f"--preset {a.preset} sets no --{k.replace('_', '-')} and none was given")
    return a


def preset_line(preset, model):
    """The line that says which preset a run reads, and why."""
    default = "demo" if model is None else "paper"
    return f"preset: {preset} ({WHY[default] if preset == default else '--preset'})"


def preset_help(p):
    """Append both shipped presets' value to the help of each flag a preset sets."""
    demo, paper = read_preset("demo"), read_preset("paper")
    for act in p._actions:
        if act.dest in demo.keys() | paper.keys():
            act.help = (act.help + "; " if act.help else "") + \
                f"preset: demo {demo.get(act.dest)}, paper {paper.get(act.dest)}"


def show(p, config, width=118):
    """`config` (a run's flags, a dict) in the groups of parser `p`, a line or a few each; values
    set outside the table (the prompt templates) last, long texts as a short hash of their text."""
    def value(v):
        if isinstance(v, str) and (len(v) > 60 or "\n" in v):
            return "sha256:" + hashlib.sha256(v.encode()).hexdigest()[:8]
        return v if isinstance(v, str) and v else json.dumps(v, separators=(",", ":"))
    groups = [(g.title.split(" (")[0], [x.dest for x in g._group_actions]) for g in p._action_groups]
    grouped = {k for _, keys in groups for k in keys}
    groups.append(("other", [k for k in config if k not in grouped]))
    lines = [textwrap.fill("  ".join(f"{k}={value(config[k])}" for k in keys if k in config), width,
                           initial_indent=f"{title}: ", subsequent_indent="    ")
             for title, keys in groups if any(k in config for k in keys)]
    return "\n".join(["config (whole in config.json):", *lines])
