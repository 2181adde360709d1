"""lib/inputs/: what comes in: every data layout as one Task (data.py), the special-token-safe chat encoder
(chat.py), untrusted text made safe to parse and tokenize (text.py).
"""
