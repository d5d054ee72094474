"""Orpheus's prompt and token -> code rules against the reference's (canopyai/Orpheus-TTS orpheus_tts:
engine_class.py `_format_prompt`, decoder.py `turn_token_into_id` and `convert_to_audio`, the fine-tuning
data's frame layout), and malformed streams."""

from __future__ import annotations

import random

import pytest
import torch

from voxrt.models.orpheus import tokens as T


def reference_turn_token_into_id(token_string: str, index: int):
    """decoder.py `turn_token_into_id`, on the token's text."""
    token_string = token_string.strip()
    last = token_string.rfind("<custom_token_")
    if last == -1:
        return None
    last_token = token_string[last:]
    if last_token.startswith("<custom_token_") and last_token.endswith(">"):
        try:
            return int(last_token[14:-1]) - 10 - ((index % 7) * 4096)
        except ValueError:
            return None
    return None


def reference_codebooks(frame: list[int]) -> list[list[int]]:
    """decoder.py `convert_to_audio`'s assembly of codes_0, codes_1, codes_2 from 7-code frames."""
    c0, c1, c2 = [], [], []
    for i in range(0, len(frame) // 7 * 7, 7):
        c0.append(frame[i])
        c1 += [frame[i + 1], frame[i + 4]]
        c2 += [frame[i + 2], frame[i + 3], frame[i + 5], frame[i + 6]]
    return [c0, c1, c2]


def training_tokens(c0: list[int], c1: list[int], c2: list[int]) -> list[int]:
    """The fine-tuning data's interleave (SNAC codes -> ids), the inverse of the reference decoder."""
    ids = []
    for i in range(len(c0)):
        ids += [c0[i] + 128266, c1[2 * i] + 128266 + 4096, c2[4 * i] + 128266 + 2 * 4096,
                c2[4 * i + 1] + 128266 + 3 * 4096, c1[2 * i + 1] + 128266 + 4 * 4096,
                c2[4 * i + 2] + 128266 + 5 * 4096, c2[4 * i + 3] + 128266 + 6 * 4096]
    return ids


def random_codes(num_frames: int, seed: int = 0) -> list[list[int]]:
    rng = random.Random(seed)
    return [[rng.randrange(4096) for _ in range(n * num_frames)] for n in (1, 2, 4)]


def test_prompt_is_the_references_ids():
    class FakeLlamaTokenizer:  # stands in for the Llama-3 tokenizer: BOS first, as its post-processor writes
        def __call__(self, text):
            return {"input_ids": [128000] + [ord(c) for c in text]}

    tok = FakeLlamaTokenizer()
    ids = T.encode_prompt(lambda s: tok(s)["input_ids"], "Hi there", "tara")
    # _format_prompt: [[128259]] + tokenizer("tara: Hi there").input_ids + [[128009, 128260, 128261, 128257]]
    assert ids == [128259] + tok("tara: Hi there")["input_ids"] + [128009, 128260, 128261, 128257]
    assert T.encode_prompt(lambda s: tok(s)["input_ids"], "Hi", None) == [128259, 128000, 72, 105, 128009, 128260,
                                                                          128261, 128257]
    assert T.DEFAULT_VOICE in T.VOICES and len(T.VOICES) == 8
    with pytest.raises(ValueError, match="must start with <\\|begin_of_text\\|>"):
        T.prompt_ids([72, 105])


def test_special_ids_are_custom_tokens_as_the_tokenizer_names_them():
    # <custom_token_N> is id 128256 + N; the specials are custom tokens 1..7
    names = {T.START_OF_SPEECH: 1, T.END_OF_SPEECH: 2, T.START_OF_HUMAN: 3, T.END_OF_HUMAN: 4, T.START_OF_AI: 5,
             T.END_OF_AI: 6, T.PAD: 7}
    for token_id, n in names.items():
        assert token_id == T.CUSTOM_TOKEN_BASE + n
    assert T.AUDIO_TOKENS_START == 128266 and T.AUDIO_TOKENS_START + T.NUM_AUDIO_TOKENS == 156938


def test_codes_equal_the_reference_decoder_on_a_valid_stream():
    c0, c1, c2 = random_codes(6)
    ids = training_tokens(c0, c1, c2)
    frames, stopped = T.parse_response(ids + [T.END_OF_SPEECH, 128262])
    assert stopped and len(frames) == 6
    # the reference: per token text, index = count of accepted tokens
    ref = [reference_turn_token_into_id(f"<custom_token_{i - 128256}>", k) for k, i in enumerate(ids)]
    assert [c for f in frames for c in f] == ref
    assert T.split_codebooks(frames) == reference_codebooks(ref) == [c0, c1, c2]
    # the same on the device: frame_codes on sliced-head indices, then frames_to_codebooks
    index = torch.tensor(ids).view(1, 6, 7) - T.CUSTOM_TOKEN_BASE
    codes, is_valid = T.frame_codes(index)
    assert is_valid.all() and codes.flatten().tolist() == ref
    books = T.frames_to_codebooks(codes)
    assert [b[0].tolist() for b in books] == [c0, c1, c2]


def test_stop_rules_and_the_partial_last_frame():
    c0, c1, c2 = random_codes(2, seed=1)
    ids = training_tokens(c0, c1, c2)
    frames, stopped = T.parse_response(ids[:11])  # no stop yet: 1 whole frame, 4 tokens pending
    assert len(frames) == 1 and not stopped
    frames, stopped = T.parse_response(ids[:11] + [T.END_OF_SPEECH])  # the partial frame is dropped
    assert len(frames) == 1 and stopped
    frames, stopped = T.parse_response(ids + [T.END_OF_AI, 5, 6])  # end_of_ai stops too; what follows is ignored
    assert len(frames) == 2 and stopped
    assert T.parse_response([T.END_OF_SPEECH]) == ([], True)


@pytest.mark.parametrize("index, token_id, what", [
    (0, 128266 + 4096, "position 0 takes ids 128266..132361"),  # position 1's token at position 0
    (1, 128266, "position 1 takes ids 132362..136457"),  # position 0's token at position 1
    (6, 128266 + 7 * 4096, "position 6 takes ids 152842..156937"),  # past the last audio row
    (3, 1000, r"frame 0, position 3\) is 1000"),  # a text token
    (7, T.START_OF_SPEECH, r"audio token 7 \(frame 1, position 0\) is 128257"),  # a special other than stop
])
def test_malformed_tokens_name_position_and_range(index, token_id, what):
    with pytest.raises(T.AudioTokenError, match=what):
        T.token_to_code(token_id, index)


def test_malformed_stream_raises_where_the_reference_would_drop_silently():
    c0, c1, c2 = random_codes(2, seed=2)
    ids = training_tokens(c0, c1, c2)
    wrong = ids[:3] + [ids[4]] + ids[4:]  # position 3 holds position 4's token
    with pytest.raises(T.AudioTokenError, match="audio token 3"):
        T.parse_response(wrong)
    # the reference streamer: code 0 comes out as 0 and is dropped (`if token > 0`), shifting every later
    # position; we keep it
    zero_first = training_tokens([0] + c0[1:], c1, c2)
    frames, _ = T.parse_response(zero_first)
    assert frames[0][0] == 0
    assert reference_turn_token_into_id(f"<custom_token_{zero_first[0] - 128256}>", 0) == 0
    with pytest.raises(T.AudioTokenError, match="a frame has 7 codes"):
        T.split_codebooks([[1, 2, 3]])


def test_device_validity_flags_bad_frames_without_raising():
    c0, c1, c2 = random_codes(3, seed=3)
    index = torch.tensor(training_tokens(c0, c1, c2)).view(3, 7) - T.CUSTOM_TOKEN_BASE
    index[1, 4] -= 4096  # position 3's row at position 4
    index[2, 6] = T.END_OF_SPEECH - T.CUSTOM_TOKEN_BASE
    codes, is_valid = T.frame_codes(index)
    assert is_valid.tolist() == [True, False, False]
    assert int(codes.min()) >= 0 and int(codes.max()) <= 4095  # clamped: a gather can never go out of range


def test_audio_row_mask_allows_the_positions_rows_and_stop():
    num_rows = 156940 - T.CUSTOM_TOKEN_BASE
    position = torch.tensor([0, 3, 6])
    mask = T.audio_row_mask(position, num_rows, allow_stop=torch.tensor([True, True, False]))
    for row, p in enumerate(position.tolist()):
        allowed = set(range(10 + 4096 * p, 10 + 4096 * (p + 1)))
        if row < 2:
            allowed |= {T.END_OF_SPEECH - T.CUSTOM_TOKEN_BASE, T.END_OF_AI - T.CUSTOM_TOKEN_BASE}
        assert set(mask[row].nonzero().flatten().tolist()) == allowed
