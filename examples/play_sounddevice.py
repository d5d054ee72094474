"""Speak text through the sound card as it streams in, reporting playback so the server paces to the listener.

    pip install sounddevice           # needs the PortAudio library (e.g. apt-get install libportaudio2)
    python examples/play_sounddevice.py --url ws://127.0.0.1:8000/v1/realtime "Hello there."

Realtime pacing: the server sends at most `lead_ms` ahead of what this program reports as played, so a
barge-in (Ctrl-C here, which cancels the context) stops the voice within that lead.
"""

from __future__ import annotations

import argparse
import asyncio
import sys

from voxrt.client import OutputFormat, VoxrtError, connect

SAMPLE_RATE_HZ = 24000
FRAME_MS = 20


def load_sounddevice():
    """The `sounddevice` module, or None after saying how to get it."""
    try:
        import sounddevice  # noqa: PLC0415 (optional dependency)
    except ImportError:
        print("this example needs the 'sounddevice' package: pip install sounddevice", file=sys.stderr)
        return None
    except OSError as error:  # the package is there but the PortAudio library is not
        print(f"sounddevice cannot load PortAudio ({error}); install it, e.g. apt-get install libportaudio2",
              file=sys.stderr)
        return None
    return sounddevice


async def speak(sd, url: str, text: str, *, voice: str | None, api_key: str | None) -> None:
    output = OutputFormat("pcm16", SAMPLE_RATE_HZ, FRAME_MS)
    async with connect(url, voice=voice, output=output, pacing="realtime", api_key=api_key) as session:
        ctx = session.context()
        await ctx.send(text)
        await ctx.end()
        with sd.RawOutputStream(samplerate=SAMPLE_RATE_HZ, channels=1, dtype="int16") as stream:
            written_ms = 0.0
            try:
                async for frame in ctx.frames():
                    await asyncio.to_thread(stream.write, frame.payload)  # blocks while the device buffer is full
                    written_ms += len(frame.payload) / 2 / SAMPLE_RATE_HZ * 1000
                    played_ms = max(0.0, written_ms - stream.latency * 1000)  # what is still in the device queue
                    await ctx.playback(played_ms)
            except (KeyboardInterrupt, asyncio.CancelledError):
                cancelled = await ctx.cancel()
                print(f"\ncancelled after {cancelled.played_ms} ms: {cancelled.spoken_text!r}")
                return
        done = await ctx.done()
        print(f"played {done.audio_ms} ms (ttfa {done.ttfa_ms} ms, stalls {done.metrics.get('stalls')})")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("text", nargs="?", default="Hello! This is voxrt speaking through your sound card.")
    parser.add_argument("--url", default="ws://127.0.0.1:8000/v1/realtime")
    parser.add_argument("--voice", default=None)
    parser.add_argument("--api-key", default=None)
    args = parser.parse_args(argv)
    sd = load_sounddevice()
    if sd is None:
        return 2
    try:
        asyncio.run(speak(sd, args.url, args.text, voice=args.voice, api_key=args.api_key))
    except VoxrtError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
