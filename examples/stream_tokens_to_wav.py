"""Pipe an LLM-like token stream into one voxrt context and write what it says to a WAV file.

    voxrt serve &                     # or any voxrt server
    python examples/stream_tokens_to_wav.py --url ws://127.0.0.1:8000/v1/realtime --out hello.wav

The session asks for PCM16 at 24 kHz, so each frame's payload is already WAV sample data: no decoder
needed. Tokens are sent as they are "generated" while frames are read concurrently, as an agent would.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
import wave
from typing import AsyncIterator

from voxrt.client import OutputFormat, VoxrtError, connect

SAMPLE_RATE_HZ = 24000
DEFAULT_TEXT = ("Hello! I'm reading this sentence one token at a time, the way a language model writes it. "
                "Dr. Smith's balance is $3.50, due at 10:30.")


async def fake_llm(text: str, token_delay_s: float) -> AsyncIterator[str]:
    """Yields `text` as LLM-style tokens: each word with its leading space."""
    for i, word in enumerate(text.split(" ")):
        await asyncio.sleep(token_delay_s)
        yield word if i == 0 else " " + word


async def synthesize(url: str, text: str, out_path: str, *, voice: str | None, api_key: str | None,
                     token_delay_s: float) -> None:
    output = OutputFormat("pcm16", SAMPLE_RATE_HZ, 20)
    start_s = time.perf_counter()
    async with connect(url, voice=voice, output=output, pacing="burst", api_key=api_key) as session:
        ctx = session.context()
        sender = asyncio.ensure_future(ctx.send_all(fake_llm(text, token_delay_s)))  # ends the context too
        num_frames = 0
        with wave.open(out_path, "wb") as wav:
            wav.setnchannels(1)
            wav.setsampwidth(2)  # s16le
            wav.setframerate(session.output.sample_rate)
            async for frame in ctx.frames():
                if num_frames == 0:
                    print(f"first audio after {(time.perf_counter() - start_s) * 1000:.0f} ms")
                wav.writeframes(frame.payload)
                num_frames += 1
        await sender
        done = await ctx.done()
    print(f"wrote {out_path}: {num_frames} frames, {done.audio_ms} ms of audio, reason {done.reason}, "
          f"server ttfa {done.ttfa_ms} ms")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default="ws://127.0.0.1:8000/v1/realtime")
    parser.add_argument("--out", default="out.wav")
    parser.add_argument("--text", default=DEFAULT_TEXT)
    parser.add_argument("--voice", default=None)
    parser.add_argument("--api-key", default=None)
    parser.add_argument("--token-delay-ms", type=float, default=20.0, help="pause between tokens")
    args = parser.parse_args(argv)
    try:
        asyncio.run(synthesize(args.url, args.text, args.out, voice=args.voice, api_key=args.api_key,
                               token_delay_s=args.token_delay_ms / 1000))
    except VoxrtError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
