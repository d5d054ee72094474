"""The Orpheus program: a Llama LM that speaks seven `<custom_token_N>` tokens a SNAC frame, no depth stage,
the prompt at once, and SNAC streamed exactly (snac_exact.ExactStreamer).

Frame shape (engine/runtime/program.py): `lm_tokens_per_frame` 7, `has_depth` False. A frame row holds the
seven tokens as rows of the sliced head (row N = <custom_token_N> = token id 128256 + N), so that the
repetition history and the next sub-step's input read the row as it is; `decode_chunk` turns rows into SNAC
codes (tokens.frame_codes). Sub-step j samples only the 4096 rows of position j (tokens.audio_row_mask), and
the stop rows only at position 0: a frame is whole or not made, as the reference keeps whole frames only.
Both stop tokens (end_of_speech, end_of_ai) come out as end_of_speech's row, the spec's `eos_code`.

Prompt (tokens.py): start_of_human, the tokenizer's "{voice}: {text}" (with its <|begin_of_text|>),
end_of_text, end_of_human, start_of_ai, start_of_speech, on the text track; nothing on the code track. The
text is read whole (`consumes_text_incrementally` False): the gateway cuts a context's text into segments,
each a generation.

The codec lags its input by `SnacConfig.reach_samples` (4,757 samples with the released codec): the runner
drops them from each request's start and appends `finish_codec`'s tail after its last chunk, so N frames
are N * 2048 samples equal to the whole-sequence decode. The first chunk is 4 frames: 3 are the first that
release audio, but only 1,387 samples (58 ms), less than the LM takes to make the next frame under load; 4
release 3,435 (143 ms). Measured on an H200 (bench/results/2026-12-02-orpheus), 2 req/s: 3 frames stalled
every request, 4 frames 9% of them.

Random checkpoints (`voxrt make-checkpoint --arch orpheus-3b` or `orpheus-tiny`, which write voxrt.json with
`random_weights`) never learn to stop: stop rows are never sampled and a length rule of
`frames_per_text_token` ends them, as the `tiny` model does.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import torch

from voxrt.engine.errors import CheckpointError
from voxrt.engine.runtime.program import LMGeometry, ModelProgram
from voxrt.engine.runtime.sampling import SamplingTensors, apply_repetition_penalty, sample
from voxrt.engine.sched.plan import ProgramSpec
from voxrt.engine.sched.request import PromptTokens, Request
from voxrt.models.orpheus import checkpoint, tokens
from voxrt.models.orpheus.llama import OrpheusLM, load_lm
from voxrt.models.orpheus.snac import SnacDecoder, load_snac
from voxrt.models.orpheus.snac_exact import ExactStreamer

log = logging.getLogger("voxrt.models.orpheus")

MARKER = "voxrt.json"  # written by make-checkpoint beside random weights: {"random_weights": true, ...}
DEFAULT_MAX_FRAMES = tokens.SAMPLING_DEFAULTS["max_tokens"] // tokens.TOKENS_PER_FRAME  # the reference's 2000 tokens
RANDOM_FRAMES_PER_TEXT_TOKEN = 3.0  # ~4 characters a token, ~14 characters an audio second at 11.7 frames/s


class OrpheusProgram(ModelProgram):
    name = "orpheus"
    consumes_text_incrementally = False
    voices = tokens.VOICES
    default_voice = tokens.DEFAULT_VOICE
    lm_tokens_per_frame = tokens.TOKENS_PER_FRAME
    has_depth = False
    # SNAC costs ~0.1 ms a frame beside a 4.5-5 ms LM pass: the LM lane takes 116 of the H200's 132 SMs, the
    # background codec 16 (measured 2026-12-02: one decode pass 4.48 ms on 116 SMs against 4.94 on 60, and fewer
    # late chunks; bench/results/2026-12-02-orpheus)
    codec_sm_share = 16 / 132
    # the reference's realtime example (tokens.SAMPLING_DEFAULTS; the model card: a penalty >= 1.1 is required)
    sampling_defaults = {"temperature": tokens.SAMPLING_DEFAULTS["temperature"], "top_p": tokens.SAMPLING_DEFAULTS["top_p"],
                         "top_k": 0, "repetition_penalty": tokens.SAMPLING_DEFAULTS["repetition_penalty"]}

    def __init__(self, lm: OrpheusLM, codec: SnacDecoder, tokenizer: Any, *, random_weights: bool = False,
                 frames_per_text_token: float | None = None, chunk_frames: int = 12, first_chunk_frames: int = 4) -> None:
        """`tokenizer`: a `tokenizers.Tokenizer` (the checkpoint's tokenizer.json)."""
        super().__init__()
        if lm.audio_row_start != tokens.CUSTOM_TOKEN_BASE or lm.num_audio_rows < tokens.AUDIO_TOKEN_OFFSET + \
                tokens.NUM_AUDIO_TOKENS:
            raise CheckpointError(f"the LM's vocabulary ({lm.cfg.vocab_size}) lacks Orpheus's audio tokens (ids up to "
                                  f"{tokens.AUDIO_TOKENS_START + tokens.NUM_AUDIO_TOKENS - 1})")
        self.lm = lm
        self.codec = codec
        self.streamer = ExactStreamer(codec)
        self.tokenizer = tokenizer
        self.sample_rate = codec.sample_rate
        self.samples_per_frame = self.streamer.samples_per_frame
        self.codec_delay_samples = self.streamer.lookahead_samples
        self.num_codebooks = tokens.TOKENS_PER_FRAME
        self.chunk_frames = chunk_frames
        # the first chunk releases audio only past the codec's lag
        self.first_chunk_frames = max(first_chunk_frames, self.codec_delay_samples // self.samples_per_frame + 1)
        self.random_weights = random_weights
        self.frames_per_text_token = frames_per_text_token if frames_per_text_token is not None else \
            (RANDOM_FRAMES_PER_TEXT_TOKEN if random_weights else None)
        self._num_rows = lm.num_audio_rows

    # ---- constants -----------------------------------------------------------------------------------------

    @property
    def spec(self) -> ProgramSpec:
        return ProgramSpec(num_codebooks=self.num_codebooks, chunk_frames=self.chunk_frames,
                           first_chunk_frames=self.first_chunk_frames, consumes_text_incrementally=False,
                           text_pad_id=tokens.PAD, eos_code=None if self.random_weights else self.eos_row,
                           frames_per_text_token=self.frames_per_text_token, default_max_frames=DEFAULT_MAX_FRAMES,
                           samples_per_frame=self.samples_per_frame, sample_rate=self.sample_rate,
                           lm_tokens_per_frame=self.lm_tokens_per_frame, codec_delay_samples=self.codec_delay_samples)

    @property
    def eos_row(self) -> int:
        return tokens.END_OF_SPEECH - tokens.CUSTOM_TOKEN_BASE

    @property
    def lm_geometry(self) -> LMGeometry:
        c = self.lm.cfg
        return LMGeometry(c.num_layers, c.num_q_heads, c.num_kv_heads, c.head_dim, c.hidden_size)

    @property
    def code0_vocab_size(self) -> int:
        return self._num_rows  # the repetition history is over the sliced head's rows, all seven positions

    # ---- text and prompt -----------------------------------------------------------------------------------

    def tokenize(self, text: str) -> tuple[list[int], list[tuple[int, int]]]:
        encoding = self.tokenizer.encode(text, add_special_tokens=False)
        return list(encoding.ids), [tuple(span) for span in encoding.offsets]

    def build_prompt(self, request: Request) -> PromptTokens:
        """The reference's prompt ids (tokens.encode_prompt), the "{voice}: {text}" string tokenized whole as
        the reference does (not the voice and the feed's tokens joined: BPE merges across the seam)."""
        ids = tokens.encode_prompt(lambda s: self.tokenizer.encode(s, add_special_tokens=True).ids,
                                   request.feed.text, request.voice)
        return PromptTokens(tuple(ids), (-1,) * len(ids), num_text_tokens_used=len(request.feed.token_ids))

    # ---- LM ------------------------------------------------------------------------------------------------

    def embed_prompt(self, text_ids: torch.Tensor, codec_ids: torch.Tensor) -> torch.Tensor:
        return self.lm.embed(text_ids.clamp(min=0)) * (text_ids >= 0)[:, None].to(self.lm.model.embed_tokens.weight.dtype)

    def embed_step(self, text_ids: torch.Tensor, prev_codes: torch.Tensor) -> torch.Tensor:
        """Sub-step 0: the previous frame's last token."""
        return self.lm.embed(prev_codes[:, -1] + tokens.CUSTOM_TOKEN_BASE)

    def embed_substep(self, text_ids: torch.Tensor, prev_codes: torch.Tensor, sub: torch.Tensor) -> torch.Tensor:
        """Sub-step j: the token sub-step j - 1 wrote (j = 0: the previous frame's position 6)."""
        column = (sub - 1) % tokens.TOKENS_PER_FRAME
        row = prev_codes.gather(1, column[:, None])[:, 0]
        return self.lm.embed(row + tokens.CUSTOM_TOKEN_BASE)

    def lm_forward(self, x: torch.Tensor, positions: torch.Tensor, attn) -> torch.Tensor:
        return self.lm.forward_paged(x, positions, attn)

    def sample_first_code(self, hidden: torch.Tensor, sampling: SamplingTensors, history: torch.Tensor) -> torch.Tensor:
        return self.sample_code(hidden, sampling, history, torch.zeros(hidden.shape[0], dtype=torch.int64,
                                                                       device=hidden.device))

    def sample_code(self, hidden: torch.Tensor, sampling: SamplingTensors, history: torch.Tensor,
                    sub: torch.Tensor) -> torch.Tensor:
        logits = self.lm.audio_logits(hidden).float()
        logits = apply_repetition_penalty(logits, history, sampling.repetition_penalty)
        allow_stop = sampling.allow_stop & (sub == 0)
        if self.random_weights:
            allow_stop = torch.zeros_like(allow_stop)
        allowed = tokens.audio_row_mask(sub, self._num_rows, allow_stop)
        row = sample(logits.masked_fill(~allowed, float("-inf")), sampling)
        end_of_ai = tokens.END_OF_AI - tokens.CUSTOM_TOKEN_BASE
        return torch.where(row == end_of_ai, torch.full_like(row, self.eos_row), row)

    # ---- codec ---------------------------------------------------------------------------------------------

    def new_codec_state(self, num_slots: int, device: torch.device, dtype: torch.dtype) -> dict[str, torch.Tensor]:
        return self.streamer.new_state(num_slots, device, dtype)

    def reset_codec_slots(self, state: dict[str, torch.Tensor], slots: torch.Tensor) -> None:
        self.streamer.reset_slots(state, slots)

    def decode_chunk(self, codes: torch.Tensor, slots: torch.Tensor, state: dict[str, torch.Tensor]) -> torch.Tensor:
        """[B, F, 7] frame rows -> [B, F * 2048]: the next samples of each slot's stream (lagging; see the
        module docstring)."""
        return self.streamer.decode_stream(tokens.frame_codes(codes)[0], slots, state).float()

    def finish_codec(self, slots: torch.Tensor, state: dict[str, torch.Tensor]) -> torch.Tensor:
        return self.streamer.finish(slots, state).float()

    def decode_offline(self, codes: torch.Tensor) -> torch.Tensor:
        """Whole sequences of frame rows [B, T, 7] -> [B, T * 2048]."""
        return self.codec.decode(tokens.frames_to_codebooks(tokens.frame_codes(codes)[0]))[:, 0].float()


def read_marker(model_dir: Path) -> dict:
    path = model_dir / MARKER
    if not path.is_file():
        return {}
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise CheckpointError(f"cannot read {path}: {exc}") from None


def load_tokenizer(model_dir: Path):
    try:
        from tokenizers import Tokenizer  # noqa: PLC0415
    except ImportError:
        raise CheckpointError("Orpheus needs the `tokenizers` package for its tokenizer.json "
                              "(pip install 'voxrt-gateway[orpheus]')") from None
    try:
        return Tokenizer.from_file(str(model_dir / "tokenizer.json"))
    except Exception as exc:  # noqa: BLE001 (the library's own error types)
        raise CheckpointError(f"cannot read {model_dir / 'tokenizer.json'}: {exc}") from None


def load_program(model_dir: Path, snac: str | Path | None = None, **kwargs: Any) -> OrpheusProgram:
    """The program from a directory in the released layout (checkpoint.py) and its SNAC codec."""
    checkpoint.check_lm_dir(model_dir, need_tokenizer=True)
    marker = read_marker(model_dir)
    tokenizer = load_tokenizer(model_dir)
    lm = load_lm(model_dir, dtype=torch.float32)
    codec = load_snac(checkpoint.snac_dir(model_dir, snac))
    random_weights = bool(marker.get("random_weights", False))
    if random_weights:
        log.warning("orpheus: %s holds RANDOM weights (%s): its audio is noise, and it ends by a length rule",
                    model_dir, MARKER)
    return OrpheusProgram(lm, codec, tokenizer, random_weights=random_weights,
                          frames_per_text_token=marker.get("frames_per_text_token"), **kwargs)


def build_orpheus(checkpoint_name: str | None) -> OrpheusProgram:
    """--checkpoint: a directory in the released layout, or a repo id in the local Hugging Face cache (default
    canopylabs/orpheus-3b-0.1-ft). The codec: snac/ inside it, else hubertsiuzdak/snac_24khz in the cache."""
    return load_program(checkpoint.resolve(checkpoint_name or checkpoint.LM_REPO))
