"""lib/inputs/: what comes in. Every data layout as one Task or chat (data.py), the one special-token-safe chat
encoder (chat.py), untrusted text made safe to parse and to tokenize (text.py)."""
