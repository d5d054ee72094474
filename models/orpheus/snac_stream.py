"""Streaming SNAC decode by the Orpheus reference streamer's rule, batched across requests with per-slot state.

The rule (canopyai/Orpheus-TTS orpheus_tts/decoder.py, `tokens_decoder` and `convert_to_audio`): once a
response has 4 whole frames, every new frame decodes the window of the last 4 frames (28 tokens) and keeps
samples 2048..4096, the window's second frame. So the frame received at step m (m >= 3, counted from 0)
releases frame m - 2's audio; frame 0 is never released, and neither are the last two frames (the reference
stops at end-of-speech). `decode_tail` is our addition: at the end it releases those two from the last window
(samples 4096..8192), so no speech is cut off; leave it out to match the reference exactly.

Why this rule and not a causal state. The decoder is not causal: each conv pads both sides, and one latent
frame reaches 4,756 samples (2.3 frames of 2048) either way (measured: tests/models/orpheus). A window keeps
only 2048 samples of left and 4096 of right context around the frame it releases, so its audio differs
from the whole-sequence decode near every frame edge (with random weights ~1% RMS; the first released
frame, which sees the same left edge as the whole decode, is nearly equal). snac_exact.ExactStreamer carries
every layer's context instead and holds the output back by 4,757 samples: equal to the whole decode, each
frame decoded once, first audio after 3 frames. This rule stays for parity with the reference's output.

State per slot (device tensors, one row each; `new_state` adds no scratch row, the caller sizes it):
`window` [S, 4, 7] the last 4 frames' codes in token order, `frames` [S] frames seen. `decode_stream` gathers
the batch's rows, decodes one window per new frame, and scatters the advanced rows back: shapes depend only
on (B, F), nothing synchronizes with the host, so it can be captured in a CUDA graph. Slots in one call must be
distinct (padding rows may share one scratch slot: what lands there is garbage by design).
"""

from __future__ import annotations

import torch

from voxrt.models.orpheus.snac import SnacDecoder
from voxrt.models.orpheus.tokens import TOKENS_PER_FRAME, frames_to_codebooks

WINDOW_FRAMES = 4  # frames per decoded window (28 tokens)
KEPT_FRAME = 1  # the window's frame whose samples are released (2048..4096)
WINDOW_KEY, FRAMES_KEY = "window", "frames"


class WindowStreamer:
    """The reference streamer over a `SnacDecoder` whose codebooks are Orpheus's (strides 4, 2, 1)."""

    def __init__(self, decoder: SnacDecoder) -> None:
        if tuple(decoder.cfg.vq_strides) != (4, 2, 1):
            raise ValueError(f"Orpheus frames need SNAC vq_strides (4, 2, 1), got {decoder.cfg.vq_strides}")
        self.decoder = decoder
        self.samples_per_frame = decoder.cfg.vq_strides[0] * decoder.cfg.samples_per_latent_frame  # 2048

    def new_state(self, num_rows: int, device: torch.device | str) -> dict[str, torch.Tensor]:
        return {WINDOW_KEY: torch.zeros(num_rows, WINDOW_FRAMES, TOKENS_PER_FRAME, dtype=torch.int64, device=device),
                FRAMES_KEY: torch.zeros(num_rows, dtype=torch.int64, device=device)}

    def reset_slots(self, state: dict[str, torch.Tensor], slots: torch.Tensor) -> None:
        for value in state.values():
            value.index_fill_(0, slots, 0)

    def _decode_windows(self, windows: torch.Tensor) -> torch.Tensor:
        """[N, 4, 7] codes -> [N, 4 * 2048] audio."""
        return self.decoder.decode(frames_to_codebooks(windows))[:, 0]

    @torch.no_grad()
    def decode_stream(self, codes: torch.Tensor, slots: torch.Tensor, state: dict[str, torch.Tensor]
                      ) -> tuple[torch.Tensor, torch.Tensor]:
        """The next F frames of B requests, codes [B, F, 7] (tokens.frame_codes), slots [B] -> (audio
        [B, F * 2048], is_valid [B, F]). Column f of a row holds the audio the reference releases when that
        frame arrives (frame seen + f - 2), or zeros where it releases nothing (fewer than 4 frames so far)."""
        batch, num_frames, _ = codes.shape
        spf = self.samples_per_frame
        window = state[WINDOW_KEY].index_select(0, slots)  # [B, 4, 7]
        seen = state[FRAMES_KEY].index_select(0, slots)  # [B]
        frames = torch.cat([window[:, 1:], codes.to(window.dtype)], dim=1)  # [B, 3 + F, 7]
        windows = frames.unfold(1, WINDOW_FRAMES, 1).transpose(-1, -2)  # [B, F, 4, 7]: window f ends at frame f
        audio = self._decode_windows(windows.reshape(batch * num_frames, WINDOW_FRAMES, TOKENS_PER_FRAME))
        kept = audio[:, KEPT_FRAME * spf : (KEPT_FRAME + 1) * spf].reshape(batch, num_frames, spf)
        count = seen[:, None] + torch.arange(1, num_frames + 1, device=seen.device)  # [B, F] frames after each
        is_valid = count >= WINDOW_FRAMES
        kept = kept.masked_fill(~is_valid[..., None], 0.0)
        state[WINDOW_KEY].index_copy_(0, slots, frames[:, -WINDOW_FRAMES:])
        state[FRAMES_KEY].index_copy_(0, slots, seen + num_frames)
        return kept.reshape(batch, num_frames * spf), is_valid

    @torch.no_grad()
    def decode_tail(self, slots: torch.Tensor, state: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        """At the end of B responses: the last two frames' audio from the last window, [B, 2 * 2048], and
        is_valid [B] (False, zeros, where fewer than 4 frames came: the reference releases nothing then)."""
        spf = self.samples_per_frame
        window = state[WINDOW_KEY].index_select(0, slots)
        is_valid = state[FRAMES_KEY].index_select(0, slots) >= WINDOW_FRAMES
        tail = self._decode_windows(window)[:, (KEPT_FRAME + 1) * spf :]
        return tail.masked_fill(~is_valid[:, None], 0.0), is_valid
