"""A tiny random Qwen3-TTS CustomVoice checkpoint in the released layout, made by the reference itself.

The reference `Qwen3TTSForConditionalGeneration` is built from a tiny config (head_dim 128, GQA 2:1, q/k
norm, 16 code groups, the released mrope sections; small widths and vocabularies with the special ids laid
out as in the release: codes first, the last 1024 ids special), given seeded random weights and saved with
`save_pretrained` next to a tiny Qwen2-style byte-level BPE tokenizer (trained here with `tokenizers`) and a
generation_config.json, and, when voxrt's codec module exists, a tiny 12 Hz codec (the reference's
`Qwen3TTSTokenizerV2Model`, 16 codebooks of CODEBOOK codes) in `speech_tokenizer/`; without it, talker tests
run with a silent stand-in codec.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import torch

from reference import TC, C, M, T  # noqa: F401  (imports the reference with its stand-in modules)

CODEBOOK = 64  # predictor vocabulary; the talker's codec vocabulary adds the 1024 special ids after it
SHIFT = 2048 - CODEBOOK  # released special ids minus SHIFT keep their layout above the codes
NUM_CODE_GROUPS = 16
SPEAKERS = {"vivian": 3065 - SHIFT, "ryan": 3061 - SHIFT, "eric": 2875 - SHIFT}
LANGUAGES = {"chinese": 2055 - SHIFT, "english": 2050 - SHIFT, "sichuan_dialect": 2062 - SHIFT}
QWEN2_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
               r"\s*[\r\n]+|\s+(?!\S)|\s+")
SPECIAL_TOKENS = ["<|im_start|>", "<|im_end|>", "<tts_pad>", "<tts_text_bos>", "<tts_text_eod>"]
CORPUS = ["Hello world, this is a tiny test of speech.", "The quick brown fox jumps over the lazy dog.",
          "Speech synthesis in real time, one token per frame!", "assistant\n", "assistant", "assistant"]


def make_tokenizer(directory: Path):
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
    from transformers import Qwen2TokenizerFast

    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN2_SPLIT), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=320, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train_from_iterator(CORPUS * 8, trainer)
    tok.add_special_tokens(SPECIAL_TOKENS)
    fast = Qwen2TokenizerFast(tokenizer_object=tok, unk_token=None, bos_token=None, eos_token="<|im_end|>",
                              pad_token="<|im_end|>")
    fast.save_pretrained(str(directory))
    return fast


def reference_config(tokenizer) -> "C.Qwen3TTSConfig":
    ids = {t: tokenizer.convert_tokens_to_ids(t) for t in SPECIAL_TOKENS}
    predictor = dict(vocab_size=CODEBOOK, hidden_size=48, intermediate_size=96, num_hidden_layers=2,
                     num_attention_heads=4, num_key_value_heads=2, head_dim=128, rms_norm_eps=1e-6,
                     rope_theta=1_000_000, num_code_groups=NUM_CODE_GROUPS, max_position_embeddings=64)
    talker = dict(
        code_predictor_config=predictor, vocab_size=CODEBOOK + 1024, hidden_size=64, intermediate_size=128,
        num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=128, rms_norm_eps=1e-6,
        rope_theta=1_000_000, max_position_embeddings=512, num_code_groups=NUM_CODE_GROUPS,
        rope_scaling={"interleaved": True, "mrope_section": [24, 20, 20], "rope_type": "default", "type": "default"},
        text_hidden_size=96, text_vocab_size=len(tokenizer) + 11,
        codec_pad_id=2148 - SHIFT, codec_bos_id=2149 - SHIFT, codec_eos_token_id=2150 - SHIFT,
        codec_think_id=2154 - SHIFT, codec_nothink_id=2155 - SHIFT, codec_think_bos_id=2156 - SHIFT,
        codec_think_eos_id=2157 - SHIFT, codec_language_id=dict(LANGUAGES), spk_id=dict(SPEAKERS),
        spk_is_dialect={"vivian": False, "ryan": False, "eric": "sichuan_dialect"})
    return C.Qwen3TTSConfig(
        talker_config=talker, speaker_encoder_config={"enc_dim": 64}, tokenizer_type="qwen3_tts_tokenizer_12hz",
        tts_model_size="1b7", tts_model_type="custom_voice", im_start_token_id=ids["<|im_start|>"],
        im_end_token_id=ids["<|im_end|>"], tts_pad_token_id=ids["<tts_pad>"], tts_bos_token_id=ids["<tts_text_bos>"],
        tts_eos_token_id=ids["<tts_text_eod>"], assistant_token_id=tokenizer.convert_tokens_to_ids("assistant"))


def make_reference(tokenizer, seed: int = 0, eos: str = "plain"):
    """The reference model with seeded weights: embeddings N(0, 1), other weights N(0, 0.1), norms near 1
    (diverse codes under greedy decoding). `eos`: "plain"; "likely" doubles the codec head's EOS row (greedy
    runs stop after about ten frames); "always" makes EOS the top code 0 at every step (a large bias on one
    channel of the text projection dominates the residual stream, and the EOS row reads that channel)."""
    model = M.Qwen3TTSForConditionalGeneration(reference_config(tokenizer)).eval()
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name.endswith("norm.weight"):
                param.copy_(1.0 + 0.1 * torch.randn(param.shape, generator=gen))
            else:
                std = 1.0 if "embedding" in name else 0.1
                param.copy_(std * torch.randn(param.shape, generator=gen))
        eos_id = model.config.talker_config.codec_eos_token_id
        head = model.talker.codec_head.weight
        if eos == "likely":
            head[eos_id] *= 2.0
        elif eos == "always":
            model.talker.text_projection.linear_fc2.bias[0] = 1e3
            head[eos_id, 0] = 10.0 / float(model.talker.model.norm.weight[0])
        else:
            assert eos == "plain", eos
    return model


def has_codec() -> bool:
    try:
        import voxrt.models.qwen3_tts.codec  # noqa: F401
    except ImportError:
        return False
    return True


# The codec at toy size with the released structure (the codec's own tests use the same shapes): 16
# quantizers of CODEBOOK codes so that it decodes the talker's frames; 24 samples per frame.
CODEC_DECODER = dict(codebook_size=CODEBOOK, codebook_dim=16, latent_dim=24, hidden_size=32, intermediate_size=40,
                     num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=12, sliding_window=8,
                     num_quantizers=NUM_CODE_GROUPS, upsample_rates=[3, 2], upsampling_ratios=[2, 2], decoder_dim=32,
                     layer_scale_initial_scale=0.01, rms_norm_eps=1e-5, rope_theta=10000)
CODEC_ENCODER = dict(hidden_size=16, num_filters=4, upsampling_ratios=[3, 2], num_hidden_layers=1,
                     num_attention_heads=2, num_key_value_heads=2, head_dim=8, intermediate_size=32,
                     codebook_size=CODEBOOK, codebook_dim=8, num_quantizers=NUM_CODE_GROUPS, num_semantic_quantizers=1,
                     vector_quantization_hidden_dimension=8, sliding_window=8, num_residual_layers=1,
                     upsample_groups=16)
CODEC_SAMPLES_PER_FRAME = 3 * 2 * 2 * 2


def make_codec(directory: Path, seed: int = 0):
    """The reference codec with seeded weights, saved in the released layout; returns the model."""
    config = TC.Qwen3TTSTokenizerV2Config(
        encoder_config=CODEC_ENCODER, decoder_config=CODEC_DECODER, encoder_valid_num_quantizers=NUM_CODE_GROUPS,
        decode_upsample_rate=CODEC_SAMPLES_PER_FRAME, encode_downsample_rate=CODEC_SAMPLES_PER_FRAME)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = T.Qwen3TTSTokenizerV2Model(config).eval()
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.decoder.named_parameters():
            if name.endswith("cluster_usage"):
                p.copy_(torch.rand(p.shape, generator=gen) * 1.5 + 0.5)
            elif name.endswith("embedding_sum"):
                p.copy_(torch.randn(p.shape, generator=gen))
            elif "norm" in name and name.endswith("weight"):
                p.copy_(1.0 + 0.1 * torch.randn(p.shape, generator=gen))
            else:
                p.copy_(0.1 * torch.randn(p.shape, generator=gen))
    model.save_pretrained(str(directory))
    return model


@dataclass
class TinyCheckpoint:
    directory: Path
    model: object  # the reference Qwen3TTSForConditionalGeneration
    tokenizer: object
    codec: object | None  # the reference Qwen3TTSTokenizerV2Model saved in speech_tokenizer/, if any


def make_checkpoint(directory: Path, seed: int = 0, eos: str = "plain") -> TinyCheckpoint:
    """Writes the released layout into `directory`."""
    directory.mkdir(parents=True, exist_ok=True)
    tokenizer = make_tokenizer(directory)
    model = make_reference(tokenizer, seed=seed, eos=eos)
    model.save_pretrained(str(directory), safe_serialization=True)
    (directory / "generation_config.json").write_text(json.dumps(dict(
        do_sample=True, top_k=50, top_p=1.0, temperature=0.9, repetition_penalty=1.05, subtalker_dosample=True,
        subtalker_top_k=50, subtalker_top_p=1.0, subtalker_temperature=0.9, max_new_tokens=64)))
    codec = make_codec(directory / "speech_tokenizer", seed) if has_codec() else None
    return TinyCheckpoint(directory, model, tokenizer, codec)


class SilentCodec:
    """Stand-in for Qwen3TTSCodec in talker tests: the interface, zeros out."""

    sample_rate = 24000
    samples_per_frame = 1920

    def new_state(self, num_rows, device, dtype):
        return {"frames": torch.zeros(num_rows, dtype=torch.int64, device=device)}

    def reset_slots(self, state, slots):
        state["frames"].index_fill_(0, slots, 0)

    def decode_stream(self, codes, slots, state):
        state["frames"].index_add_(0, slots, torch.full_like(slots, codes.shape[1]))
        return torch.zeros(codes.shape[0], codes.shape[1] * self.samples_per_frame, device=codes.device)

    def decode_offline(self, codes):
        return torch.zeros(codes.shape[0], codes.shape[1] * self.samples_per_frame, device=codes.device)


def assistant_ids(tokenizer, text: str) -> torch.Tensor:
    """What Qwen3TTSModel._tokenize_texts gives the reference: [1, T] ids of the wrapped text."""
    wrapped = f"<|im_start|>assistant\n{text}<|im_end|>\n<|im_start|>assistant\n"
    return tokenizer(wrapped, return_tensors="pt")["input_ids"]


_BUILT: dict[tuple[int, str], TinyCheckpoint] = {}
_TMP: list = []


def cached_checkpoint(seed: int = 0, eos: str = "plain") -> TinyCheckpoint:
    """Built once per process and parameters, in a temporary directory."""
    import tempfile

    key = (seed, eos)
    if key not in _BUILT:
        tmp = tempfile.TemporaryDirectory(prefix="qwen3tts-tiny-")
        _TMP.append(tmp)  # removed when the process exits
        _BUILT[key] = make_checkpoint(Path(tmp.name), seed=seed, eos=eos)
    return _BUILT[key]


def load_program(directory: Path, **kwargs):
    """Our program from the checkpoint: with the real codec when models/qwen3_tts/codec.py exists and the
    checkpoint has one, else with the silent stand-in."""
    from voxrt.models.qwen3_tts.program import _load_dir

    codec = None if (directory / "speech_tokenizer" / "config.json").is_file() else SilentCodec()
    return _load_dir(directory, codec=codec, **kwargs).eval()


def reference_prompt(model, ids: torch.Tensor, speaker: str, language: str = "auto",
                     instruct: torch.Tensor | None = None) -> dict:
    """What the reference's generate() hands `talker.generate` (the prompt embeddings and trailing text);
    `instruct`: [1, T] ids of an instruct turn (generate's `instruct_ids`)."""
    captured = {}

    class Captured(Exception):
        pass

    def fake_generate(**kwargs):
        captured.update(kwargs)
        raise Captured

    original = model.talker.generate
    model.talker.generate = fake_generate
    try:
        with torch.no_grad():
            model.generate(input_ids=[ids], instruct_ids=[instruct], languages=[language], speakers=[speaker],
                           non_streaming_mode=False, do_sample=False, subtalker_dosample=False)
    except Captured:
        pass
    finally:
        model.talker.generate = original
    return captured
