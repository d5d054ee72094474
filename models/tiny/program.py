"""The `tiny` program: Qwen3-TTS's structure (dual-track talker on paged attention, a code predictor of
K-1 sequential steps, a causal streaming codec) at toy size, with deterministic random weights.

It is the embedded default so `voxrt serve` and the tests run anywhere with no download. Random weights
never learn to stop, so it ends after `frames_per_text_token` frames per text token (about 15 characters
per audio second, like speech). ITS AUDIO IS NOISE: it exercises the engine, not speech quality.
"""

from __future__ import annotations

import re
import zlib
from dataclasses import dataclass

import torch
from torch import nn

from voxrt.models.common.layers import DenseDecoderLayer, PagedDecoderLayer, RMSNorm, rotary_cos_sin
from voxrt.models.tiny.codec import TinyCodec
from voxrt.engine.runtime.program import LMGeometry, ModelProgram
from voxrt.engine.runtime.sampling import SamplingTensors, apply_repetition_penalty, sample
from voxrt.engine.sched.plan import ProgramSpec
from voxrt.engine.sched.request import PromptTokens, Request

# Text-track special ids (the rest of the vocabulary is hashed text pieces).
TEXT_PAD, TEXT_BOS, TEXT_ROLE, NUM_TEXT_SPECIALS = 0, 1, 2, 16


@dataclass(frozen=True)
class TinyConfig:
    text_vocab_size: int = 4096
    text_embed_dim: int = 128
    hidden_size: int = 256
    num_layers: int = 2
    num_q_heads: int = 2
    num_kv_heads: int = 1
    head_dim: int = 128  # FlashInfer's precompiled kernels on the GPU machine are for head_dim 128
    intermediate_size: int = 512
    rope_theta: float = 10000.0
    num_codebooks: int = 16
    codebook_size: int = 256
    predictor_hidden: int = 128
    predictor_layers: int = 1
    predictor_heads: int = 2
    predictor_kv_heads: int = 1
    predictor_head_dim: int = 64
    predictor_intermediate: int = 256
    codec_dim: int = 64
    codec_heads: int = 2
    codec_window: int = 8
    codec_upsample: tuple[tuple[int, int], ...] = ((8, 32), (8, 16), (5, 16), (6, 8))  # 1920 samples / frame
    sample_rate: int = 24000
    chunk_frames: int = 10
    first_chunk_frames: int = 2
    frames_per_text_token: float = 2.5  # ~3 chars per token: 15 chars per audio second at 12.5 frames/s
    max_frames: int = 1500
    seed: int = 1234

    @property
    def codec_vocab_size(self) -> int:  # codes, then specials: pad, bos, eos, nothink, 4 speakers
        return self.codebook_size + 16

    @property
    def codec_pad(self) -> int:
        return self.codebook_size

    @property
    def codec_bos(self) -> int:
        return self.codebook_size + 1

    @property
    def codec_nothink(self) -> int:
        return self.codebook_size + 3


VOICES = ("default", "alto", "tenor", "whisper")


class TinyTalker(nn.Module):
    def __init__(self, cfg: TinyConfig) -> None:
        super().__init__()
        self.text_embedding = nn.Embedding(cfg.text_vocab_size, cfg.text_embed_dim)
        self.text_projection = nn.Sequential(nn.Linear(cfg.text_embed_dim, cfg.text_embed_dim), nn.SiLU(),
                                             nn.Linear(cfg.text_embed_dim, cfg.hidden_size))
        self.codec_embedding = nn.Embedding(cfg.codec_vocab_size, cfg.hidden_size)
        self.layers = nn.ModuleList(
            PagedDecoderLayer(i, cfg.hidden_size, cfg.intermediate_size, cfg.num_q_heads, cfg.num_kv_heads, cfg.head_dim)
            for i in range(cfg.num_layers))
        self.norm = RMSNorm(cfg.hidden_size)
        self.codec_head = nn.Linear(cfg.hidden_size, cfg.codec_vocab_size, bias=False)


class TinyCodePredictor(nn.Module):
    """Per frame: [talker hidden, embed(code 0)] then codes 1..K-1 one after another, each with its own
    embedding (talker width, projected) and head; the cache lives only for the frame."""

    def __init__(self, cfg: TinyConfig) -> None:
        super().__init__()
        self.codec_embedding = nn.ModuleList(nn.Embedding(cfg.codebook_size, cfg.hidden_size) for _ in range(cfg.num_codebooks - 1))
        self.projection = nn.Linear(cfg.hidden_size, cfg.predictor_hidden)
        self.layers = nn.ModuleList(
            DenseDecoderLayer(cfg.predictor_hidden, cfg.predictor_intermediate, cfg.predictor_heads,
                              cfg.predictor_kv_heads, cfg.predictor_head_dim) for _ in range(cfg.predictor_layers))
        self.norm = RMSNorm(cfg.predictor_hidden)
        self.heads = nn.ModuleList(nn.Linear(cfg.predictor_hidden, cfg.codebook_size, bias=False) for _ in range(cfg.num_codebooks - 1))


