"""Streaming SNAC by the reference streamer's rule (snac_stream.WindowStreamer), batched across requests with
per-slot state, against the rule itself: canopyai/Orpheus-TTS orpheus_tts/decoder.py (`tokens_decoder`,
`convert_to_audio`) run on the token stream with the `snac` package's model. Noise is off on both sides (the
reference draws fresh noise per window; see snac.py). Also: what the rule equals relative to whole decode
(not equal: the decoder reaches further than the window's context)."""

from __future__ import annotations

import random

import pytest
import torch
from snac import SNAC

from orpheus_tiny import silence_noise
from voxrt.models.orpheus import tokens as T
from voxrt.models.orpheus.make_checkpoint import SNAC_24KHZ_CONFIG
from voxrt.models.orpheus.snac import SnacConfig, SnacDecoder, load_snac
from voxrt.models.orpheus.snac_stream import WindowStreamer

SPF = 2048


def reference_stream(model, token_strings: list[str]) -> list[torch.Tensor]:
    """decoder.py's `tokens_decoder` over `convert_to_audio`, returning the float chunks before int16."""
    chunks, buffer, count = [], [], 0
    for token_string in token_strings:
        last = token_string.rfind("<custom_token_")
        token = int(token_string[last + 14 : -1]) - 10 - ((count % 7) * 4096)
        if token > 0:
            buffer.append(token)
            count += 1
            if count % 7 == 0 and count > 27:
                frame = buffer[-28:]
                codes = [[], [], []]
                for i in range(0, 28, 7):
                    codes[0].append(frame[i])
                    codes[1] += [frame[i + 1], frame[i + 4]]
                    codes[2] += [frame[i + 2], frame[i + 3], frame[i + 5], frame[i + 6]]
                codes = [torch.tensor([c], dtype=torch.int32) for c in codes]
                if any(torch.any(c < 0) or torch.any(c > 4096) for c in codes):
                    continue
                with torch.inference_mode():
                    audio_hat = model.decode(codes)
                chunks.append(audio_hat[0, 0, 2048:4096].clone())
    return chunks


def random_frames(num_frames: int, rng: random.Random) -> torch.Tensor:
    """[F, 7] frame codes, none 0 (the reference drops code 0: see test_orpheus_tokens)."""
    return torch.tensor([[rng.randrange(1, 4096) for _ in range(7)] for _ in range(num_frames)])


def as_token_strings(frames: torch.Tensor) -> list[str]:
    offsets = 10 + 4096 * torch.arange(7)
    return [f"<custom_token_{n}>" for n in (frames + offsets).flatten().tolist()]


@pytest.fixture(scope="module")
def models(snac_ckpt):
    directory, _ = snac_ckpt
    ref = SNAC.from_pretrained(str(directory))
    silence_noise(ref)
    return ref, load_snac(directory, noise="off")


def run_stream(streamer, streams: dict[int, torch.Tensor], num_rows: int, frames_per_call: int, pad: bool = True):
    """Feeds every stream frames_per_call frames per call, all active ones batched (plus, with `pad`, one
    padding row on the scratch slot, the last row); returns {slot: (audio, is_valid)} concatenated."""
    state = streamer.new_state(num_rows, "cpu")
    scratch = num_rows - 1
    out = {slot: ([], []) for slot in streams}
    longest = max(len(f) for f in streams.values())
    for start in range(0, longest, frames_per_call):
        active = [s for s, f in streams.items() if start + frames_per_call <= len(f)]
        if not active:
            break
        padding = [torch.zeros(frames_per_call, 7, dtype=torch.int64)] if pad else []
        codes = torch.stack([streams[s][start : start + frames_per_call] for s in active] + padding)
        audio, is_valid = streamer.decode_stream(codes, torch.tensor(active + [scratch] * pad), state)
        rows = len(active) + pad
        assert audio.shape == (rows, frames_per_call * SPF) and is_valid.shape == (rows, frames_per_call)
        for row, slot in enumerate(active):
            out[slot][0].append(audio[row])
            out[slot][1].append(is_valid[row])
    return {s: (torch.cat(a), torch.cat(v)) for s, (a, v) in out.items()}, state


def test_streaming_equals_the_reference_streamer(models):
    ref, ours = models
    rng = random.Random(0)
    streams = {4: random_frames(9, rng), 1: random_frames(6, rng), 2: random_frames(3, rng)}
    results, state = run_stream(WindowStreamer(ours), streams, num_rows=6, frames_per_call=1)
    for slot, frames in streams.items():
        expected = reference_stream(ref, as_token_strings(frames))
        audio, is_valid = results[slot]
        # the reference releases a chunk from the 4th frame on: frame m releases frame m - 2's audio
        assert is_valid.tolist() == [m >= 3 for m in range(len(frames))]
        assert len(expected) == max(0, len(frames) - 3)
        released = audio.view(-1, SPF)[is_valid]
        if expected:
            torch.testing.assert_close(released, torch.stack(expected), rtol=0, atol=1e-6)
        assert not audio.view(-1, SPF)[~is_valid].any()  # nothing released: zeros
    assert state["frames"][[4, 1, 2]].tolist() == [9, 6, 3]


