"""Building blocks shared by model programs (Qwen3-style decoder layers, rotary, dense small attention)."""
