"""`qwen3-tts`: the Qwen3-TTS 12 Hz CustomVoice talker, its code predictor and its codec as a voxrt program.

The reference is `Qwen3TTSForConditionalGeneration.generate` in qwen_tts/core/models/modeling_qwen3_tts.py
(qwen-tts 0.1.1), called by `Qwen3TTSModel.generate_custom_voice` (qwen_tts/inference/qwen3_tts_model.py)
with the text wrapped as "<|im_start|>assistant\\n{text}<|im_end|>\\n<|im_start|>assistant\\n". We serve its
STREAMING text mode (`non_streaming_mode=False`): the prompt holds the first text token and every later
frame reads one more, so text can keep arriving while audio is generated.

Prompt (`generate()`, the non-ICL branch; both tracks are summed per position, -1 = nothing on that track):

    text : <|im_start|> assistant \\n | tts_pad x m              | tts_bos   | text[0]
    codec:      -1           -1     -1 | tags..., speaker (m ids) | codec_pad | codec_bos

The tags are [nothink, think_bos, think_eos] when the language is "auto", else [think, think_bos,
language, think_eos] (a dialect speaker turns "auto" and "chinese" into its dialect's id): 9 or 10 positions.

With a style instruction (`SamplingParams.instructions`; checkpoints whose `Qwen3TTSConfig.accepts_instructions`),
the prompt starts with its own chat turn on the text track alone, "<|im_start|>user\\n{instructions}<|im_end|>\\n"
(`Qwen3TTSModel._build_instruct_text`), embedded as text (`generate()`: text_projection(text_embedding(
instruct_id)), concatenated before the role tokens), with nothing on the codec track:

    text : <|im_start|> user \\n {instructions...} <|im_end|> \\n | <|im_start|> assistant \\n | ...
    codec:      -1       -1  -1         -1...          -1     -1  |      -1         -1     -1  | ...

The reference drops instructions on the 0.6B (`generate_custom_voice`); we refuse them there (the engine
checks `accepts_instructions` at submit), as for any program that does not take them.

Decode step t (generation_step t in the reference) reads text[t+1], then tts_eos once the text is final
and used up, then tts_pad (the reference's `trailing_text_hidden`, padded with `tts_pad_embed`); our
scheduler feeds them through `ProgramSpec.text_eos_id` / `text_pad_id`. The codec track of step t is the
sum of the previous frame's embeddings (talker embedding of code 0 + the predictor's of codes 1..K-1).

Sampling of code 0 (the reference's `talker_kwargs`): ids in [vocab - 1024, vocab) are suppressed except
codec EOS; the repetition penalty covers the code 0 history; `min_new_tokens=2` keeps EOS out of the first
two frames (`sample_first_code` says how frames are counted). EOS ends the request and is not audio.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import torch

from voxrt.engine.errors import CheckpointError
from voxrt.engine.runtime.kernels import check_impl, default_impl
from voxrt.engine.runtime.program import LMGeometry, ModelProgram, check_frame_path
from voxrt.engine.runtime.sampling import SamplingTensors, apply_repetition_penalty, sample
from voxrt.engine.sched.plan import ProgramSpec
from voxrt.engine.sched.request import PromptTokens, Request
from voxrt.models.common.checkpoint import load_strict
from voxrt.models.common.tokenize import span_tokenizer
from voxrt.models.qwen3_tts.config import GenerationDefaults, Qwen3TTSConfig
from voxrt.models.qwen3_tts.talker import Talker

log = logging.getLogger("voxrt.models.qwen3_tts")

ROLE_TEXT = "<|im_start|>assistant\n"  # Qwen3TTSModel._build_assistant_text: the first 3 tokens
USER_ROLE = "user\n"  # Qwen3TTSModel._build_instruct_text: "<|im_start|>user\n{instruct}<|im_end|>\n"
INSTRUCT_END_TEXT = "<|im_end|>\n"
NUM_SPECIAL_CODES = 1024  # generate(): suppress_tokens = range(vocab_size - 1024, vocab_size) minus EOS
MIN_FRAMES_BEFORE_EOS = 2  # generate(): talker_kwargs["min_new_tokens"]; sample_first_code counts to exactly 2


class Qwen3TTSProgram(ModelProgram):
    name = "qwen3-tts"
    consumes_text_incrementally = True
    # 64 of 132 SMs for the background codec lane, 68 for the LM (half the GPU rounded up to the driver's groups of
    # 8 had given the codec 72 and the LM 60): at the knee the LM was the busy lane (99.8% on its 60 SMs against the
    # codec's 72.4%, H200, 104 req/s), and on an H100 (30 s points, LibriTTS, the same arrivals) 64 codec SMs held
    # 100% at 104-116 req/s as 72 did and degraded least past the knee: 72.3 / 66.0% at 120 / 128 req/s against
    # 60.6 / 48.2% (56 SMs: 69.8 / 61.2%). bench/results/2026-12-06-h100-split/
    codec_sm_share = 64 / 132

    def __init__(self, cfg: Qwen3TTSConfig, tokenizer: Any, codec: Any, generation: GenerationDefaults | None = None,
                 *, talker: Talker | None = None, language: str = "auto", chunk_frames: int = 25,
                 first_chunk_frames: int = 2) -> None:
        """`tokenizer`: the checkpoint's HF tokenizer; `codec`: a Qwen3TTSCodec (or any object with its
        methods); `talker`: loaded weights (None: randomly initialized, for tests)."""
        super().__init__()
        self.cfg = cfg
        tc = cfg.talker
        self.talker = talker if talker is not None else Talker(tc)
        self.tokenizer = tokenizer
        self._encode_spans = span_tokenizer(tokenizer)  # per streamed word, in the engine's loop: the fast backend
        self.codec = codec
        self.generation = generation or GenerationDefaults()
        g = self.generation  # the checkpoint's generation_config.json sampling, for requests that set none
        self.sampling_defaults = {"temperature": g.temperature, "top_k": g.top_k, "top_p": g.top_p,
                                  "repetition_penalty": g.repetition_penalty, "greedy": not g.do_sample}
        self.sample_rate = int(getattr(codec, "sample_rate", 24000))
        self.samples_per_frame = int(codec.samples_per_frame)
        self.num_codebooks = tc.num_code_groups
        self.chunk_frames = chunk_frames
        self.first_chunk_frames = first_chunk_frames
        self.voices = tuple(tc.speaker_ids)
        self.default_voice = self.voices[0]
        supported = ["auto"] + [name for name in tc.language_ids if "dialect" not in name]  # as the reference
        if language.lower() not in supported:
            raise ValueError(f"unknown language {language!r}; supported: {', '.join(supported)}")
        self.language = language.lower()
        self.role_ids = self._role_ids()
        self.accepts_instructions = cfg.accepts_instructions
        self._instruct_end_ids: tuple[int, ...] | None = None  # tokenized on first use
        suppress = torch.zeros(tc.vocab_size, dtype=torch.bool)
        suppress[max(0, tc.vocab_size - NUM_SPECIAL_CODES):] = True
        suppress[tc.codec_eos_id] = False
        self.register_buffer("code0_suppress", suppress, persistent=False)
        eos = torch.zeros(tc.vocab_size, dtype=torch.bool)
        eos[tc.codec_eos_id] = True
        self.register_buffer("eos_mask", eos, persistent=False)
        self.fused = None  # FusedTalker once `use_frame_path` picks the fused path

    # ---- execution path ------------------------------------------------------------------------------------

    def use_frame_path(self, path: str, device: torch.device, impl: str | None = None,
                       gemm_impl: str | None = None) -> str:
        """`fused` (auto on CUDA with Triton): models/qwen3_tts/fused.py over these weights. `impl` picks the
        kernels ("torch" or "triton"; default: triton on CUDA, torch elsewhere); a program already on the fused
        path keeps its kernels when asked for `fused` again without `impl` (tests pick them before the engine
        is built)."""
        check_frame_path(path)
        if path == "fused" and impl is None and gemm_impl is None and self.fused is not None:
            return path
        impl = impl or default_impl(device)
        check_impl(impl)
        if path == "auto":
            path = "fused" if impl == "triton" else "reference"
        set_codec_impl = getattr(self.codec, "set_kernel_impl", None)  # (tests may hand in a stand-in codec)
        if path == "reference":
            self.fused = None
            if set_codec_impl is not None:
                set_codec_impl("torch")
            return path
        from voxrt.models.qwen3_tts.fused import FusedTalker  # noqa: PLC0415

        if set_codec_impl is not None:
            set_codec_impl(impl)  # the codec's SnakeBeta kernels go with the fused path

        self.fused = FusedTalker(self.talker, impl, gemm_impl)
        log.info("qwen3-tts: fused frame path (%s kernels; folded projections and lookup tables: %.0f MB beside "
                 "the released weights)", impl, self.fused.num_extra_bytes / 1e6)
        return path

    def warmup_note(self) -> str | None:
        from voxrt.models.qwen3_tts.codec_layers import timed_choices  # noqa: PLC0415

        line = timed_choices(self.codec) if isinstance(self.codec, torch.nn.Module) else None
        return f"codec convs, {line}" if line else None

    def tuning_key(self) -> dict | None:
        """The codec's timed conv choices depend on its code (codec_layers.py and the kernels it times) and on the
        `VOXRT_CODEC_*` settings that pick its candidates; None when it times nothing (a stand-in codec)."""
        if not isinstance(self.codec, torch.nn.Module):
            return None
        import hashlib  # noqa: PLC0415
        import os  # noqa: PLC0415
        from pathlib import Path  # noqa: PLC0415

        from voxrt.engine.runtime import kernels  # noqa: PLC0415
        from voxrt.models.qwen3_tts import codec_layers  # noqa: PLC0415

        files = [Path(codec_layers.__file__), *sorted(Path(kernels.__file__).parent.glob("*.py"))]
        code = hashlib.sha256(b"".join(f.read_bytes() for f in files)).hexdigest()[:16]
        settings = {k: v for k, v in sorted(os.environ.items()) if k.startswith("VOXRT_CODEC_")}
        return {"name": self.name, "codec_code": code, "settings": settings}

    def tuning_state(self) -> dict:
        from voxrt.models.qwen3_tts.codec_layers import saved_choices  # noqa: PLC0415

        choices = saved_choices(self.codec) if isinstance(self.codec, torch.nn.Module) else {}
        return {"codec": choices} if choices else {}

    def restore_tuning(self, state: dict) -> int:
        from voxrt.models.qwen3_tts.codec_layers import restore_choices  # noqa: PLC0415

        if not isinstance(self.codec, torch.nn.Module) or not isinstance(state, dict):
            return 0
        return restore_choices(self.codec, state.get("codec") or {})

    def _role_ids(self) -> tuple[int, ...]:
        ids = tuple(self.tokenizer(ROLE_TEXT, add_special_tokens=False)["input_ids"])
        expected_first = self.cfg.im_start_token_id
        assistant = self.cfg.assistant_token_id
        if len(ids) != 3 or ids[0] != expected_first or (assistant is not None and ids[1] != assistant):
            raise CheckpointError(f"the tokenizer encodes {ROLE_TEXT!r} as {list(ids)}; the reference expects 3 "
                                  f"tokens [{expected_first}, {assistant}, newline]: tokenizer and config disagree")
        return ids

    # ---- constants -----------------------------------------------------------------------------------------

    @property
    def spec(self) -> ProgramSpec:
        return ProgramSpec(num_codebooks=self.num_codebooks, chunk_frames=self.chunk_frames,
                           first_chunk_frames=self.first_chunk_frames, consumes_text_incrementally=True,
                           text_pad_id=self.cfg.tts_pad_token_id, eos_code=self.cfg.talker.codec_eos_id,
                           frames_per_text_token=None, default_max_frames=self.generation.max_new_tokens,
                           text_eos_id=self.cfg.tts_eos_token_id, samples_per_frame=self.samples_per_frame,
                           sample_rate=self.sample_rate)

    @property
    def lm_geometry(self) -> LMGeometry:
        lm = self.cfg.talker.lm
        return LMGeometry(lm.num_layers, lm.num_q_heads, lm.num_kv_heads, lm.head_dim, lm.hidden_size)

    @property
    def code0_vocab_size(self) -> int:
        """Width of the runner's per-slot code 0 history: twice the codec vocabulary, see `sample_first_code`."""
        return 2 * self.cfg.talker.vocab_size

    # ---- text and prompt -----------------------------------------------------------------------------------

    def tokenize(self, text: str) -> tuple[list[int], list[tuple[int, int]]]:
        """The checkpoint's BPE over `text` alone, with character spans. Special-token strings in user text
        stay plain text (`split_special_tokens`): a client cannot inject <|im_end|> or tts markers. Through the
        tokenizer's Rust backend where it has one (models/common/tokenize.py: ~6x faster a word, same ids)."""
        return self._encode_spans(text)

    def codec_prefix(self, voice: str) -> list[int]:
        """Codec ids before the first text token: think/language tags, the speaker, codec_pad, codec_bos
        (generate(): `codec_prefill_list` + speaker embedding + [codec_pad_id, codec_bos_id])."""
        tc = self.cfg.talker
        if voice not in tc.speaker_ids:
            raise ValueError(f"unknown voice {voice!r}; available: {', '.join(self.voices)}")
        language_id = None if self.language == "auto" else tc.language_ids[self.language]
        dialect = tc.speaker_dialects[voice]
        if self.language in ("chinese", "auto") and dialect is not None:
            language_id = tc.language_ids[dialect]
        if language_id is None:
            prefix = [tc.codec_nothink_id, tc.codec_think_bos_id, tc.codec_think_eos_id]
        else:
            prefix = [tc.codec_think_id, tc.codec_think_bos_id, language_id, tc.codec_think_eos_id]
        return prefix + [tc.speaker_ids[voice], tc.codec_pad_id, tc.codec_bos_id]

    def instruction_ids(self, instructions: str) -> list[int]:
        """Ids of the reference's instruct turn "<|im_start|>user\\n{instructions}<|im_end|>\\n", which
        `Qwen3TTSModel._tokenize_texts` tokenizes whole. A tokenizer splits at special tokens before BPE, so the
        reference's pieces are <|im_start|>, BPE("user\\n" + instructions), <|im_end|>, BPE("\\n"): the same ids
        as here, except that special-token strings inside the instruction stay plain text here (as in
        `tokenize`), where the reference would read them as markers."""
        if not self.accepts_instructions:
            raise ValueError(f"this checkpoint (tts_model_size {self.cfg.tts_model_size!r}) takes no instructions")
        body = self.tokenizer(USER_ROLE + instructions, add_special_tokens=False, split_special_tokens=True)
        return [self.cfg.im_start_token_id, *body["input_ids"], *self._instruct_end()]

    def _instruct_end(self) -> tuple[int, ...]:
        if self._instruct_end_ids is None:
            ids = tuple(self.tokenizer(INSTRUCT_END_TEXT, add_special_tokens=False)["input_ids"])
            if len(ids) != 2 or ids[1] != self.role_ids[2]:
                raise CheckpointError(f"the tokenizer encodes {INSTRUCT_END_TEXT!r} as {list(ids)}; the reference "
                                      f"expects 2 tokens [<|im_end|>, newline {self.role_ids[2]}]")
            self._instruct_end_ids = ids
        return self._instruct_end_ids

    def build_prompt(self, request: Request) -> PromptTokens:
        codec = self.codec_prefix(request.voice)
        cfg = self.cfg
        instructions = request.params.instructions
        instruct = self.instruction_ids(instructions) if instructions is not None else []
        text = (*instruct, *self.role_ids, *[cfg.tts_pad_token_id] * (len(codec) - 2), cfg.tts_bos_token_id,
                request.feed.token_ids[0])
        codec_ids = (-1,) * (len(instruct) + len(self.role_ids)) + tuple(codec)
        return PromptTokens(text, codec_ids, num_text_tokens_used=1)

    # ---- LM ------------------------------------------------------------------------------------------------

    def _embed_text(self, text_ids: torch.Tensor) -> torch.Tensor:
        return self.fused.embed_text(text_ids) if self.fused else self.talker.embed_text(text_ids)

    def embed_prompt(self, text_ids: torch.Tensor, codec_ids: torch.Tensor) -> torch.Tensor:
        text = self._embed_text(text_ids.clamp(min=0)) * (text_ids >= 0)[:, None]
        codec = self.talker.model.codec_embedding(codec_ids.clamp(min=0)) * (codec_ids >= 0)[:, None]
        return text + codec

    def embed_step(self, text_ids: torch.Tensor, prev_codes: torch.Tensor) -> torch.Tensor:
        if self.fused:
            return self.fused.embed_step(text_ids, prev_codes)
        return self.talker.embed_frame(prev_codes) + self._embed_text(text_ids)

    def lm_forward(self, x: torch.Tensor, positions: torch.Tensor, attn) -> torch.Tensor:
        if self.fused:
            return self.fused.forward(x, positions, attn)
        return self.talker.forward_paged(x, positions, attn)

    def sample_first_code(self, hidden: torch.Tensor, sampling: SamplingTensors, history: torch.Tensor) -> torch.Tensor:
        """Code 0 with the reference's processors: repetition penalty over the code 0 history, the special
        range suppressed except EOS, EOS barred from the first MIN_FRAMES_BEFORE_EOS (2) frames.

        Counting frames without a host sync or a runner change: the runner marks `history[slot, c]` with the
        value c this method returns and hands the same c to `generate_depth`. We return the code of frame 1
        shifted by the vocabulary size V (the history is 2V wide), and `generate_depth` shifts it back. So a
        row's history is empty at frame 0, has no mark at or above V at frame 1, and has one from frame 2 on:
        exactly the reference's `min_new_tokens=2`, which only ever needs frames 0 and 1 told apart."""
        vocab = self.cfg.talker.vocab_size
        if self.fused is not None and self.fused.glue_kernels:  # all of the below in the sampler kernel
            return self.fused.sample_first(self.talker.codec_head(hidden), sampling, self.code0_suppress, history,
                                           self.eos_mask)
        plain, tagged = history[:, :vocab], history[:, vocab:]  # [B, V] each; tagged: frame 1's code
        logits = self.talker.codec_head(hidden).float()
        logits = apply_repetition_penalty(logits, plain | tagged, sampling.repetition_penalty)
        is_past_frame_1 = tagged.any(dim=-1)  # [B]
        # EOS is barred before frame 2 and for rows whose length is pinned (benchmarks: stop suppressed)
        no_eos = ~is_past_frame_1 | ~sampling.allow_stop
        logits = logits.masked_fill(no_eos[:, None] & self.eos_mask[None, :], float("-inf"))
        code = self.fused.sample(logits, sampling, self.code0_suppress) if self.fused else \
            sample(logits, sampling, self.code0_suppress)
        is_frame_1 = plain.any(dim=-1) & ~is_past_frame_1
        return code + vocab * is_frame_1

    def _untag_code0(self, code0: torch.Tensor) -> torch.Tensor:
        vocab = self.cfg.talker.vocab_size
        return torch.where(code0 >= vocab, code0 - vocab, code0)

    # ---- depth ---------------------------------------------------------------------------------------------

    def generate_depth(self, hidden: torch.Tensor, code0: torch.Tensor, sampling: SamplingTensors) -> torch.Tensor:
        if self.fused is not None and self.fused.glue_kernels:  # untagged in the first inputs' kernel
            return self.fused.generate_depth(hidden, code0, sampling, code0_tag=self.cfg.talker.vocab_size)
        code0 = self._untag_code0(code0)  # frame 1's code comes shifted by the vocabulary (sample_first_code)
        if self.fused:
            return self.fused.generate_depth(hidden, code0, sampling)
        code0_embed = self.talker.model.codec_embedding(code0)
        return self.talker.code_predictor.generate(hidden, code0_embed, code0, sampling)

    # ---- codec ---------------------------------------------------------------------------------------------

    def new_codec_state(self, num_slots: int, device: torch.device, dtype: torch.dtype) -> dict[str, torch.Tensor]:
        return self.codec.new_state(num_slots, device, dtype)

    def reset_codec_slots(self, state: dict[str, torch.Tensor], slots: torch.Tensor) -> None:
        self.codec.reset_slots(state, slots)

    def decode_chunk(self, codes: torch.Tensor, slots: torch.Tensor, state: dict[str, torch.Tensor]) -> torch.Tensor:
        return self.codec.decode_stream(codes, slots, state)

    def decode_offline(self, codes: torch.Tensor) -> torch.Tensor:
        return self.codec.decode_offline(codes)


