"""Orpheus 3B: a Llama-3.2-3B-shaped LM that speaks in `<custom_token_N>` text tokens (7 per SNAC frame), and
the SNAC 24 kHz decoder. tokens.py (prompt, token -> code, stop rules), llama.py (the LM on paged attention),
snac.py (the codec), snac_stream.py (streaming by the reference's window rule), snac_exact.py (streaming
equal to the whole decode), checkpoint.py (finding the released files), make_checkpoint.py (random
full-size weights for benchmarks)."""
