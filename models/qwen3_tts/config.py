"""Qwen3-TTS 12 Hz talker configuration, parsed once from a checkpoint's config.json and validated.

Field names follow the released config.json (`Qwen3TTSConfig` / `Qwen3TTSTalkerConfig` /
`Qwen3TTSTalkerCodePredictorConfig` in the reference's configuration_qwen3_tts.py). The reference's
config-class DEFAULTS are not the released sizes, so every size and special id is required here; only
fields whose reference default is also the released value (eps, bias, activation, head_dim fallback) may be
absent. Errors name the missing or bad field.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from voxrt.engine.errors import CheckpointError

# The reference keeps these token ids in the top-level config (Qwen3TTSConfig.__init__).
_TOP_IDS = ("im_start_token_id", "tts_pad_token_id", "tts_bos_token_id", "tts_eos_token_id")
_CODEC_IDS = ("codec_pad_id", "codec_bos_id", "codec_eos_token_id", "codec_think_id", "codec_nothink_id",
              "codec_think_bos_id", "codec_think_eos_id")


class _Fields:
    """Reads one (sub)config with errors that name the field's full path."""

    def __init__(self, data: Mapping[str, Any], path: str, source: str) -> None:
        if not isinstance(data, Mapping):
            raise CheckpointError(f"{source}: {path or 'the config'} must be an object, got {type(data).__name__}")
        self.data, self.path, self.source = data, path, source

    def _name(self, key: str) -> str:
        return f"{self.path}.{key}" if self.path else key

    def error(self, key: str, problem: str) -> CheckpointError:
        return CheckpointError(f"{self.source}: {self._name(key)} {problem}")

    def get(self, key: str, kind: type | tuple[type, ...], default: Any = ...) -> Any:
        if key not in self.data or self.data[key] is None:
            if default is ...:
                raise self.error(key, "is missing")
            return default
        value = self.data[key]
        if kind is float and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        if isinstance(value, bool) and kind is not bool:
            raise self.error(key, f"must be {_kind_name(kind)}, got {value!r}")
        if not isinstance(value, kind):
            raise self.error(key, f"must be {_kind_name(kind)}, got {value!r}")
        return value

    def positive(self, key: str, default: Any = ...) -> int:
        value = self.get(key, int, default)
        if value <= 0:
            raise self.error(key, f"must be > 0, got {value}")
        return value

    def sub(self, key: str) -> "_Fields":
        return _Fields(self.get(key, dict), self._name(key), self.source)


def _kind_name(kind: type | tuple[type, ...]) -> str:
    kinds = kind if isinstance(kind, tuple) else (kind,)
    return " or ".join({"int": "an integer", "float": "a number", "bool": "a boolean", "str": "a string",
                        "dict": "an object", "list": "a list"}.get(k.__name__, k.__name__) for k in kinds)


