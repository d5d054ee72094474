"""Streaming SNAC with carried state (snac_exact.ExactStreamer) equals the whole-sequence decode: requests of
different lengths batched over shuffled slots (with a padding row on a scratch slot), one or two frames a
call, each finished when it ends, against `SNAC.decode` of the `snac` package (noise off on both sides) and
our own whole decode; also at the released 24 kHz size (random weights)."""

from __future__ import annotations

import random

import pytest
import torch
from snac import SNAC

from orpheus_tiny import silence_noise
from voxrt.models.orpheus import tokens as T
from voxrt.models.orpheus.make_checkpoint import SNAC_24KHZ_CONFIG
from voxrt.models.orpheus.snac import SnacConfig, SnacDecoder, load_snac
from voxrt.models.orpheus.snac_exact import ExactStreamer

SPF = 2048
ATOL = 1e-5  # float32; what we see is <= 4e-7 on audio of magnitude ~0.3 (convs over chunks round differently)


def random_frames(num_frames: int, rng: random.Random) -> torch.Tensor:
    return torch.tensor([[rng.randrange(4096) for _ in range(7)] for _ in range(num_frames)])


@pytest.fixture(scope="module")
def models(snac_ckpt):
    directory, _ = snac_ckpt
    ref = SNAC.from_pretrained(str(directory))
    silence_noise(ref)
    return ref, load_snac(directory, noise="off")


def stream_all(streamer, streams: dict[int, torch.Tensor], num_rows: int, frames_per_call: int):
    """Each stream fed frames_per_call frames a call, batched with a padding row on the scratch slot (a last
    shorter piece goes alone), and finished right after its last frame. -> ({slot: output}, state)."""
    state = streamer.new_state(num_rows, "cpu")
    scratch = num_rows - 1
    out: dict[int, list[torch.Tensor]] = {slot: [] for slot in streams}
    fed = dict.fromkeys(streams, 0)
    finished: set[int] = set()
    while len(finished) < len(streams):
        full = [s for s, f in streams.items() if fed[s] + frames_per_call <= len(f)]
        groups = [(full, frames_per_call)] if full else []
        groups += [([s], len(f) - fed[s]) for s, f in streams.items() if s not in full and fed[s] < len(f)]
        for slots, n in groups:
            padding = [torch.zeros(n, 7, dtype=torch.int64)]
            codes = torch.stack([streams[s][fed[s] : fed[s] + n] for s in slots] + padding)
            audio = streamer.decode_stream(codes, torch.tensor(slots + [scratch]), state)
            assert audio.shape == (len(slots) + 1, n * SPF)
            for row, s in enumerate(slots):
                out[s].append(audio[row])
                fed[s] += n
        ended = [s for s in streams if fed[s] == len(streams[s]) and s not in finished]
        if ended:
            tails = streamer.finish(torch.tensor(ended), state)
            assert tails.shape == (len(ended), streamer.lookahead_samples)
            for row, s in enumerate(ended):
                out[s].append(tails[row])
            finished.update(ended)
    return {s: torch.cat(chunks) for s, chunks in out.items()}, state


@pytest.mark.parametrize("frames_per_call", [1, 2])
def test_streaming_equals_the_whole_decode(models, frames_per_call):
    ref, ours = models
    streamer = ExactStreamer(ours)
    assert (streamer.lookahead_samples, streamer.flush_frames) == (4757, 3)
    rng = random.Random(frames_per_call)
    streams = {3: random_frames(9, rng), 0: random_frames(1, rng), 4: random_frames(5, rng), 1: random_frames(2, rng)}
    lengths = {s: len(f) for s, f in streams.items()}
    outputs, state = stream_all(streamer, streams, num_rows=6, frames_per_call=frames_per_call)
    for slot, frames in streams.items():
        output = outputs[slot]
        assert output.shape == ((lengths[slot]) * SPF + streamer.lookahead_samples,)
        assert not output[: streamer.lookahead_samples].any()  # the lag: zeros to drop
        audio = output[streamer.lookahead_samples :]
        codes = T.frames_to_codebooks(frames[None])
        with torch.no_grad():
            theirs = ref.decode(codes)[0, 0]
        torch.testing.assert_close(audio, theirs, rtol=0, atol=ATOL)
        torch.testing.assert_close(audio, ours.decode(codes)[0, 0], rtol=0, atol=ATOL)
    assert state["frames"][[3, 0, 4, 1]].tolist() == [9 + 3, 1 + 3, 5 + 3, 2 + 3]  # + the flush frames


def test_first_audio_after_three_frames_is_final(models):
    """After 3 frames the stream holds 3 * 2048 - 4757 = 1387 samples of audio, already equal to the whole
    decode of the finished sequence (the window rule releases none before the 4th frame)."""
    _, ours = models
    streamer = ExactStreamer(ours)
    frames = random_frames(6, random.Random(5))
    state = streamer.new_state(1, "cpu")
    early = streamer.decode_stream(frames[None, :3], torch.tensor([0]), state)[0, streamer.lookahead_samples :]
    assert early.shape == (3 * SPF - 4757,)
    whole = ours.decode(T.frames_to_codebooks(frames[None]))[0, 0]
    torch.testing.assert_close(early, whole[: early.shape[0]], rtol=0, atol=ATOL)


def test_reset_slot_is_a_fresh_request(models):
    _, ours = models
    streamer = ExactStreamer(ours)
    rng = random.Random(6)
    a, b = random_frames(4, rng), random_frames(4, rng)
    state = streamer.new_state(2, "cpu")
    streamer.decode_stream(a[None], torch.tensor([0]), state)
    streamer.finish(torch.tensor([0]), state)
    streamer.reset_slots(state, torch.tensor([0]))
    again = streamer.decode_stream(b[None], torch.tensor([0]), state)
    fresh = streamer.decode_stream(b[None], torch.tensor([1]), state)
    assert torch.equal(again, fresh)
    assert state["end"][0] == state["end"][1]  # no end known after the reset


def test_noise_streams_too_and_unsupported_decoders_are_refused(models):
    _, ours = models
    frames = random_frames(3, random.Random(7))
    streamer = ExactStreamer(ours)
    ours.set_noise("random")
    try:
        torch.manual_seed(0)
        noisy = streamer.decode_stream(frames[None], torch.tensor([0]), streamer.new_state(1, "cpu"))
    finally:
        ours.set_noise("off")
    quiet = streamer.decode_stream(frames[None], torch.tensor([0]), streamer.new_state(1, "cpu"))
    assert noisy.shape == quiet.shape and not torch.equal(noisy, quiet)
    unfolded = SnacDecoder(SnacConfig.from_dict(SNAC_24KHZ_CONFIG | {"decoder_dim": 64}))
    with pytest.raises(ValueError, match="fold the weight norm"):
        ExactStreamer(unfolded)


def test_released_size_streams_equal_to_the_whole_decode():
    torch.manual_seed(0)
    model = SnacDecoder(SnacConfig.from_dict(SNAC_24KHZ_CONFIG), noise="off")
    model.fold_weight_norm()
    streamer = ExactStreamer(model)
    frames = random_frames(4, random.Random(8))
    state = streamer.new_state(1, "cpu")
    parts = [streamer.decode_stream(frames[None, i : i + 2], torch.tensor([0]), state) for i in (0, 2)]
    parts.append(streamer.finish(torch.tensor([0]), state))
    audio = torch.cat(parts, dim=-1)[0, streamer.lookahead_samples :]
    whole = model.decode(T.frames_to_codebooks(frames[None]))[0, 0]
    torch.testing.assert_close(audio, whole, rtol=0, atol=ATOL)
