"""lib/frozen/: the frozen LLMs and what answers or rates the policy: clients (llm.py), judges (judges.py),
SGLS's bounded schema check and framing (schema.py, sgls.py).
"""
