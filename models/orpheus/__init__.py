"""Orpheus 3B: a Llama-3.2-3B-shaped LM that speaks in `<custom_token_N>` text tokens (7 per SNAC frame), and
the SNAC 24 kHz decoder. tokens.py (prompt, token -> code, stop rules), llama.py (the LM on paged attention),
snac.py and snac_stream.py (the codec, whole and streaming), checkpoint.py (finding the released files),
make_checkpoint.py (random full-size weights for benchmarks)."""
