"""The support package: everything the eight top-level modules stand on that is not the method, in rooms by role
(each room's docstring names its files):

    inputs/     what comes in: data layouts, chat encoding, untrusted text
    training/   the model and its optimisation
    sampling/   the fast samplers beside rollout.generate
    frozen/     the frozen LLMs, the judges and SGLS's pieces
    runs/       the run: flags and presets, the loop's guards, its folder, checkpoints and logs

Imports run one way: the top level imports this package, nothing here imports the top level, and a room
imports only the rooms listed above it (tests/test_layout.py).
"""
