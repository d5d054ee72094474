"""Orpheus's token vocabulary: the prompt, the `<custom_token_N>` -> SNAC code mapping, and the stop rules.

References (canopyai/Orpheus-TTS): `OrpheusModel._format_prompt` (orpheus_tts_pypi/orpheus_tts/engine_class.py)
builds the prompt; `turn_token_into_id`, `tokens_decoder` and `convert_to_audio` (orpheus_tts/decoder.py) turn
the generated tokens into codes and audio; the fine-tuning data (finetune/, the colab it points to) lays out
one frame as seven tokens. Ids are Llama-3's 128,256 text tokens, then `<custom_token_N>` = 128256 + N:

    custom 0..9    specials: 1 start_of_speech 128257, 2 end_of_speech 128258, 3 start_of_human 128259,
                   4 end_of_human 128260, 5 start_of_ai 128261, 6 end_of_ai 128262, 7 pad 128263
    custom 10..    audio: the k-th audio token of a response (k counted from 0) is code + 10 + 4096 * (k % 7)

Frame layout (the fine-tuning data's order, which `convert_to_audio` undoes): position p of a frame holds a
code of codebook FRAME_LAYOUT[p][0], the FRAME_LAYOUT[p][1]-th of that codebook's codes in the frame:

    p:         0     1     2     3     4     5     6
    codebook:  0     1     2     2     1     2     2        (1 + 2 + 4 codes; SNAC vq_strides 4, 2, 1)
    index:     0     0     0     1     1     2     3

Prompt (the ids `_format_prompt` builds before it decodes them to a string for vLLM):

    start_of_human, tokenizer("{voice}: {text}") (it begins with <|begin_of_text|> 128000),
    end_of_text (<|eot_id|> 128009), end_of_human, start_of_ai, start_of_speech

which is also the training layout (the data adds end_of_speech and end_of_ai after the audio). vLLM re-encodes
the decoded string and so puts a second <|begin_of_text|> in front; we keep the ids as built.

Stop rules. The reference stops on end_of_speech (its realtime example and notebook pass stop id 128258; the
package default, 49158, is no Orpheus token and never fires) and decodes whole frames only: a last partial
frame is dropped. We also stop on end_of_ai, which the training data puts right after end_of_speech.

Malformed streams. The reference streamer drops any token that is not `<custom_token_N>` or whose code comes
out <= 0 (code 0 of every position too: `if token > 0`, a bug), without advancing the position, and skips a
whole 4-frame window when a code is > 4096. We do not copy that: `token_to_code` and `parse_response` raise
`AudioTokenError` naming the position, the token and the range it must lie in; on the device
`frame_codes` returns an `is_valid` flag per frame instead (raising there would need a host sync), and
`audio_row_mask` lets the sampler produce only valid tokens in the first place.
"""

from __future__ import annotations

from typing import Callable, Sequence

import torch

BEGIN_OF_TEXT = 128000  # <|begin_of_text|>, added by the Llama-3 tokenizer
END_OF_TEXT = 128009  # <|eot_id|>
CUSTOM_TOKEN_BASE = 128256  # <custom_token_0>
START_OF_SPEECH = 128257
END_OF_SPEECH = 128258
START_OF_HUMAN = 128259
END_OF_HUMAN = 128260
START_OF_AI = 128261
END_OF_AI = 128262
PAD = 128263
AUDIO_TOKEN_OFFSET = 10  # custom tokens 0..9 are the specials above
AUDIO_TOKENS_START = CUSTOM_TOKEN_BASE + AUDIO_TOKEN_OFFSET  # 128266
CODEBOOK_SIZE = 4096
TOKENS_PER_FRAME = 7
NUM_AUDIO_TOKENS = TOKENS_PER_FRAME * CODEBOOK_SIZE  # 28,672: ids 128266 .. 156937
STOP_TOKEN_IDS = (END_OF_SPEECH, END_OF_AI)
PROMPT_END_IDS = (END_OF_TEXT, END_OF_HUMAN, START_OF_AI, START_OF_SPEECH)

FRAME_LAYOUT = ((0, 0), (1, 0), (2, 0), (2, 1), (1, 1), (2, 2), (2, 3))  # position -> (codebook, index)
CODES_PER_FRAME = (1, 2, 4)  # codebook -> codes per frame

# The eight English voices of canopylabs/orpheus-3b-0.1-ft, in the model card's order of realism.
VOICES = ("tara", "leah", "jess", "leo", "dan", "mia", "zac", "zoe")
DEFAULT_VOICE = "tara"
# Sampling of the reference's realtime example (realtime_streaming_example/main.py); the package's own
# defaults are temperature 0.6, top_p 0.8, repetition_penalty 1.3, max_tokens 1200. The model card: a
# repetition penalty >= 1.1 is required for stable generations.
SAMPLING_DEFAULTS = {"temperature": 0.4, "top_p": 0.9, "repetition_penalty": 1.1, "max_tokens": 2000}


class AudioTokenError(ValueError):
    """A generated token that cannot be the audio token the frame position calls for."""


# ---- prompt -------------------------------------------------------------------------------------------------

def prompt_text(text: str, voice: str | None) -> str:
    """What the reference tokenizes: "{voice}: {text}", or the text alone without a voice."""
    return f"{voice}: {text}" if voice else text


def prompt_ids(text_ids: Sequence[int]) -> list[int]:
    """The prompt around the tokenized "{voice}: {text}" (which starts with <|begin_of_text|>)."""
    if not text_ids or text_ids[0] != BEGIN_OF_TEXT:
        raise ValueError(f"text ids must start with <|begin_of_text|> ({BEGIN_OF_TEXT}), as the Llama-3 tokenizer "
                         f"writes them; got {list(text_ids[:3])}")
    return [START_OF_HUMAN, *text_ids, *PROMPT_END_IDS]


