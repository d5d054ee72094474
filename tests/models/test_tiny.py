"""The tiny program: deterministic weights, tokenizer spans, streaming codec equal to offline."""

from __future__ import annotations

import torch

from voxrt.models.registry import build_program
from voxrt.models.tiny.program import TinyProgram


def test_weights_are_deterministic_and_do_not_touch_the_global_rng():
    torch.manual_seed(7)
    expected = torch.rand(3)
    torch.manual_seed(7)
    a = TinyProgram()
    after = torch.rand(3)
    b = build_program("tiny")
    assert torch.equal(expected, after)
    for (name, pa), (_, pb) in zip(a.state_dict().items(), b.state_dict().items()):
        assert torch.equal(pa, pb), name


def test_tokenizer_spans_point_into_the_text():
    program = TinyProgram()
    text = "Dr. Smith's  balance\nis $3.50."
    ids, spans = program.tokenize(text)
    assert len(ids) == len(spans) > 0
    assert all(0 <= a < b <= len(text) for a, b in spans)
    assert "".join(text[a:b] for a, b in spans).replace(" ", "").replace("\n", "") == text.replace(" ", "").replace("\n", "")
    assert all(16 <= i < program.cfg.text_vocab_size for i in ids)


def test_streaming_codec_equals_offline_for_any_chunking():
    program = TinyProgram().eval()
    torch.manual_seed(0)
    codes = torch.randint(0, program.cfg.codebook_size, (3, 23, program.num_codebooks))
    with torch.inference_mode():
        whole = program.decode_offline(codes)
        state = program.new_codec_state(5, torch.device("cpu"), torch.float32)
        slots = torch.tensor([4, 0, 2])
        program.reset_codec_slots(state, slots)
        parts, start = [], 0
        for size in [1, 2, 10, 3, 7]:  # crosses the attention window (8 frames) and conv tails
            parts.append(program.decode_chunk(codes[:, start:start + size], slots, state))
            start += size
    streamed = torch.cat(parts, dim=1)
    assert streamed.shape == whole.shape == (3, 23 * program.samples_per_frame)
    torch.testing.assert_close(streamed, whole, rtol=0, atol=1e-5)


def test_depth_generation_fills_all_codebooks_in_range():
    from voxrt.engine.runtime.sampling import SamplingTensors

    program = TinyProgram().eval()
    with torch.inference_mode():
        hidden = torch.randn(4, program.cfg.hidden_size)
        code0 = torch.tensor([1, 2, 3, 4])
        codes = program.generate_depth(hidden, code0, SamplingTensors.empty(4, torch.device("cpu")))
    assert codes.shape == (4, program.num_codebooks)
    assert torch.equal(codes[:, 0], code0)
    assert int(codes.min()) >= 0 and int(codes.max()) < program.cfg.codebook_size