# ---- building from a checkpoint directory -------------------------------------------------------------------


def build_qwen3_tts(checkpoint: str | None) -> Qwen3TTSProgram:
    """A local directory in the released layout (config.json, model.safetensors or shards, tokenizer files,
    generation_config.json, speech_tokenizer/), or a repo id resolved in the local Hugging Face cache."""
    if checkpoint is None:
        raise CheckpointError("qwen3-tts needs a checkpoint (--checkpoint): a directory in the released layout, "
                              "or a repo id in the local Hugging Face cache such as Qwen/Qwen3-TTS-12Hz-1.7B-CustomVoice")
    from voxrt.models.qwen3_tts import loader  # noqa: PLC0415

    return _load_dir(loader.resolve(checkpoint))


def _load_dir(model_dir: Path, codec: Any = None, **program_kwargs: Any) -> Qwen3TTSProgram:
    """`codec=None` loads the codec from the checkpoint; tests may pass a stand-in."""
    from voxrt.models.qwen3_tts import loader  # noqa: PLC0415 (file reading helpers shared with the resolver)

    loader.check_model_dir(model_dir)
    cfg = Qwen3TTSConfig.from_dict(loader.read_json(model_dir / "config.json"), source=str(model_dir / "config.json"))
    gen_path = model_dir / "generation_config.json"
    generation = GenerationDefaults.from_dict(loader.read_json(gen_path), str(gen_path)) if gen_path.is_file() \
        else GenerationDefaults()
    tokenizer = _load_tokenizer(model_dir)
    if codec is None:
        codec = _load_codec(loader.codec_dir(model_dir))
    talker = load_talker(cfg, loader.load_state(model_dir), str(model_dir))
    return Qwen3TTSProgram(cfg, tokenizer, codec, generation, talker=talker, **program_kwargs)


