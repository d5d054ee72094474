"""Names other APIs use for models and voices, mapped to what this server serves.

Model aliases: every model name of the supported APIs means the served model (there is one per server).
Voice aliases: OpenAI's voice names go round-robin over the model's voices in a fixed order, so two names
that differ there differ here; `--voice-alias NAME=VOICE` (or `VOXRT_VOICE_ALIASES=a=b,c=d`) adds or
overrides a mapping (an ElevenLabs voice id, a Cartesia voice UUID, ...). Unknown names are an error that
lists the served voices, never a silent default.
"""

from __future__ import annotations

from dataclasses import dataclass

OPENAI_MODELS = ("tts-1", "tts-1-hd", "gpt-4o-mini-tts", "gpt-4o-mini-tts-2025-12-15", "gpt-4o-tts")
OPENAI_VOICES = ("alloy", "ash", "ballad", "coral", "echo", "fable", "onyx", "nova", "sage", "shimmer", "verse",
                 "marin", "cedar")
ELEVENLABS_MODEL_PREFIX = "eleven_"
CARTESIA_MODEL_PREFIX = "sonic"


class AliasError(ValueError):
    """An unknown model or voice; `code` is the wire code (`unknown_model`, `unknown_voice`)."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code, self.message = code, message


@dataclass(frozen=True)
class Aliases:
    model_aliases: tuple[str, ...] = ()  # extra names that mean the served model
    voice_aliases: tuple[tuple[str, str], ...] = ()  # (alias, served voice), overriding the built-ins

    @classmethod
    def parse(cls, model_aliases=(), voice_aliases=()) -> "Aliases":
        """`voice_aliases` as "name=voice" strings; a malformed one is a ValueError naming it."""
        pairs = []
        for item in voice_aliases:
            name, sep, voice = item.partition("=")
            if not sep or not name.strip() or not voice.strip():
                raise ValueError(f"a voice alias is NAME=VOICE, got {item!r}")
            pairs.append((name.strip(), voice.strip()))
        return cls(tuple(m.strip() for m in model_aliases if m.strip()), tuple(pairs))

    def resolve_model(self, name: str | None, served: str) -> str:
        if name is not None and not isinstance(name, str):  # a number or object where a name goes (bad input)
            raise AliasError("unknown_model", f"the model must be a name (a string), got {type(name).__name__}")
        if name is None or name == "" or name == served or name in self.model_aliases or name in OPENAI_MODELS \
                or name.startswith(ELEVENLABS_MODEL_PREFIX) or name.startswith(CARTESIA_MODEL_PREFIX):
            return served
        raise AliasError("unknown_model", f"unknown model {name!r}; served: {served} (aliases: "
                                          f"{', '.join(OPENAI_MODELS[:3])}, eleven_*, sonic*, or --model-alias)")

    def voice_map(self, voices: tuple[str, ...]) -> dict[str, str]:
        mapping = {name: voices[i % len(voices)] for i, name in enumerate(OPENAI_VOICES)} if voices else {}
        mapping.update(dict(self.voice_aliases))
        return mapping

    def resolve_voice(self, name: str | None, voices: tuple[str, ...], default: str) -> str:
        if name is not None and not isinstance(name, str):
            raise AliasError("unknown_voice", f"the voice must be a name (a string), got {type(name).__name__}")
        if name is None or name == "":
            return default
        if name in voices:
            return name
        mapped = self.voice_map(voices).get(name)
        if mapped is not None and mapped in voices:
            return mapped
        raise AliasError("unknown_voice", f"unknown voice {name[:64]!r}; served voices: {', '.join(voices)}; "
                                          f"OpenAI names map onto them; add others with --voice-alias NAME=VOICE")
