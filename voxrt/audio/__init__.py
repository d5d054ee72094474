"""Audio for the wire: PCM <-> Opus / mu-law / A-law / s16le, streaming resampling, framing, containers.

Pure and synchronous: numpy, soxr, opuslib (libopus) and the standard library only; no torch, no asyncio.
The gateway's path for one stream is `StreamEncoder` (resample -> frame -> encode); the other names are
its parts, exported for tests, tools and HTTP responses (WAV, Ogg Opus).
"""

from voxrt.audio.containers import OggOpusWriter, wav_header
from voxrt.audio.encoder import StreamEncoder
from voxrt.audio.formats import CODECS, FRAME_MS, SAMPLE_RATES_HZ
from voxrt.audio.framer import Framer
from voxrt.audio.g711 import alaw_decode, alaw_encode, mulaw_decode, mulaw_encode
from voxrt.audio.opus import OpusDecoder, OpusEncoder
from voxrt.audio.pcm import pcm16_decode, pcm16_encode
from voxrt.audio.resample import StreamResampler

__all__ = [
    "CODECS",
    "FRAME_MS",
    "SAMPLE_RATES_HZ",
    "Framer",
    "OggOpusWriter",
    "OpusDecoder",
    "OpusEncoder",
    "StreamEncoder",
    "StreamResampler",
    "alaw_decode",
    "alaw_encode",
    "mulaw_decode",
    "mulaw_encode",
    "pcm16_decode",
    "pcm16_encode",
    "wav_header",
]
