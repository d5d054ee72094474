"""Qwen3-TTS 12 Hz (CustomVoice): config, talker and code predictor, prompt building, codec, checkpoint loading."""