class TinyProgram(ModelProgram):
    name = "tiny"
    consumes_text_incrementally = True
    voices = VOICES
    default_voice = "default"

    def __init__(self, cfg: TinyConfig | None = None) -> None:
        super().__init__()
        cfg = cfg or TinyConfig()
        self.cfg = cfg
        self.sample_rate = cfg.sample_rate
        self.num_codebooks = cfg.num_codebooks
        self.chunk_frames = cfg.chunk_frames
        self.first_chunk_frames = cfg.first_chunk_frames
        with torch.random.fork_rng(devices=[]):  # deterministic weights, global RNG untouched
            torch.manual_seed(cfg.seed)
            self.talker = TinyTalker(cfg)
            self.predictor = TinyCodePredictor(cfg)
            self.codec = TinyCodec(cfg.num_codebooks, cfg.codebook_size, cfg.codec_dim, cfg.codec_heads,
                                   cfg.codec_window, cfg.codec_upsample)
        self.samples_per_frame = self.codec.samples_per_frame
        suppress = torch.zeros(cfg.codec_vocab_size, dtype=torch.bool)
        suppress[cfg.codebook_size :] = True  # specials are never sampled (random weights have no EOS)
        self.register_buffer("code0_suppress", suppress, persistent=False)

    # ---- constants -----------------------------------------------------------------------------------------

    @property
    def spec(self) -> ProgramSpec:
        return ProgramSpec(num_codebooks=self.cfg.num_codebooks, chunk_frames=self.chunk_frames,
                           first_chunk_frames=self.first_chunk_frames, consumes_text_incrementally=True,
                           text_pad_id=TEXT_PAD, eos_code=None,
                           frames_per_text_token=self.cfg.frames_per_text_token, default_max_frames=self.cfg.max_frames,
                           samples_per_frame=self.samples_per_frame, sample_rate=self.sample_rate)

    @property
    def lm_geometry(self) -> LMGeometry:
        c = self.cfg
        return LMGeometry(c.num_layers, c.num_q_heads, c.num_kv_heads, c.head_dim, c.hidden_size)

    @property
    def code0_vocab_size(self) -> int:
        return self.cfg.codec_vocab_size

    # ---- text ----------------------------------------------------------------------------------------------

    def tokenize(self, text: str) -> tuple[list[int], list[tuple[int, int]]]:
        """Words (with their leading space) cut into pieces of up to 3 characters, hashed into the vocab."""
        ids, spans = [], []
        for match in re.finditer(r"\s*\S+", text):
            start = match.start()
            word = match.group()
            for i in range(0, len(word), 3):
                piece = word[i : i + 3]
                ids.append(NUM_TEXT_SPECIALS + zlib.crc32(piece.encode()) % (self.cfg.text_vocab_size - NUM_TEXT_SPECIALS))
                spans.append((start + i, start + i + len(piece)))
        return ids, spans

    def build_prompt(self, request: Request) -> PromptTokens:
        """Qwen3-TTS CustomVoice order at toy size: role, nothink marker, speaker, tts_bos, then the first
        text token paired with codec_bos (streaming mode feeds the rest one per frame)."""
        speaker = self.cfg.codebook_size + 4 + self.voices.index(request.voice)
        first = request.feed.token_ids[0]
        text_ids = (TEXT_ROLE, TEXT_PAD, TEXT_PAD, TEXT_BOS, first)
        codec_ids = (-1, self.cfg.codec_nothink, speaker, self.cfg.codec_pad, self.cfg.codec_bos)
        return PromptTokens(text_ids, codec_ids, num_text_tokens_used=1)

    # ---- LM ------------------------------------------------------------------------------------------------

    def _text_embed(self, text_ids: torch.Tensor) -> torch.Tensor:
        return self.talker.text_projection(self.talker.text_embedding(text_ids.clamp(min=0)))

    def embed_prompt(self, text_ids: torch.Tensor, codec_ids: torch.Tensor) -> torch.Tensor:
        text = self._text_embed(text_ids) * (text_ids >= 0)[:, None]
        codec = self.talker.codec_embedding(codec_ids.clamp(min=0)) * (codec_ids >= 0)[:, None]
        return text + codec

    def embed_step(self, text_ids: torch.Tensor, prev_codes: torch.Tensor) -> torch.Tensor:
        x = self._text_embed(text_ids) + self.talker.codec_embedding(prev_codes[:, 0])
        for i, emb in enumerate(self.predictor.codec_embedding):
            x = x + emb(prev_codes[:, i + 1])
        return x

    def lm_forward(self, x: torch.Tensor, positions: torch.Tensor, attn) -> torch.Tensor:
        cos, sin = rotary_cos_sin(positions, self.cfg.head_dim, self.cfg.rope_theta, x.dtype)
        for layer in self.talker.layers:
            x = layer(x, cos, sin, attn)
        return self.talker.norm(x)

    def sample_first_code(self, hidden: torch.Tensor, sampling: SamplingTensors, history: torch.Tensor) -> torch.Tensor:
        logits = self.talker.codec_head(hidden).float()
        logits = apply_repetition_penalty(logits, history, sampling.repetition_penalty)
        return sample(logits, sampling, self.code0_suppress)

    # ---- depth ---------------------------------------------------------------------------------------------

    def generate_depth(self, hidden: torch.Tensor, code0: torch.Tensor, sampling: SamplingTensors) -> torch.Tensor:
        cfg, pred = self.cfg, self.predictor
        bsz, steps = hidden.shape[0], cfg.num_codebooks - 1
        max_len = steps + 1
        caches = [(torch.zeros(bsz, cfg.predictor_kv_heads, max_len, cfg.predictor_head_dim, device=hidden.device, dtype=hidden.dtype),
                   torch.zeros(bsz, cfg.predictor_kv_heads, max_len, cfg.predictor_head_dim, device=hidden.device, dtype=hidden.dtype))
                  for _ in pred.layers]
        positions = torch.arange(max_len, device=hidden.device)
        cos_all, sin_all = rotary_cos_sin(positions, cfg.predictor_head_dim, cfg.rope_theta, hidden.dtype)
        x = torch.stack([hidden, self.talker.codec_embedding(code0)], dim=1)  # [B, 2, H]
        codes = [code0]
        start = 0
        for step in range(steps):
            h = pred.projection(x)
            t = h.shape[1]
            cos, sin = cos_all[start : start + t], sin_all[start : start + t]
            for layer, (ck, cv) in zip(pred.layers, caches):
                h = layer(h, cos, sin, ck, cv, start)
            logits = pred.heads[step](pred.norm(h[:, -1]))
            code = sample(logits, sampling)
            codes.append(code)
            start += t
            if step + 1 < steps:
                x = pred.codec_embedding[step](code)[:, None, :]
        return torch.stack(codes, dim=1)

    # ---- codec ---------------------------------------------------------------------------------------------

    def new_codec_state(self, num_slots, device, dtype):
        return self.codec.new_state(num_slots, device, dtype)

    def reset_codec_slots(self, state, slots):
        for tensor in state.values():
            tensor.index_fill_(0, slots, 0)

    def decode_chunk(self, codes, slots, state):
        return self.codec.decode_stream(codes, slots, state)

    def decode_offline(self, codes):
        return self.codec.decode_offline(codes)