@dataclass(frozen=True)
class TransformerConfig:
    """A Qwen3-style decoder stack (the talker's or the code predictor's)."""

    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_q_heads: int
    num_kv_heads: int
    head_dim: int
    rms_norm_eps: float
    rope_theta: float

    @classmethod
    def parse(cls, f: _Fields) -> "TransformerConfig":
        hidden = f.positive("hidden_size")
        heads = f.positive("num_attention_heads")
        # Qwen3TTSTalkerAttention: getattr(config, "head_dim", hidden_size // num_attention_heads)
        head_dim = f.positive("head_dim", hidden // heads)
        cfg = cls(hidden_size=hidden, intermediate_size=f.positive("intermediate_size"),
                  num_layers=f.positive("num_hidden_layers"), num_q_heads=heads,
                  num_kv_heads=f.positive("num_key_value_heads"), head_dim=head_dim,
                  rms_norm_eps=f.get("rms_norm_eps", float, 1e-6), rope_theta=f.get("rope_theta", float))
        if cfg.num_q_heads % cfg.num_kv_heads:
            raise f.error("num_key_value_heads", f"({cfg.num_kv_heads}) must divide num_attention_heads ({heads})")
        if head_dim % 2:
            raise f.error("head_dim", f"must be even for rotary, got {head_dim}")
        if f.get("hidden_act", str, "silu") != "silu":
            raise f.error("hidden_act", f"must be 'silu' (SwiGLU), got {f.get('hidden_act', str)!r}")
        if f.get("attention_bias", bool, False):
            raise f.error("attention_bias", "is true; the Qwen3-TTS talker has no attention biases")
        if f.get("use_sliding_window", bool, False):
            raise f.error("use_sliding_window", "is true; sliding-window attention is not supported")
        return cfg


@dataclass(frozen=True)
class TalkerConfig:
    lm: TransformerConfig
    predictor: TransformerConfig
    vocab_size: int  # codec vocabulary of code 0 (codes, then special ids)
    predictor_vocab_size: int  # codebook size of codes 1..K-1
    text_vocab_size: int
    text_hidden_size: int
    num_code_groups: int  # K: codebooks per frame
    mrope_section: tuple[int, ...]
    codec_pad_id: int
    codec_bos_id: int
    codec_eos_id: int
    codec_think_id: int
    codec_nothink_id: int
    codec_think_bos_id: int
    codec_think_eos_id: int
    language_ids: Mapping[str, int]  # codec_language_id, in config order
    speaker_ids: Mapping[str, int]  # spk_id, in config order
    speaker_dialects: Mapping[str, str | None]  # spk_is_dialect (false -> None)


@dataclass(frozen=True)
class Qwen3TTSConfig:
    talker: TalkerConfig
    im_start_token_id: int
    tts_pad_token_id: int
    tts_bos_token_id: int
    tts_eos_token_id: int
    assistant_token_id: int | None
    tts_model_type: str
    tts_model_size: str | None

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], source: str = "config.json") -> "Qwen3TTSConfig":
        top = _Fields(data, "", source)
        model_type = top.get("tts_model_type", str)
        if model_type != "custom_voice":
            raise top.error("tts_model_type", f"is {model_type!r}; only 'custom_voice' checkpoints (preset speakers) "
                            "are supported: 'base' (voice cloning) and 'voice_design' are not implemented")
        talker = _parse_talker(top.sub("talker_config"))
        ids = {name: top.get(name, int) for name in _TOP_IDS}
        for name, value in ids.items():
            if not 0 <= value < talker.text_vocab_size:
                raise top.error(name, f"({value}) is outside the text vocabulary [0, {talker.text_vocab_size})")
        return cls(talker=talker, assistant_token_id=top.get("assistant_token_id", int, None),
                   tts_model_type=model_type, tts_model_size=top.get("tts_model_size", str, None), **ids)

    @property
    def accepts_instructions(self) -> bool:
        """Whether the checkpoint takes a style instruction (the "instruct" prompt). The reference's
        `Qwen3TTSModel.generate_custom_voice` drops `instruct` when `tts_model_size in "0b6"` (the 0.6B
        CustomVoice; the 1.7B, "1b7", keeps it); a checkpoint without a size fails there, so it is refused
        instructions here rather than guessed."""
        return self.tts_model_size is not None and self.tts_model_size not in "0b6"


