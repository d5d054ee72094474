"""LiveKit Agents TTS on a voxrt server: streaming text in, PCM frames and word-timed transcripts out.

Written against livekit-agents 1.8 (`livekit.agents.tts.TTS`; install with `pip install livekit-agents`).
`VoxrtTTS` holds one voxrt session (opened on first use, or by `prewarm()`); each `SynthesizeStream` is one
voxrt context, i.e. one agent turn:

- `push_text(token)` sends the token as it comes (voxrt cuts speakable segments itself, so no sentence
  tokenizer is needed in front), `flush()` speaks what was sent without waiting for a boundary, and
  `end_input()` ends the context.
- closing the stream early (an interruption) cancels the context: generation stops on the server.
- voxrt's word alignment becomes `TimedString`s on the frames (`capabilities.aligned_transcript`), so the
  agent's transcript follows the audio.

    session = AgentSession(tts=VoxrtTTS(url="ws://127.0.0.1:8000/v1/realtime"), llm=..., stt=..., vad=...)

Errors become LiveKit's `APIError`s (retryable when the connection failed or the server was busy), so the
framework's retry and fallback logic applies.
"""

from __future__ import annotations

import asyncio
from typing import Any

from livekit.agents import APIConnectionError, APIError, APIStatusError, tts, utils
from livekit.agents.types import DEFAULT_API_CONNECT_OPTIONS, APIConnectOptions, TimedString

from voxrt.client import (AlignedSpan, Alignment, AudioFrame, AuthenticationError, ConnectError,
                          ConnectionClosedError, Context, OutputFormat, Pacing, ServerBusyError, Session, VoxrtError,
                          connect)
from voxrt.protocol.config import SAMPLE_RATES

FRAME_MS = 20


class VoxrtTTS(tts.TTS):
    """`sample_rate`: one of 8000, 16000, 24000, 48000 (PCM16 mono is asked of voxrt at that rate).
    `pacing`: "realtime" (the server sends a little ahead of playback, so an interruption wastes no GPU
    time) or "burst"."""

    def __init__(self, *, url: str, voice: str | None = None, model: str | None = None,
                 api_key: str | None = None, sample_rate: int = 24000, pacing: str | Pacing = "realtime") -> None:
        if sample_rate not in SAMPLE_RATES:
            raise ValueError(f"sample_rate must be one of {', '.join(map(str, SAMPLE_RATES))}; got {sample_rate}")
        super().__init__(capabilities=tts.TTSCapabilities(streaming=True, aligned_transcript=True),
                         sample_rate=sample_rate, num_channels=1)
        self._url = url
        self._voice = voice
        self._model = model
        self._api_key = api_key
        self._pacing = pacing
        self._session: Session | None = None
        self._session_lock: asyncio.Lock | None = None  # made in the event loop that uses it
        self._background: set[asyncio.Task[Any]] = set()

    @property
    def model(self) -> str:
        return self._session.model if self._session is not None else (self._model or "unknown")

    @property
    def provider(self) -> str:
        return "voxrt"

    def synthesize(self, text: str, *,
                   conn_options: APIConnectOptions = DEFAULT_API_CONNECT_OPTIONS) -> tts.ChunkedStream:
        return self._synthesize_with_stream(text, conn_options=conn_options)

    def stream(self, *, conn_options: APIConnectOptions = DEFAULT_API_CONNECT_OPTIONS) -> VoxrtSynthesizeStream:
        return VoxrtSynthesizeStream(tts=self, conn_options=conn_options)

    def prewarm(self) -> None:
        """Open the session now, so the first turn does not wait for the handshake."""
        self._in_background(self.session(DEFAULT_API_CONNECT_OPTIONS.timeout))

    async def session(self, timeout_s: float) -> Session:
        """The open voxrt session, (re)connecting when there is none."""
        if self._session_lock is None:
            self._session_lock = asyncio.Lock()
        async with self._session_lock:
            if self._session is None or self._session.is_closed:
                self._session = await connect(self._url, voice=self._voice, model=self._model,
                                              output=OutputFormat("pcm16", self.sample_rate, FRAME_MS),
                                              pacing=self._pacing, api_key=self._api_key, open_timeout_s=timeout_s)
            return self._session

    async def aclose(self) -> None:
        for task in list(self._background):
            await asyncio.gather(task, return_exceptions=True)
        session, self._session = self._session, None
        if session is not None:
            await session.close()

    def _in_background(self, coro) -> None:
        task = asyncio.ensure_future(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)
        task.add_done_callback(lambda t: t.cancelled() or t.exception())  # retrieved: failures are not news here