def build_tiny(checkpoint: str | None = None) -> TinyProgram:
    if checkpoint is not None:
        raise ValueError("the tiny model has built-in random weights and takes no checkpoint")
    return TinyProgram()


# `tiny` with 4 codebooks instead of 16: the same structure (talker, a code predictor that fills the other
# codebooks step by step, the streaming codec) with 3 predictor steps per frame instead of 15, so a frame costs
# ~2.5x less CPU (55 -> 22 ms of CPU time a step at batch 4, one thread, on the 2-core dev machine). The test
# suites run the engine and the gateway on it; the model's own tests, the engine process, engine-direct
# loadgen and the packaged server keep `tiny`.
TINY_LITE = TinyConfig(num_codebooks=4)


def build_tiny_lite(checkpoint: str | None = None) -> TinyProgram:
    if checkpoint is not None:
        raise ValueError("the tiny-lite model has built-in random weights and takes no checkpoint")
    program = TinyProgram(TINY_LITE)
    program.name = "tiny-lite"
    return program



# The Qwen3-TTS-12Hz-1.7B talker and code predictor shapes (../shared/models/qwen3-tts.md), random weights,
# with the toy codec: for engine benchmarks only (compute cost does not depend on weight values).
QWEN3_TTS_1_7B_SHAPE = TinyConfig(
    text_vocab_size=151936, text_embed_dim=2048, hidden_size=2048, num_layers=28, num_q_heads=16, num_kv_heads=8,
    head_dim=128, intermediate_size=6144, rope_theta=1_000_000.0, num_codebooks=16, codebook_size=2048,
    predictor_hidden=1024, predictor_layers=5, predictor_heads=16, predictor_kv_heads=8, predictor_head_dim=128,
    predictor_intermediate=3072, chunk_frames=25, first_chunk_frames=2)


def build_qwen3_tts_1_7b_shape(checkpoint: str | None = None) -> TinyProgram:
    if checkpoint is not None:
        raise ValueError("qwen3-tts-1.7b-shape has random weights and takes no checkpoint")
    device = "cuda" if torch.cuda.is_available() else "cpu"
    with torch.device(device):  # initialize 1.7B parameters where they will run
        program = TinyProgram(QWEN3_TTS_1_7B_SHAPE)
    program.name = "qwen3-tts-1.7b-shape"
    return program
