"""Text to token ids with character spans, fast enough to run once per streamed word in the engine's loop.

A streamed request appends its text a word at a time (the gateway forwards words as an agent's LLM sends them),
and every append is tokenized in the engine process, between two steps. A Hugging Face tokenizer's `__call__`
costs ~48 us a word on the dev machine (argument checks, BatchEncoding), its Rust backend's `encode` ~8 us for
the same ids and spans. On the H200 host at 104 req/s with tokens streamed at 30/s, the engine read ~15 appends
a step at ~88 us each (against ~16 us for a playback report: reading and routing), 1.3 ms of the 1.7 ms between
two steps (bench/results/2026-12-04-tokens).

`span_tokenizer(tokenizer)` returns the backend path when the tokenizer has one (a "fast" tokenizer), on a copy
of the backend with `encode_special_tokens` set, which is what `split_special_tokens=True` means: special-token
strings in user text stay plain text (a client cannot inject markers). Elsewhere (a slow tokenizer) it calls
`__call__` as before. Both give the same ids and spans (tests/models/qwen3_tts/test_span_tokenizer.py).
"""

from __future__ import annotations

import copy
import logging
from typing import Any, Callable

log = logging.getLogger(__name__)

SpanTokenizer = Callable[[str], tuple[list[int], list[tuple[int, int]]]]


def span_tokenizer(tokenizer: Any) -> SpanTokenizer:
    """text -> (ids, [(char_start, char_end)]), no special tokens added, special-token strings split."""
    backend = getattr(tokenizer, "_tokenizer", None)
    if backend is not None and hasattr(backend, "encode") and hasattr(backend, "encode_special_tokens"):
        backend = copy.deepcopy(backend)  # the flag would change every other use of the shared backend
        backend.encode_special_tokens = True
        # padding or truncation configured on the tokenizer would change the ids; the plain call has neither
        backend.no_padding()
        backend.no_truncation()

        def encode(text: str) -> tuple[list[int], list[tuple[int, int]]]:
            enc = backend.encode(text, add_special_tokens=False)
            return enc.ids, enc.offsets

        return encode

    log.info("tokenizer %s has no fast backend: per-word tokenizing takes the slower __call__ path",
             type(tokenizer).__name__)

    def call(text: str) -> tuple[list[int], list[tuple[int, int]]]:
        enc = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True, split_special_tokens=True)
        return list(enc["input_ids"]), [tuple(span) for span in enc["offset_mapping"]]

    return call
