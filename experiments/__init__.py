"""The experiments: one module per question, each run as `python -m experiments.<name>`, each with its
page in docs/experiments/ (question, command, pre-registration, every seed's results, verdict); the three
that read or predict another's runs are sections of that one's page. docs/results.md indexes them all.

    paper            the paper's comparison at CPU scale: SLCA, GRPO, ToolPO, w/o HierR, w/o SGLS
    noise            judge noise: SLCA and GRPO at each noise level
    turn             per-turn credit (README Eq. 14)
    misattribution   credit misattribution on constructed worlds, both directions; the Eq. 15 arm
    smol             the same questions on a real pretrained model, SmolLM2-135M-Instruct
    bonus_sim        the misattribution diagnostic's prediction, a two-choice toy, before any run (on misattribution.md)
    value_reading    does a policy read a call's contested argument from the question? (on wrong-value.md)
    stopping         what each score pays for calling again instead of stopping, from logged rollouts (on smol.md)
    common           what they share: train.py arms from one SFT start per seed, kept runs and reports,
                     paired tests over seeds, thirds of the RL steps, tables, figures, the driver
"""
