"""Developer tools, each run as `python -m tools.<name>`: what the project's own numbers are measured
and built with, not part of training.

    make_world   writes the shipped tool world (data/world/) and the constructed worlds of experiments/
    world        the world itself: its tools, entities, answers and 29 task kinds
    plan         memory and time of one RL step of the paper preset, from the model's config
    probe        one RL step on a GPU, per model size
    speed        rollout.py's two samplers against each other
    vs_trl       one RL step against TRL's GRPOTrainer and a raw floor
    decode       one decoding step, cached against compiled
    load         the demo's wall time idle and beside another process, per thread setting
"""
