"""The engine's CPU cost of one streamed word: `EngineCore.append_text` (the feed and the program's tokenizer) on
the tiny Qwen3-TTS checkpoint of the tests (its Qwen2-style fast tokenizer), 100 requests x 20 words, best of
3. CPU only; run from the repository root:

    .venv/bin/python bench/append_text_cost.py
"""

import sys, time
sys.path.insert(0, "tests/models/qwen3_tts")
from tiny_talker import cached_checkpoint, load_program
from voxrt.engine.messages import EngineConfig, SubmitRequest
from voxrt.engine.params import SamplingParams
from voxrt.engine.runtime.core import EngineCore
program = load_program(cached_checkpoint(seed=0).directory)
core = EngineCore(EngineConfig(model="qwen3-tts", device="cpu", dtype="float32", max_batch_size=64,
                               max_seq_len=256, page_size=16, num_pages=4096, max_live_requests=128), program=program)
N, W = 100, 20
best = 1e9
for rep in range(3):
    for i in range(N):
        core.submit(SubmitRequest(f"r{rep}-{i}", "vivian", SamplingParams(), "", False))
    t = time.perf_counter()
    for w in range(W):
        for i in range(N):
            core.append_text(f"r{rep}-{i}", f" word{w}", False)
    best = min(best, (time.perf_counter() - t) / (N * W) * 1e6)
    for i in range(N): core.cancel(f"r{rep}-{i}")
print(f"core.append_text: {best:.1f} us a word (best of 3, {N * W} words)")
