"""lib/sampling/: the fast samplers beside rollout.generate: cached (sampler.py), compiled (compiled.py), their
shared-prefix attention (prefix_attention.py), the reference sampler's log-probs (generation.py).
"""
