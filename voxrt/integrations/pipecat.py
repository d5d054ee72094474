"""Pipecat TTS service on a voxrt server: LLM tokens in, `TTSAudioRawFrame`s and word-timed text out.

Written against pipecat-ai 1.14 (`pipecat.services.tts_service.TTSService`; install with
`pip install pipecat-ai`). One voxrt session per service; one voxrt context per Pipecat audio context, which
is one LLM turn (Pipecat reuses the context id within a turn):

- `run_tts(text, context_id)` appends the text to that turn's voxrt context (opening it on first use) and
  yields None: audio comes from a receiver task, as with Pipecat's other WebSocket services. By default
  tokens go straight through (`TextAggregationMode.TOKEN`): voxrt cuts speakable segments itself.
- the end of the turn (`flush_audio`) ends the context: the rest is spoken, then TTSStoppedFrame.
- an interruption (`on_audio_context_interrupted`) cancels the context: generation stops on the server.
- a turn the server refuses or fails (e.g. `server_busy` when it cannot start the turn in time) is reported
  upstream once (an ErrorFrame through `push_error`) and ends with TTSStoppedFrame; the rest of that turn's
  tokens are dropped quietly.
- voxrt's word alignment becomes Pipecat word timestamps, so TTSTextFrames follow the audio.

    tts = VoxrtTTSService(url="ws://127.0.0.1:8000/v1/realtime", voice="default")
    pipeline = Pipeline([transport.input(), stt, user_agg, llm, tts, transport.output(), assistant_agg])

Voice and model are fixed per service (a voxrt session's voice is chosen at `session.start`). Private helpers
are named `_voxrt_*` where Pipecat's base classes have a private method of the same name (`_cancel`,
`_end_audio_context`): a subclass method of that name would replace theirs.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator

from loguru import logger
from pipecat.frames.frames import CancelFrame, EndFrame, ErrorFrame, Frame, StartFrame, TTSAudioRawFrame, \
    TTSStoppedFrame
from pipecat.services.settings import TTSSettings
from pipecat.services.tts_service import TextAggregationMode, TTSService

from voxrt.client import (Alignment, AudioFrame, Context, OutputFormat, Pacing, Session, VoxrtError,
                          connect)
from voxrt.protocol.config import SAMPLE_RATES

FRAME_MS = 20
FALLBACK_SAMPLE_RATE_HZ = 24000  # asked of voxrt when the pipeline's rate is not one voxrt serves


class VoxrtTTSService(TTSService):
    """Streams each LLM turn into one voxrt context. `pacing`: "realtime" (the server sends a little ahead of
    playback, so an interruption wastes no GPU time) or "burst"."""

    def __init__(self, *, url: str, voice: str | None = None, model: str | None = None,
                 api_key: str | None = None, pacing: str | Pacing = "realtime", sample_rate: int | None = None,
                 text_aggregation_mode: TextAggregationMode = TextAggregationMode.TOKEN, **kwargs) -> None:
        super().__init__(text_aggregation_mode=text_aggregation_mode, push_text_frames=False,
                         push_start_frame=True, sample_rate=sample_rate,
                         settings=TTSSettings(model=model, voice=voice, language=None), **kwargs)
        self._url = url
        self._api_key = api_key
        self._pacing = pacing
        self._session: Session | None = None
        self._contexts: dict[str, Context] = {}  # Pipecat context id -> voxrt context (same id)
        self._voxrt_rate_hz = 0  # the rate voxrt sends; self.sample_rate is the pipeline's

    def can_generate_metrics(self) -> bool:
        return True

    # ---- lifecycle ---------------------------------------------------------------------------------------------

    async def start(self, frame: StartFrame) -> None:
        await super().start(frame)
        self._voxrt_rate_hz = self.sample_rate if self.sample_rate in SAMPLE_RATES else FALLBACK_SAMPLE_RATE_HZ
        await self._ensure_session()

    async def stop(self, frame: EndFrame) -> None:
        await super().stop(frame)  # plays out the open audio contexts first
        await self._close_session(abort=False)

    async def cancel(self, frame: CancelFrame) -> None:
        await super().cancel(frame)
        await self._close_session(abort=True)

    async def _ensure_session(self) -> Session | None:
        if self._session is not None and not self._session.is_closed:
            return self._session
        try:
            self._session = await connect(self._url, voice=self._settings.voice, model=self._settings.model,
                                          output=OutputFormat("pcm16", self._voxrt_rate_hz, FRAME_MS),
                                          pacing=self._pacing, api_key=self._api_key)
        except VoxrtError as error:
            self._session = None
            await self.push_error(error_msg=f"voxrt: cannot start a session: {error}", exception=error)
            await self._call_event_handler("on_connection_error", str(error))
            return None
        await self._call_event_handler("on_connected")
        return self._session

    async def _close_session(self, *, abort: bool) -> None:
        session, self._session = self._session, None
        self._contexts.clear()
        if session is not None:
            await (session.abort() if abort else session.close())
            await self._call_event_handler("on_disconnected")

    # ---- synthesis ---------------------------------------------------------------------------------------------

    async def run_tts(self, text: str, context_id: str) -> AsyncGenerator[Frame | None, None]:
        """Append `text` to the turn's voxrt context; its audio arrives through the receiver task."""
        context = self._contexts.get(context_id)
        if context is not None and context.is_finished:
            # the turn failed (its error went upstream once, from `_receive`): its later tokens have nowhere to go
            logger.debug(f"{self}: dropping text for {context_id}: {context.error or context.state.name}")
            await self._voxrt_end_audio_context(context_id)  # Pipecat opens one again for the turn's next text
            yield None
            return
        try:
            if context is None:
                session = await self._ensure_session()
                if session is None:
                    yield TTSStoppedFrame(context_id=context_id)
                    return
                context = self._contexts[context_id] = session.context(context_id)
                self.create_task(self._receive(context), name=f"voxrt-receive-{context_id}")
            await context.send(text)
            await self.start_tts_usage_metrics(text)
        except VoxrtError as error:
            if context is None or not context.is_finished:  # else the context's own error: `_receive` reports it
                yield ErrorFrame(error=f"voxrt: {error}")
                return
        yield None

    async def flush_audio(self, context_id: str | None = None) -> None:
        """The turn's text is complete: end its context (the rest is spoken, then context.done)."""
        context = self._contexts.get(context_id or self.get_active_audio_context_id() or "")
        if context is not None and context.is_finished:  # failed: nothing to end, the turn is over
            self._contexts.pop(context.id, None)
        elif context is not None:
            try:
                await context.end()
            except VoxrtError as error:
                await self.push_error(error_msg=f"voxrt: {error}", exception=error)

    async def on_audio_context_interrupted(self, context_id: str) -> None:
        """Barge-in: stop generation on the server at once."""
        await self.stop_all_metrics()
        context = self._contexts.pop(context_id, None)
        if context is not None and not context.is_finished:
            self.create_task(self._voxrt_cancel(context), name=f"voxrt-cancel-{context_id}")
        await super().on_audio_context_interrupted(context_id)

    async def _voxrt_cancel(self, context: Context) -> None:
        try:
            await context.cancel()
        except VoxrtError as error:  # the session is gone, and the context with it
            logger.debug(f"{self}: cancel of {context.id} not confirmed: {error}")

    async def _receive(self, context: Context) -> None:
        """Audio and word times of one context, into its Pipecat audio context, in order."""
        last_start_ms = 0
        failed = False
        try:
            async for item in context.events():
                if isinstance(item, AudioFrame):
                    await self.append_to_audio_context(context.id, await self._audio_frame(item, context.id))
                elif isinstance(item, Alignment) and item.words:
                    word_times = []
                    for word in item.words:
                        # voxrt's times are estimates and may step back at a segment boundary; Pipecat's word
                        # frames must stay in order.
                        last_start_ms = max(last_start_ms, word.start_ms)
                        word_times.append((word.text, last_start_ms / 1000))
                    await self.add_word_timestamps(word_times, context.id)
        except VoxrtError as error:
            failed = True
            await self.push_error(error_msg=f"voxrt: {error}", exception=error)
        finally:
            if not failed:  # a failed turn's context stays until the turn ends, so its later tokens are dropped
                self._contexts.pop(context.id, None)
            await self._voxrt_end_audio_context(context.id)

    async def _voxrt_end_audio_context(self, context_id: str) -> None:
        """Pipecat's audio context for the turn, if open, ends (TTSStoppedFrame) and goes."""
        if self.audio_context_available(context_id):
            await self.append_to_audio_context(context_id, TTSStoppedFrame(context_id=context_id))
            await self.remove_audio_context(context_id)

    async def _audio_frame(self, frame: AudioFrame, context_id: str) -> TTSAudioRawFrame:
        audio = frame.payload
        if self._voxrt_rate_hz != self.sample_rate:
            audio = await self._resampler.resample(audio, self._voxrt_rate_hz, self.sample_rate)
        return TTSAudioRawFrame(audio=audio, sample_rate=self.sample_rate, num_channels=1, context_id=context_id)