class VoxrtSynthesizeStream(tts.SynthesizeStream):
    """One agent turn: one voxrt context."""

    def __init__(self, *, tts: VoxrtTTS, conn_options: APIConnectOptions) -> None:
        super().__init__(tts=tts, conn_options=conn_options)
        self._tts: VoxrtTTS = tts

    async def _run(self, output_emitter: tts.AudioEmitter) -> None:
        output_emitter.initialize(request_id=utils.shortuuid(), sample_rate=self._tts.sample_rate, num_channels=1,
                                  mime_type="audio/pcm", stream=True)
        try:
            session = await self._tts.session(self._conn_options.timeout)
        except VoxrtError as error:
            raise _api_error(error) from error
        context = session.context()
        output_emitter.start_segment(segment_id=context.id)
        sent: list[str] = []  # the context's input so far; alignment offsets index its concatenation
        sender = asyncio.ensure_future(self._send(context, sent))
        try:
            await self._receive(context, sent, output_emitter)
            await sender
        except VoxrtError as error:
            raise _api_error(error) from error
        finally:
            if not sender.done():
                sender.cancel()
            if not context.is_finished:  # closed early: an interruption
                self._tts._in_background(context.cancel())

    async def _send(self, context: Context, sent: list[str]) -> None:
        async for data in self._input_ch:
            if isinstance(data, self._FlushSentinel):
                await context.flush()
            else:
                self._mark_started()
                sent.append(data)
                await context.send(data)
        await context.end()

    async def _receive(self, context: Context, sent: list[str], output_emitter: tts.AudioEmitter) -> None:
        transcribed_chars = 0  # input up to here went out as TimedStrings
        last_start_ms = 0
        async for item in context.events():
            if isinstance(item, AudioFrame):
                output_emitter.push(item.payload)
            elif isinstance(item, Alignment):
                text = "".join(sent)
                for span in item.words or item.segments:
                    # voxrt's times are estimates and may step back at a segment boundary; LiveKit's transcript
                    # synchronizer expects them in order.
                    last_start_ms = max(last_start_ms, span.start_ms)
                    output_emitter.push_timed_transcript(_timed(text, transcribed_chars, span, last_start_ms))
                    transcribed_chars = max(transcribed_chars, span.char_end)
        text = "".join(sent)
        if text[transcribed_chars:]:  # never aligned (e.g. trailing whitespace): still part of the transcript
            output_emitter.push_timed_transcript(TimedString(text[transcribed_chars:]))


def _timed(text: str, start_char: int, span: AlignedSpan, start_ms: int) -> TimedString:
    """The input from where the last piece ended through this word, so that the pieces add up to the text."""
    return TimedString(text[start_char:span.char_end], start_time=start_ms / 1000,
                       end_time=max(start_ms, span.end_ms) / 1000)


def _api_error(error: VoxrtError) -> APIError:
    """LiveKit retries an APIError marked retryable (before any audio went out)."""
    if isinstance(error, (ConnectError, ConnectionClosedError)):
        return APIConnectionError(f"voxrt: {error}")
    if isinstance(error, ServerBusyError):
        return APIStatusError(f"voxrt: {error}", status_code=429, body={"retry_after_ms": error.retry_after_ms})
    if isinstance(error, AuthenticationError):
        return APIStatusError(f"voxrt: {error}", status_code=401)
    return APIError(f"voxrt: {error}", body={"code": error.code}, retryable=False)