def _parse_talker(f: _Fields) -> TalkerConfig:
    lm = TransformerConfig.parse(f)
    pf = f.sub("code_predictor_config")
    predictor = TransformerConfig.parse(pf)
    vocab = f.positive("vocab_size")
    groups = f.positive("num_code_groups")
    if pf.positive("num_code_groups") != groups:
        raise pf.error("num_code_groups", f"({pf.get('num_code_groups', int)}) differs from the talker's ({groups})")
    if groups < 2:
        raise f.error("num_code_groups", f"must be >= 2, got {groups}")

    rope = f.get("rope_scaling", dict)  # the reference reads rope_scaling["mrope_section"] unconditionally
    rope_fields = _Fields(rope, f._name("rope_scaling"), f.source)
    rope_type = rope.get("rope_type", rope.get("type", "default"))
    if rope_type != "default":
        raise rope_fields.error("rope_type", f"is {rope_type!r}; only 'default' rotary is supported")
    section = rope_fields.get("mrope_section", list)
    if not all(isinstance(s, int) and s > 0 for s in section) or sum(section) != lm.head_dim // 2:
        raise rope_fields.error("mrope_section", f"{section} must be positive integers summing to head_dim / 2 "
                                f"({lm.head_dim // 2})")
    predictor_rope = pf.get("rope_scaling", dict, None)
    if predictor_rope is not None and predictor_rope.get("rope_type", predictor_rope.get("type")) != "default":
        raise pf.error("rope_scaling", f"{predictor_rope} is not supported (only default rotary)")

    codec_ids = {name: f.get(name, int) for name in _CODEC_IDS}
    for name, value in codec_ids.items():
        _check_code(f, name, value, vocab)
    languages = _id_map(f, "codec_language_id", vocab)
    speakers = _id_map(f, "spk_id", vocab)
    if not speakers:
        raise f.error("spk_id", "is empty; a CustomVoice checkpoint lists its preset speakers")
    raw_dialects = f.get("spk_is_dialect", dict)
    dialects: dict[str, str | None] = {}
    for name in speakers:
        if name not in raw_dialects:
            raise f.error("spk_is_dialect", f"has no entry for speaker {name!r} (the reference indexes it)")
        value = raw_dialects[name]
        if value is False or value is None:
            dialects[name] = None
        elif isinstance(value, str) and value in languages:
            dialects[name] = value
        else:
            raise f.error("spk_is_dialect", f"[{name!r}] must be false or a key of codec_language_id, got {value!r}")

    return TalkerConfig(
        lm=lm, predictor=predictor, vocab_size=vocab, predictor_vocab_size=pf.positive("vocab_size"),
        text_vocab_size=f.positive("text_vocab_size"), text_hidden_size=f.positive("text_hidden_size"),
        num_code_groups=groups, mrope_section=tuple(section),
        codec_pad_id=codec_ids["codec_pad_id"], codec_bos_id=codec_ids["codec_bos_id"],
        codec_eos_id=codec_ids["codec_eos_token_id"], codec_think_id=codec_ids["codec_think_id"],
        codec_nothink_id=codec_ids["codec_nothink_id"], codec_think_bos_id=codec_ids["codec_think_bos_id"],
        codec_think_eos_id=codec_ids["codec_think_eos_id"], language_ids=languages, speaker_ids=speakers,
        speaker_dialects=dialects)


def _check_code(f: _Fields, name: str, value: int, vocab: int) -> None:
    if not 0 <= value < vocab:
        raise f.error(name, f"({value}) is outside the codec vocabulary [0, {vocab})")


def _id_map(f: _Fields, key: str, vocab: int) -> dict[str, int]:
    raw = f.get(key, dict)
    out = {}
    for name, value in raw.items():
        if not isinstance(value, int) or isinstance(value, bool):
            raise f.error(key, f"[{name!r}] must be an integer id, got {value!r}")
        _check_code(f, f"{key}[{name!r}]", value, vocab)
        out[str(name).lower()] = value
    return out


@dataclass(frozen=True)
class GenerationDefaults:
    """Sampling defaults from the checkpoint's generation_config.json; absent keys take the reference's hard
    defaults (Qwen3TTSModel._merge_generate_kwargs in qwen_tts/inference/qwen3_tts_model.py)."""

    do_sample: bool = True
    temperature: float = 0.9
    top_k: int = 50
    top_p: float = 1.0
    repetition_penalty: float = 1.05
    subtalker_dosample: bool = True
    subtalker_temperature: float = 0.9
    subtalker_top_k: int = 50
    subtalker_top_p: float = 1.0
    max_new_tokens: int = 2048

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], source: str = "generation_config.json") -> "GenerationDefaults":
        f = _Fields(data, "", source)
        values = {}
        for name, field in cls.__dataclass_fields__.items():
            kind = {"bool": bool, "int": int, "float": float}[str(field.type)]
            values[name] = f.get(name, kind, field.default)
        return cls(**values)
