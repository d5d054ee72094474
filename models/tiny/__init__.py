"""`tiny`: the Qwen3-TTS shape at toy size with deterministic random weights. Its audio is noise."""