def select_talker_state(state: dict[str, torch.Tensor], source: str) -> dict[str, torch.Tensor]:
    """The `talker.*` tensors, prefix removed. A Base checkpoint's speaker encoder is not ours (logged);
    any other key is an error, never silently dropped."""
    talker = {k.removeprefix("talker."): v for k, v in state.items() if k.startswith("talker.")}
    speaker = [k for k in state if k.startswith("speaker_encoder.")]
    other = sorted(k for k in state if not k.startswith(("talker.", "speaker_encoder.")))
    if speaker:
        log.info("%s: ignoring %d speaker_encoder tensors (voice cloning is not served)", source, len(speaker))
    if other:
        raise CheckpointError(f"{source}: {len(other)} tensors belong to neither the talker nor the speaker "
                              f"encoder: {other[:8]}")
    return talker


def load_talker(cfg: Qwen3TTSConfig, state: dict[str, torch.Tensor], source: str) -> Talker:
    """The talker built without allocating random weights (meta device), then given the checkpoint's
    tensors strictly: every missing or unexpected key is named."""
    tensors = select_talker_state(state, source)
    with torch.device("meta"):
        talker = Talker(cfg.talker)
    load_strict(talker, tensors, f"{source}: talker weights", assign=True)
    return talker


def _load_tokenizer(model_dir: Path) -> Any:
    try:
        from transformers import AutoTokenizer  # noqa: PLC0415 (only this model needs transformers)
    except ImportError as exc:
        raise ImportError("qwen3-tts tokenizes with the checkpoint's Hugging Face tokenizer: "
                          "pip install transformers") from exc
    try:
        return AutoTokenizer.from_pretrained(str(model_dir))
    except (OSError, ValueError) as exc:
        raise CheckpointError(f"cannot load the tokenizer of {model_dir}: {exc}") from None


def _load_codec(directory: Path) -> Any:
    try:
        from voxrt.models.qwen3_tts.codec import load_codec  # noqa: PLC0415
    except ImportError as exc:
        raise ImportError("the Qwen3-TTS 12 Hz codec (voxrt.models.qwen3_tts.codec: Qwen3TTSCodec, load_codec) "
                          f"is not available ({exc}); the talker cannot be served without it") from exc
    return load_codec(directory)


def build_qwen3_tts_1_7b(checkpoint: str | None) -> Qwen3TTSProgram:
    return build_qwen3_tts(checkpoint or "Qwen/Qwen3-TTS-12Hz-1.7B-CustomVoice")


def build_qwen3_tts_0_6b(checkpoint: str | None) -> Qwen3TTSProgram:
    return build_qwen3_tts(checkpoint or "Qwen/Qwen3-TTS-12Hz-0.6B-CustomVoice")