def test_streaming_is_the_rule_exactly_and_chunks_do_not_matter(models):
    """Bit for bit: one request, one frame a call, against the rule written out on our decoder (window
    [m-3, m], samples 2048..4096, one window a call). Across batch compositions float32 convs may round
    differently (~2e-7 seen), hence the tolerance when requests are batched or frames come two a call."""
    _, ours = models
    streamer = WindowStreamer(ours)
    rng = random.Random(1)
    frames = random_frames(8, rng)
    alone, _ = run_stream(streamer, {0: frames}, num_rows=1, frames_per_call=1, pad=False)
    kept = torch.cat([ours.decode(T.frames_to_codebooks(frames[None, m - 3 : m + 1]))[:, 0, SPF : 2 * SPF]
                      for m in range(3, len(frames))])
    assert torch.equal(alone[0][0].view(-1, SPF)[3:], kept)
    streams = {0: frames, 3: random_frames(8, rng)}
    one, _ = run_stream(streamer, streams, num_rows=5, frames_per_call=1)
    two, _ = run_stream(streamer, streams, num_rows=5, frames_per_call=2)
    torch.testing.assert_close(one[0][0], alone[0][0], rtol=0, atol=1e-6)
    for slot in streams:
        assert torch.equal(one[slot][1], two[slot][1])
        torch.testing.assert_close(one[slot][0], two[slot][0], rtol=0, atol=1e-6)


def test_tail_releases_the_last_two_frames_and_slots_reset(models):
    _, ours = models
    streamer = WindowStreamer(ours)
    rng = random.Random(2)
    frames = random_frames(5, rng)
    short = random_frames(2, rng)
    state = streamer.new_state(3, "cpu")
    streamer.decode_stream(frames[None], torch.tensor([0]), state)
    streamer.decode_stream(short[None], torch.tensor([1]), state)
    tail, is_valid = streamer.decode_tail(torch.tensor([0, 1]), state)
    assert is_valid.tolist() == [True, False] and not tail[1].any()
    last_window = ours.decode(T.frames_to_codebooks(frames[None, -4:]))[0, 0]
    torch.testing.assert_close(tail[0], last_window[2 * SPF :], rtol=0, atol=1e-6)
    streamer.reset_slots(state, torch.tensor([0]))
    assert not state["window"][0].any() and state["frames"].tolist() == [0, 2, 0]
    again, _ = streamer.decode_stream(frames[None], torch.tensor([0]), state)
    first, _ = streamer.decode_stream(frames[None], torch.tensor([2]), state)
    assert torch.equal(again, first)  # a reset slot is a fresh request


def test_the_rule_is_not_whole_decode(models):
    """Every released frame differs from the whole-sequence decode: a window keeps 2048 samples of left and
    4096 of right context, and the decoder reaches further (next test)."""
    _, ours = models
    frames = random_frames(10, random.Random(3))
    results, _ = run_stream(WindowStreamer(ours), {0: frames}, num_rows=2, frames_per_call=1)
    audio, is_valid = results[0]
    whole = ours.decode(T.frames_to_codebooks(frames[None]))[0, 0].view(-1, SPF)
    released = audio.view(-1, SPF)[is_valid]  # frames 1 .. 7
    diff = (released - whole[1:8]).abs().amax(dim=1)
    assert (diff > 1e-5).all(), diff


def test_the_released_decoder_reaches_beyond_the_window():
    """Which samples one latent frame moves in the released 24 kHz decoder (random weights: reach is a property
    of the layers): up to 4,757 each way (SnacConfig.reach_samples; the farthest few samples move by less than
    float32 resolves), more than the 2048 left and 4096 right the window keeps."""
    torch.manual_seed(0)
    cfg = SnacConfig.from_dict(SNAC_24KHZ_CONFIG)
    assert cfg.reach_samples == 4757
    model = SnacDecoder(cfg, noise="off")
    model.fold_weight_norm()
    num_latent, t = 24, 12  # 6 frames; perturb latent frame 12's finest code
    codes = [torch.randint(0, 4096, (1, n)) for n in (num_latent // 4, num_latent // 2, num_latent)]
    base = model.decode(codes)[0, 0]
    codes[2][0, t] = (codes[2][0, t] + 1) % 4096
    changed = ((model.decode(codes)[0, 0] - base).abs() > 0).nonzero().flatten()
    left, right = t * 512 - int(changed.min()), int(changed.max()) - ((t + 1) * 512 - 1)
    assert 4096 < left <= 4757 and 4096 < right <= 4757, (left, right)