def encode_prompt(encode: Callable[[str], Sequence[int]], text: str, voice: str | None = DEFAULT_VOICE) -> list[int]:
    """`encode`: the checkpoint tokenizer with its special tokens on (`tok(s)["input_ids"]`)."""
    return prompt_ids(list(encode(prompt_text(text, voice))))


# ---- tokens -> codes (host) ---------------------------------------------------------------------------------

def audio_token_range(position: int) -> range:
    """The ids an audio token at frame position `position` (0..6) may take."""
    start = AUDIO_TOKENS_START + CODEBOOK_SIZE * position
    return range(start, start + CODEBOOK_SIZE)


def token_to_code(token_id: int, index: int) -> int:
    """The SNAC code of the `index`-th audio token of a response (`turn_token_into_id`, strict)."""
    position = index % TOKENS_PER_FRAME
    allowed = audio_token_range(position)
    if token_id not in allowed:
        raise AudioTokenError(f"audio token {index} (frame {index // TOKENS_PER_FRAME}, position {position}) is "
                              f"{token_id}; position {position} takes ids {allowed.start}..{allowed.stop - 1} "
                              f"(<custom_token_{allowed.start - CUSTOM_TOKEN_BASE}> .. "
                              f"<custom_token_{allowed.stop - 1 - CUSTOM_TOKEN_BASE}>)")
    return token_id - allowed.start


def parse_response(token_ids: Sequence[int]) -> tuple[list[list[int]], bool]:
    """Generated ids -> (frames of 7 codes in token order, whether a stop token ended them). Ids after a stop
    token are ignored; a partial last frame is dropped (the reference decodes whole frames only); anything
    else that is not the expected audio token raises `AudioTokenError`."""
    codes: list[int] = []
    stopped = False
    for token_id in token_ids:
        if token_id in STOP_TOKEN_IDS:
            stopped = True
            break
        codes.append(token_to_code(token_id, len(codes)))
    whole = len(codes) - len(codes) % TOKENS_PER_FRAME
    return [codes[i : i + TOKENS_PER_FRAME] for i in range(0, whole, TOKENS_PER_FRAME)], stopped


def split_codebooks(frames: Sequence[Sequence[int]]) -> list[list[int]]:
    """Frames of 7 codes -> the three codebooks' code lists, as `convert_to_audio` builds them."""
    books: list[list[int]] = [[], [], []]
    for frame in frames:
        if len(frame) != TOKENS_PER_FRAME:
            raise AudioTokenError(f"a frame has {TOKENS_PER_FRAME} codes, got {len(frame)}")
        for position in (0, 1, 4, 2, 3, 5, 6):  # each codebook's codes in time order (FRAME_LAYOUT)
            books[FRAME_LAYOUT[position][0]].append(frame[position])
    return books


# ---- tokens -> codes (device: static shapes, no host syncs) ------------------------------------------------

def frame_codes(audio_index: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """[..., 7] sliced-head indices N (= token id - 128256) of whole frames -> (codes [..., 7] clamped into
    0..4095, is_valid [...] bool: every token was the audio token its position calls for)."""
    offsets = AUDIO_TOKEN_OFFSET + CODEBOOK_SIZE * torch.arange(TOKENS_PER_FRAME, device=audio_index.device)
    codes = audio_index - offsets
    is_valid = ((codes >= 0) & (codes < CODEBOOK_SIZE)).all(dim=-1)
    return codes.clamp(0, CODEBOOK_SIZE - 1), is_valid


def frames_to_codebooks(codes: torch.Tensor) -> list[torch.Tensor]:
    """[B, F, 7] frame codes -> SNAC's codes [B, F], [B, 2F], [B, 4F] (`SNAC.decode`'s input)."""
    batch, num_frames, _ = codes.shape
    # clamped (a no-op on frame_codes' output): an out-of-range gather is a device-side assert, which would take
    # the whole CUDA context down instead of one request
    codes = codes.clamp(0, CODEBOOK_SIZE - 1)
    # positions in (codebook, index) order, 0 | 1 4 | 2 3 5 6 (FRAME_LAYOUT), by slices: no index tensor to upload
    ordered = torch.cat([codes[..., 0:2], codes[..., 4:5], codes[..., 2:4], codes[..., 5:7]], dim=-1)  # [B, F, 7]
    bounds = [0, 1, 3, 7]
    return [ordered[..., bounds[b] : bounds[b + 1]].reshape(batch, num_frames * CODES_PER_FRAME[b]) for b in range(3)]


def audio_row_mask(position: torch.Tensor, num_rows: int, allow_stop: torch.Tensor | None = None) -> torch.Tensor:
    """[B] frame positions (0..6) -> [B, num_rows] bool over the sliced head's rows (row N = <custom_token_N>):
    True where the next token may be sampled, the 4096 audio rows of that position plus the stop rows (unless
    `allow_stop` [B] is False). The reference samples the whole vocabulary and drops what does not fit."""
    rows = torch.arange(num_rows, device=position.device)
    start = AUDIO_TOKEN_OFFSET + CODEBOOK_SIZE * position[:, None]
    mask = (rows >= start) & (rows < start + CODEBOOK_SIZE)
    stop_rows = torch.zeros(num_rows, dtype=torch.bool, device=position.device)
    for token_id in STOP_TOKEN_IDS:  # comparisons, not an index list: nothing is copied from the host
        stop_rows |= rows == token_id - CUSTOM_TOKEN_BASE
    stop = stop_rows[None, :] if allow_stop is None else stop_rows[None, :] & allow_stop[:, None]
    return mask | stop
