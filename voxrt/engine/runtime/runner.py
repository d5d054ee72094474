"""The model runner: turns a `StepPlan` into tensors, runs the program's stages, returns host results.

`launch_lm` queues a step on the LM lane and returns at once: its codes come back through pinned memory and
an event (`LMLaunch.wait`), so the host plans the next step while this one runs. The codes of each slot's
last frame stay on the device (`last_codes`): the next decode step reads its codec-track input there, not
from the host, which has not seen them yet.

Stages: prefill (prompts padded to a length bucket), decode (LM step + code 0 sampling), mixed (a decode
batch and short prompts in one LM pass, when `RunnerConfig.mixed_prefill`), depth (code predictor) and codec
(streaming decode of chunks). They are `GraphedStage`s: CUDA graphs per batch-size bucket on the GPU, the
same bodies eagerly on the CPU. Per-request device state (codec caches,
the repetition history of code 0, the sampling parameters) lives in rows indexed by the request's slot; the
last row is scratch for padding rows.
"""

from __future__ import annotations

import logging
import time
from itertools import chain
from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np
import torch

from voxrt.engine.runtime import cublas
from voxrt.engine.runtime.attention import (AttentionContext, HostStaging, KVCache, SeqSlice, SplitAttention,
                                            TorchAttention, flashinfer_available, make_paged_context)
from voxrt.engine.runtime.graphs import GraphedStage, batch_buckets
from voxrt.engine.runtime.lanes import LM, Lanes
from voxrt.engine.runtime.program import ModelProgram
from voxrt.engine.runtime.sampling import SamplingTensors, SlotSampling
from voxrt.engine.runtime.transfer import upload, upload_into
from voxrt.engine.runtime.tuning_cache import TuningCache
from voxrt.engine.sched.plan import BACKGROUND, URGENT, CodecJob, DecodeItem, StepPlan, codec_sizes

log = logging.getLogger("voxrt.engine.runner")


@dataclass
class CodecLaunch:
    """One codec launch on a lane: in flight until its event fires (at once on the CPU)."""

    lane: str
    jobs: list[CodecJob]
    launched_ns: int
    parts: list[tuple[list[int], torch.Tensor]] = field(default_factory=list)  # (job indexes, host audio rows)
    empty: list[int] = field(default_factory=list)  # jobs with no frames (an empty last chunk)
    event: Any = None  # cuda event recorded after the launch's last copy
    start_event: Any = None  # with timing: recorded before its first kernel
    samples_per_frame: int = 0
    delay_samples: int = 0  # the codec's lag (ModelProgram.codec_delay_samples)
    tails: list[tuple[list[int], torch.Tensor]] = field(default_factory=list)  # (last jobs, host [n, delay])

    def is_done(self) -> bool:
        return self.event is None or self.event.query()

    def wait(self) -> None:
        if self.event is not None:
            self.event.synchronize()

    def gpu_ms(self) -> float | None:
        """GPU time from the launch's first kernel to its last copy (when launched with timing)."""
        if self.start_event is None or self.event is None:
            return None
        return self.start_event.elapsed_time(self.event)

    def results(self) -> list[np.ndarray]:
        """Audio per job, in job order; call once `is_done()`. With a lagging codec a request's first
        `delay_samples` samples (the codec's warm-up) are dropped and its last chunk ends with the held-back
        tail, so that a request's chunks add up to its frames' samples."""
        out: list[np.ndarray | None] = [None] * len(self.jobs)
        for i in self.empty:
            out[i] = np.zeros(0, dtype=np.float32)
        spf, delay = self.samples_per_frame, self.delay_samples
        for idx, host in self.parts:
            rows = host.float().numpy()
            for row, i in enumerate(idx):
                job = self.jobs[i]
                drop = max(0, delay - job.first_frame * spf)  # the part of the warm-up in this chunk
                out[i] = rows[row, drop : job.num_frames * spf].copy()
        for idx, host in self.tails:
            rows = host.float().numpy()
            for row, i in enumerate(idx):
                job = self.jobs[i]
                # the tail is the stream's last `delay` samples; of a request shorter than that, only its own
                end = (job.first_frame + job.num_frames) * spf
                out[i] = np.concatenate([out[i], rows[row, max(0, delay - end):]])
        return out  # type: ignore[return-value]


@dataclass
class LMLaunch:
    """One LM step in flight on the LM lane: the frame of every LM request of `plan`, in
    `plan.lm_requests` order, lands in pinned host memory when `event` fires (at once on the CPU)."""

    plan: StepPlan
    codes: torch.Tensor  # [n, K] on the host
    launched_ns: int
    event: Any = None  # recorded after the codes' copy
    start_event: Any = None  # with timing: recorded before the step's first kernel
    sm_mode: int = 0  # the SM mode (`Lanes.active`) the step was launched in

    def is_done(self) -> bool:
        return self.event is None or self.event.query()

    def wait(self) -> list[tuple[int, ...]]:
        """The codes (blocks until the step is done; a host tensor's tolist() never syncs the device)."""
        if self.event is not None:
            self.event.synchronize()
        return [tuple(row) for row in self.codes.tolist()]

    def gpu_ms(self) -> float | None:
        if self.start_event is None or self.event is None:
            return None
        return self.start_event.elapsed_time(self.event)


@dataclass(frozen=True)
class RunnerConfig:
    device: torch.device
    dtype: torch.dtype
    attention_backend: str  # "torch" or "flashinfer" (resolved)
    use_cuda_graphs: bool
    num_pages: int
    page_size: int
    num_slots: int
    max_batch_size: int
    max_seq_len: int
    max_codec_batch: int = 32  # chunks per codec launch: its activations grow with batch x frames x 1920
    frame_path: str = "auto"  # ModelProgram.use_frame_path: "auto", "reference" or "fused"
    mixed_prefill: bool = False  # prompts of <= MIXED_LENGTH tokens join the decode batch's LM pass


def resolve_backend(requested: str, device: torch.device) -> str:
    if requested not in ("auto", "torch", "flashinfer"):
        raise ValueError(f"unknown attention backend {requested!r}; choose auto, torch or flashinfer")
    if requested == "auto":
        return "flashinfer" if device.type == "cuda" and flashinfer_available() else "torch"
    if requested == "flashinfer" and (device.type != "cuda" or not flashinfer_available()):
        raise ValueError("attention backend 'flashinfer' needs a CUDA device and the flashinfer package")
    return requested


@dataclass
class DecodeBuffers:
    ids: torch.Tensor  # [2, b]: text ids, slots (one upload a step, through `staging`)
    text_ids: torch.Tensor  # [b] ids[0]
    slots: torch.Tensor  # [b] ids[1]; the codec-track input is the slot's last frame (`ModelRunner.last_codes`)
    staging: HostStaging  # pinned host buffers for `ids`
    attn: AttentionContext  # (sampling parameters: the slots' rows of `ModelRunner.slot_sampling`)
    hidden: torch.Tensor  # [b, H] out
    code0: torch.Tensor  # [b] out (the code of LM sub-step `sub`)
    sub: torch.Tensor  # [b] the LM sub-step of the frame (ModelProgram.lm_tokens_per_frame; 0 with one a frame)


# Prefill graphs: prompts padded to one of these lengths (tokens), up to PREFILL_BATCH prompts per launch. A
# Qwen3-TTS CustomVoice prompt is 12-14 tokens (role, codec prefix, the first text token): the 16 bucket holds
# nearly all of them; longer prompts than the last bucket prefill eagerly.
PREFILL_LENGTHS = (16, 32, 48, 64)  # prompt-length buckets of the separate prefill stage (a 40-token prompt pads to 48)
PREFILL_BATCH = 8
# Mixed steps: up to PREFILL_BATCH prompts of at most MIXED_LENGTH tokens (padded to it) ride in the decode
# batch's forward, so a step with admissions streams the LM's weights once instead of twice.
MIXED_LENGTH = PREFILL_LENGTHS[0]


@dataclass
class PrefillBuffers:
    text_ids: torch.Tensor  # [b * T], -1: nothing on the track (padding is -1 on both)
    codec_ids: torch.Tensor  # [b * T]
    last: torch.Tensor  # [b] index of each row's last real token in the flat layout
    slots: torch.Tensor  # [b]
    sampling: SamplingTensors
    attn: AttentionContext
    hidden: torch.Tensor  # [b, H] out
    code0: torch.Tensor  # [b] out


@dataclass
class MixedBuffers:
    dec: DecodeBuffers  # b decode rows (their attention: attn.first)
    pre: "PrefillBuffers"  # p prompts x MIXED_LENGTH tokens after them (attn.second)
    attn: SplitAttention


@dataclass
class DepthBuffers:
    hidden: torch.Tensor  # [b, H]
    code0: torch.Tensor  # [b]
    slots: torch.Tensor  # [b]: the rows' sampling parameters (`ModelRunner.slot_sampling`)
    codes: torch.Tensor  # [b, K] out


@dataclass
class CodecBuffers:
    codes: torch.Tensor  # [b, F, K]
    slots: torch.Tensor  # [b]
    audio: torch.Tensor = field(default=None)  # [b, F * samples_per_frame] out


def _chunk_codes(jobs: Sequence[CodecJob], size: int, frames: int, num_codebooks: int) -> np.ndarray:
    """The codes of a codec launch, [size, frames, K] int64: each job's frames from its request's host frame list,
    zeros past a job's own frames and in the rows past the jobs (padding). One numpy conversion of the whole
    batch when every job fills its rows (the usual case): this is host work between two LM launches, and
    building nested lists for torch.tensor cost 2-3x as much."""
    out = np.zeros((size, frames, num_codebooks), dtype=np.int64)
    rows = [job.request.frames[job.first_frame : job.first_frame + job.num_frames] for job in jobs]
    if rows and all(len(r) == frames for r in rows):
        flat = np.fromiter(chain.from_iterable(chain.from_iterable(rows)), dtype=np.int64,
                           count=len(rows) * frames * num_codebooks)
        out[: len(rows)] = flat.reshape(len(rows), frames, num_codebooks)
    else:
        for i, r in enumerate(rows):
            if r:
                out[i, : len(r)] = r
    return out


class ModelRunner:
    def __init__(self, program: ModelProgram, cfg: RunnerConfig, lanes: Lanes | None = None) -> None:
        self.cfg = cfg
        self.lanes = lanes if lanes is not None else Lanes("off")
        self.program = program.to(device=cfg.device, dtype=cfg.dtype).eval()
        self.frame_path = self.program.use_frame_path(cfg.frame_path, cfg.device)
        log.info("LM frame path: %s", self.frame_path)
        geom = program.lm_geometry
        self.geom = geom
        self.kv = KVCache(geom.num_layers, cfg.num_pages, cfg.page_size, geom.num_kv_heads, geom.head_dim,
                          cfg.device, cfg.dtype)
        self.max_pages_per_seq = -(-cfg.max_seq_len // cfg.page_size)
        self.scratch_slot = cfg.num_slots
        self.tokens_per_frame = program.lm_tokens_per_frame
        self._text_pad_id = program.spec.text_pad_id
        self.codec_state = program.new_codec_state(cfg.num_slots + 1, cfg.device, cfg.dtype)
        self.history = torch.zeros(cfg.num_slots + 1, program.code0_vocab_size, dtype=torch.bool, device=cfg.device)
        # each slot's sampling parameters: written by the stage that prefills the slot's request, read by its
        # decode and depth steps through their slots tensor (sampling.py SlotSampling)
        self.slot_sampling = SlotSampling(cfg.num_slots + 1, cfg.device)
        # each slot's last frame: written by the step that made it, read by the slot's next decode step
        self.last_codes = torch.zeros(cfg.num_slots + 1, program.num_codebooks, dtype=torch.int64, device=cfg.device)
        self._last_lm_event = None  # the newest LM launch's event: a launch on another stream waits for it
        self._true = torch.ones((), dtype=torch.bool, device=cfg.device)  # a device value: no H2D copy in capture
        self._zero_sub = torch.zeros(max(cfg.max_batch_size, PREFILL_BATCH), dtype=torch.int64, device=cfg.device)
        use_graphs = cfg.use_cuda_graphs and cfg.device.type == "cuda"
        self.use_graphs = use_graphs
        self.tuning: TuningCache | None = None  # the program's tuning file, once the graphs are captured
        self._workspace = self._workspace2 = None
        self._eager_ctx: dict[tuple[str, bool], AttentionContext] = {}
        if cfg.attention_backend == "flashinfer":
            self._workspace = torch.zeros(128 * 1024 * 1024, dtype=torch.uint8, device=cfg.device)
            if cfg.mixed_prefill:  # a mixed step plans its decode and prefill parts before either runs
                self._workspace2 = torch.zeros(128 * 1024 * 1024, dtype=torch.uint8, device=cfg.device)
        pool = torch.cuda.graph_pool_handle() if use_graphs else None
        lm_pool = self.lanes.pool(LM) or pool  # lanes replay at the same time: one memory pool each
        buckets = batch_buckets(cfg.max_batch_size)
        # The LM and background codec graphs once per SM mode (a graph keeps its capture stream's partition);
        # the modes of a lane share its pool: one mode runs at a time.
        num_modes = self.lanes.num_sm_modes
        suffix = [f"@{m}" if num_modes > 1 else "" for m in range(num_modes)]
        self.decode_stages = [GraphedStage("decode" + suffix[m], buckets, self._make_decode_buffers, self._decode_body,
                                           use_graphs, lm_pool) for m in range(num_modes)]
        self.depth_stages = [GraphedStage("depth" + suffix[m], buckets, self._make_depth_buffers, self._depth_body,
                                          use_graphs, lm_pool) for m in range(num_modes)]
        prefill_buckets = batch_buckets(min(PREFILL_BATCH, cfg.max_batch_size))
        lengths = [t for t in PREFILL_LENGTHS if t <= cfg.max_seq_len]
        # per SM mode, per prompt-length bucket: prompts padded to the length, graphs per prompt count
        self.prefill_stages = [
            {t: GraphedStage(f"prefill[{t}]" + suffix[m], prefill_buckets,
                             lambda b, g, t=t: self._make_prefill_buffers(b, t, g), self._prefill_body, use_graphs,
                             lm_pool) for t in lengths}
            for m in range(num_modes)]
        # per SM mode, per prompt-count bucket: graphs per decode batch bucket (None: mixed steps off)
        self.mixed_stages = [
            {n: GraphedStage(f"mixed[{n}x{MIXED_LENGTH}]" + suffix[m], buckets,
                             lambda b, g, n=n: self._make_mixed_buffers(b, n, g), self._mixed_body, use_graphs,
                             lm_pool) for n in prefill_buckets}
            for m in range(num_modes)] if cfg.mixed_prefill and MIXED_LENGTH <= cfg.max_seq_len else None
        codec_buckets = batch_buckets(min(cfg.max_codec_batch, cfg.max_batch_size))
        sizes = codec_sizes(program.first_chunk_frames, program.chunk_frames)

        def codec_stages(lane: str, tag: str) -> dict[int, GraphedStage]:
            return {frames: GraphedStage(f"codec[{frames}f]" + (f"/{lane}{tag}" if self.lanes.enabled else ""),
                                         codec_buckets, lambda b, g, f=frames: self._make_codec_buffers(b, f),
                                         self._codec_body, use_graphs, self.lanes.pool(lane) or pool)
                    for frames in sizes}
        # Each codec lane has its own graphs (captured on its stream: partition and priority) and buffers, over
        # the same per-slot codec state. Without lanes one set serves every chunk.
        self.background_stages = [codec_stages(BACKGROUND, suffix[m]) for m in range(num_modes)]
        self.urgent_stages = codec_stages(URGENT, "") if self.lanes.enabled else None
        self._pool = pool
        self._buckets = buckets

    # The stages of the active SM mode (`lanes.set_mode`).
    @property
    def decode_stage(self) -> GraphedStage:
        return self.decode_stages[self.lanes.active]

    @property
    def depth_stage(self) -> GraphedStage:
        return self.depth_stages[self.lanes.active]

    @property
    def prefill_stage_by_length(self) -> dict[int, GraphedStage]:
        return self.prefill_stages[self.lanes.active]

    @property
    def mixed_stage_by_count(self) -> dict[int, GraphedStage] | None:
        return self.mixed_stages[self.lanes.active] if self.mixed_stages is not None else None

    @property
    def codec_stages(self) -> dict[int, GraphedStage]:
        """The background (or, without lanes, the only) codec stages of the active SM mode."""
        return self.background_stages[self.lanes.active]

    @property
    def codec_stages_by_lane(self) -> dict[str, dict[int, GraphedStage]]:
        stages = {BACKGROUND: self.codec_stages}
        if self.urgent_stages is not None:
            stages[URGENT] = self.urgent_stages
        return stages

    # ---- set-up ------------------------------------------------------------------------------------------

    @torch.inference_mode()
    def capture_graphs(self) -> None:
        if not self.use_graphs:
            return
        # what the program timed at an earlier start on this GPU, libraries and split (its codec's conv choices)
        tuning = self.tuning = TuningCache.for_program(self.program, self.cfg.device, self.lanes.describe())
        if tuning is not None:
            tuning.restore()
        active = self.lanes.active
        try:
            for mode in range(self.lanes.num_sm_modes):
                self.lanes.set_mode(mode)
                lm_stream = self.lanes.stream(LM)
                # FlashInfer's plan() and the dummy fills on the lane that replays them; cuBLAS's kernels for its
                # SMs with VOXRT_BLAS_SM_TARGET=lanes
                with self.lanes.on(LM), cublas.sm_count_target(self.lanes.blas_sm_count(LM)):
                    self.decode_stage.capture(lambda b: self._fill_decode(b, b.text_ids.shape[0], [], [], []),
                                              lm_stream)
                    if self.program.has_depth:
                        self.depth_stage.capture(lambda b: None, lm_stream)
                    self._capture_prefill(lm_stream)
                    self._capture_mixed(lm_stream)
                lanes = (BACKGROUND, URGENT) if mode == 0 else (BACKGROUND,)  # the urgent lane has one set
                for lane, stages in self.codec_stages_by_lane.items():
                    if lane not in lanes:
                        continue
                    with self.lanes.on(lane), cublas.sm_count_target(self.lanes.blas_sm_count(lane)):
                        for stage in stages.values():
                            stage.capture(lambda b: b.slots.fill_(self.scratch_slot), self.lanes.stream(lane))
                self.synchronize()
        finally:
            self.lanes.set_mode(active)
        self.synchronize()
        note = self.program.warmup_note()
        if note:
            restored = (f" ({tuning.num_restored} restored from the tuning cache)"
                        if tuning is not None and tuning.num_restored else "")
            log.info("%s: %s%s", self.program.name, note, restored)
        if tuning is not None:
            tuning.save()

    def _capture_prefill(self, stream) -> None:
        """The prefill graphs of the active SM mode. A bucket whose capture fails (an attention library that
        cannot graph this shape) prefills eagerly instead, logged: slower, never wrong."""
        for length, stage in list(self.prefill_stage_by_length.items()):
            try:
                stage.capture(lambda b, t=length: self._fill_prefill(b, b.slots.shape[0], t, []), stream)
            except Exception:  # noqa: BLE001
                log.exception("prefill graphs for %d-token prompts failed to capture; those prompts prefill eagerly",
                              length)
                stage.graphs.clear()
                stage.buffers.clear()
                self.synchronize()

    def _capture_mixed(self, stream) -> None:
        """The mixed-step graphs of the active SM mode; on a failed capture mixed steps are off (the prefill
        and decode stages run them apart), logged."""
        if self.mixed_stage_by_count is None:
            return
        try:
            for stage in self.mixed_stage_by_count.values():
                stage.capture(lambda b: self._fill_mixed(b, b.dec.text_ids.shape[0], [], []), stream)
        except Exception:  # noqa: BLE001
            log.exception("mixed prefill+decode graphs failed to capture; prefills run as their own stage")
            self.mixed_stages = None
            self.synchronize()

    def synchronize(self) -> None:
        """Waits for every lane (a device-wide synchronize does not cover green-context streams)."""
        if self.cfg.device.type != "cuda":
            return
        streams = list(self.lanes.streams.values()) + [s for m in self.lanes.sm_modes for s in m.streams.values()]
        for stream in streams:
            stream.synchronize()
        torch.cuda.synchronize()

    def _attention(self, num_seqs: int, num_tokens: int, is_decode: bool, graphed: bool,
                   max_pages: int | None = None, second: bool = False) -> AttentionContext:
        """`max_pages`: pages per sequence of a graphed context (default: the longest sequence's). `second`:
        on the second FlashInfer workspace (the prefill part of a mixed step)."""
        max_pages = max_pages or self.max_pages_per_seq
        if self.cfg.attention_backend == "torch":
            return TorchAttention(self.kv, num_seqs, num_tokens, max_pages if graphed else None, self.cfg.device)
        workspace = self._workspace2 if second else self._workspace
        if graphed:
            return make_paged_context(self.kv, num_seqs, num_tokens, max_pages, self.cfg.device,
                                      self.geom.num_q_heads, self.geom.num_kv_heads, self.geom.head_dim,
                                      is_decode=is_decode, use_cuda_graph=True, workspace=workspace)
        kind = ("decode" if is_decode else "prefill", second)
        ctx = self._eager_ctx.get(kind)  # long-lived: wrappers own pinned buffers, too costly per step
        if ctx is None or ctx.max_tokens < num_tokens or ctx.max_seqs < num_seqs:
            cap = max(num_tokens, self.cfg.max_batch_size if is_decode else 4096)
            ctx = make_paged_context(self.kv, max(num_seqs, self.cfg.max_batch_size), cap, self.max_pages_per_seq,
                                     self.cfg.device, self.geom.num_q_heads, self.geom.num_kv_heads, self.geom.head_dim,
                                     is_decode=is_decode, use_cuda_graph=False, workspace=workspace)
            self._eager_ctx[kind] = ctx
        return ctx

    # ---- buffers and bodies --------------------------------------------------------------------------------

    def _make_decode_buffers(self, b: int, graphed: bool) -> DecodeBuffers:
        dev = self.cfg.device
        ids = torch.zeros(2, b, dtype=torch.int64, device=dev)
        ids[1] = self.scratch_slot
        text_ids, slots = ids.unbind(0)
        return DecodeBuffers(
            ids=ids, text_ids=text_ids, slots=slots, staging=HostStaging(2 * b, torch.int64, dev),
            attn=self._attention(b, b, True, graphed),
            hidden=torch.zeros(b, self.geom.hidden_size, dtype=self.cfg.dtype, device=dev),
            code0=torch.zeros(b, dtype=torch.int64, device=dev),
            sub=torch.zeros(b, dtype=torch.int64, device=dev),
        )

    def _decode_body(self, bufs: DecodeBuffers) -> None:
        p = self.program
        x = p.embed_substep(bufs.text_ids, self.last_codes[bufs.slots], bufs.sub)
        hidden = p.lm_forward(x, bufs.attn.positions[: x.shape[0]], bufs.attn)
        code0 = p.sample_code(hidden, self.slot_sampling.gather(bufs.slots), self.history[bufs.slots], bufs.sub)
        self._mark_history(bufs.slots, code0)
        bufs.hidden.copy_(hidden)
        bufs.code0.copy_(code0)

    def _make_prefill_buffers(self, b: int, length: int, graphed: bool, second: bool = False) -> PrefillBuffers:
        dev = self.cfg.device
        n = b * length
        attn = self._attention(b, n, False, graphed, max_pages=-(-length // self.cfg.page_size), second=second)
        return PrefillBuffers(text_ids=torch.full((n,), -1, dtype=torch.int64, device=dev),
                              codec_ids=torch.full((n,), -1, dtype=torch.int64, device=dev),
                              last=torch.arange(b, dtype=torch.int64, device=dev) * length,
                              slots=torch.full((b,), self.scratch_slot, dtype=torch.int64, device=dev),
                              sampling=SamplingTensors.empty(b, dev), attn=attn,
                              hidden=torch.zeros(b, self.geom.hidden_size, dtype=self.cfg.dtype, device=dev),
                              code0=torch.zeros(b, dtype=torch.int64, device=dev))

    def _prefill_body(self, bufs: PrefillBuffers) -> None:
        """Prompts padded to one length: padding follows each prompt, so causal attention keeps it out of
        the real tokens' hidden states; its K/V land past the prompt (the scratch page, or the prompt's last
        page at offsets the first decode steps overwrite before they attend to them)."""
        p = self.program
        x = p.embed_prompt(bufs.text_ids, bufs.codec_ids)
        hidden = p.lm_forward(x, bufs.attn.positions[: x.shape[0]], bufs.attn)[bufs.last]
        self.history.index_fill_(0, bufs.slots, False)  # a new owner of the slot starts clean
        p.reset_codec_slots(self.codec_state, bufs.slots)
        self.slot_sampling.scatter(bufs.slots, bufs.sampling)  # its decode steps read them there
        code0 = p.sample_code(hidden, bufs.sampling, self.history[bufs.slots], self._zero_sub[: hidden.shape[0]])
        self._mark_history(bufs.slots, code0)
        bufs.hidden.copy_(hidden)
        bufs.code0.copy_(code0)

    def _make_mixed_buffers(self, b: int, prompts: int, graphed: bool) -> MixedBuffers:
        dec = self._make_decode_buffers(b, graphed)
        pre = self._make_prefill_buffers(prompts, MIXED_LENGTH, graphed, second=True)
        return MixedBuffers(dec=dec, pre=pre, attn=SplitAttention(dec.attn, pre.attn, b, prompts * MIXED_LENGTH))

    def _mixed_body(self, bufs: MixedBuffers) -> None:
        """The decode body and the prefill body over one forward: rows [decode batch; prompts x MIXED_LENGTH].
        Each part samples code 0 as its own stage would (a prompt's slot starts clean first)."""
        p, d, q = self.program, bufs.dec, bufs.pre
        b = d.text_ids.shape[0]
        x = torch.cat([p.embed_substep(d.text_ids, self.last_codes[d.slots], d.sub),
                       p.embed_prompt(q.text_ids, q.codec_ids)])
        hidden = p.lm_forward(x, bufs.attn.positions[: x.shape[0]], bufs.attn)
        dec_hidden, pre_hidden = hidden[:b], hidden[b:][q.last]
        self.history.index_fill_(0, q.slots, False)  # a new owner of the slot starts clean
        p.reset_codec_slots(self.codec_state, q.slots)
        self.slot_sampling.scatter(q.slots, q.sampling)
        for part, h, sampling in ((d, dec_hidden, self.slot_sampling.gather(d.slots)), (q, pre_hidden, q.sampling)):
            code0 = p.sample_code(h, sampling, self.history[part.slots], self._zero_sub[: h.shape[0]])
            self._mark_history(part.slots, code0)
            part.hidden.copy_(h)
            part.code0.copy_(code0)

    def _fill_mixed(self, b: MixedBuffers, size: int, items: Sequence[DecodeItem], prompts: Sequence) -> None:
        self.decode_filler(items)(b.dec, size)
        self._fill_prefill(b.pre, b.pre.slots.shape[0], MIXED_LENGTH, prompts)
        b.attn.join()

    def _fill_prefill(self, b: PrefillBuffers, size: int, length: int, requests: Sequence) -> None:
        ps, scratch = self.cfg.page_size, self.kv.scratch_page
        pages_per_row = -(-length // ps)
        text, codec, last, slots, seqs = [], [], [], [], []
        for i in range(size):
            if i < len(requests):
                request = requests[i]
                prompt, real = request.prompt, len(request.prompt)
                text += list(prompt.text_ids) + [-1] * (length - real)
                codec += list(prompt.codec_ids) + [-1] * (length - real)
                own = list(request.pages[: -(-real // ps)])
                seqs.append(SeqSlice(own + [scratch] * (pages_per_row - len(own)), length, length))
                last.append(i * length + real - 1)
                slots.append(request.slot)
            else:  # a padding row: every token on the scratch page, the scratch slot
                text += [-1] * length
                codec += [-1] * length
                seqs.append(SeqSlice([scratch] * pages_per_row, length, length))
                last.append(i * length)
                slots.append(self.scratch_slot)
        upload_into(b.text_ids, torch.tensor(text, dtype=torch.int64))
        upload_into(b.codec_ids, torch.tensor(codec, dtype=torch.int64))
        upload_into(b.last, torch.tensor(last, dtype=torch.int64))
        upload_into(b.slots, torch.tensor(slots, dtype=torch.int64))
        b.sampling.fill_from_params([r.params for r in requests], pad_to=size)
        b.attn.fill(seqs)

    def _make_depth_buffers(self, b: int, graphed: bool) -> DepthBuffers:
        dev = self.cfg.device
        return DepthBuffers(hidden=torch.zeros(b, self.geom.hidden_size, dtype=self.cfg.dtype, device=dev),
                            code0=torch.zeros(b, dtype=torch.int64, device=dev),
                            slots=torch.full((b,), self.scratch_slot, dtype=torch.int64, device=dev),
                            codes=torch.zeros(b, self.program.num_codebooks, dtype=torch.int64, device=dev))

    def _depth_body(self, bufs: DepthBuffers) -> None:
        sampling = self.slot_sampling.gather(bufs.slots)
        bufs.codes.copy_(self.program.generate_depth(bufs.hidden, bufs.code0, sampling))

    def depth_filler(self, slots: torch.Tensor, hidden: torch.Tensor, code0: torch.Tensor):
        """The fill function of the depth stage for rows of these device slots, hidden states and codes 0 (no
        upload: padding rows take the scratch slot on the device)."""
        n = hidden.shape[0]

        def fill(b: DepthBuffers, size: int) -> None:
            b.hidden[:n].copy_(hidden)
            b.code0[:n].copy_(code0)
            b.slots[:n].copy_(slots)
            if size > n:
                b.slots[n:].fill_(self.scratch_slot)
        return fill

    def _make_codec_buffers(self, b: int, frames: int) -> CodecBuffers:
        dev = self.cfg.device
        return CodecBuffers(codes=torch.zeros(b, frames, self.program.num_codebooks, dtype=torch.int64, device=dev),
                            slots=torch.full((b,), self.scratch_slot, dtype=torch.int64, device=dev),
                            audio=torch.zeros(b, frames * self.program.samples_per_frame, dtype=torch.float32, device=dev))

    def _codec_body(self, bufs: CodecBuffers) -> None:
        bufs.audio.copy_(self.program.decode_chunk(bufs.codes, bufs.slots, self.codec_state))

    # ---- the step --------------------------------------------------------------------------------------------

    def run_lm(self, plan: StepPlan) -> list[tuple[int, ...]]:
        """`launch_lm` and wait for its codes (benchmarks and tests; the engine's loop never waits here)."""
        return self.launch_lm(plan).wait()

    @torch.inference_mode()
    def launch_lm(self, plan: StepPlan, timing: bool = False) -> LMLaunch:
        """Queues one frame for every LM request of the plan (prefills first, then decodes) on the LM lane and
        returns at once. The frames are written to `last_codes` on the device and copied to pinned host memory;
        nothing here waits for the GPU (a plan() may wait for its own previous copy: attention.py)."""
        is_cuda = self.cfg.device.type == "cuda"
        launch = LMLaunch(plan=plan, codes=None, launched_ns=time.monotonic_ns(),  # type: ignore[arg-type]
                          sm_mode=self.lanes.active)
        with self.lanes.on(LM):
            if is_cuda:
                if self._last_lm_event is not None:  # an SM-mode switch moves the LM to another stream
                    torch.cuda.current_stream().wait_event(self._last_lm_event)
                if timing:
                    launch.start_event = torch.cuda.Event(enable_timing=True)
                    launch.start_event.record()
            slots = upload(torch.tensor([r.slot for r in plan.lm_requests], dtype=torch.int64), self.cfg.device)
            codes = self._lm_codes(plan, slots)
            self.last_codes.index_copy_(0, slots, codes)
            if is_cuda:
                launch.codes = torch.empty(codes.shape, dtype=codes.dtype, pin_memory=True)
                launch.codes.copy_(codes, non_blocking=True)
                launch.event = torch.cuda.Event(enable_timing=timing)
                launch.event.record()
                self._last_lm_event = launch.event
            else:
                launch.codes = codes.clone()
        return launch

    def _lm_codes(self, plan: StepPlan, slots: torch.Tensor) -> torch.Tensor:
        """[n, K] device codes of the plan's LM requests (prefill, code 0, depth), queued on the current stream;
        `slots` [n]: theirs, on the device."""
        hidden_parts, code0_parts = [], []
        mixed = self._mixed_stage_for(plan)
        if mixed is not None:  # prompts and decodes in one pass; rows come back in the plan's order
            bufs = mixed.run(len(plan.decode), lambda b, size: self._fill_mixed(b, size, plan.decode, plan.prefill))
            hidden_parts += [bufs.pre.hidden[: len(plan.prefill)], bufs.dec.hidden[: len(plan.decode)]]
            code0_parts += [bufs.pre.code0[: len(plan.prefill)], bufs.dec.code0[: len(plan.decode)]]
        elif plan.prefill:
            hidden, code0 = self._run_prefill(plan.prefill)
            hidden_parts.append(hidden)
            code0_parts.append(code0)
        if plan.decode and mixed is None:
            n = len(plan.decode)
            bufs = self.decode_stage.run(n, self.decode_filler(plan.decode))
            hidden_parts.append(bufs.hidden[:n])
            code0_parts.append(bufs.code0[:n])
        hidden = torch.cat(hidden_parts) if len(hidden_parts) > 1 else hidden_parts[0]
        code0 = torch.cat(code0_parts) if len(code0_parts) > 1 else code0_parts[0]
        if self.tokens_per_frame > 1:
            return self._frame_substeps(plan, code0, slots)
        if not self.program.has_depth:
            return code0[:, None]
        n = len(plan.lm_requests)
        return self.depth_stage.run(n, self.depth_filler(slots, hidden, code0)).codes[:n]

    def _frame_substeps(self, plan: StepPlan, code0: torch.Tensor, slots: torch.Tensor) -> torch.Tensor:
        """The rest of the frame for a program of several LM tokens a frame (no depth stage): sub-step j of
        every LM request of the plan is one more decode-stage pass, at the position after sub-step j - 1's, its
        input the code sub-step j - 1 wrote into the slot's frame row (`last_codes`). A prompt's sub-step 0 is
        its prefill (positions 0 .. P - 1), so its sub-step j sits at P + j - 1; a decode's sub-step j at its
        item's position + j. The scheduler booked these positions (ProgramSpec.lm_tokens_per_frame)."""
        self.last_codes[:, 0].index_copy_(0, slots, code0)
        n = len(plan.lm_requests)
        requests = list(plan.prefill) + [item.request for item in plan.decode]
        base = [len(r.prompt) - 1 for r in plan.prefill] + [item.position for item in plan.decode]
        pad = self._text_pad_id
        for sub in range(1, self.tokens_per_frame):
            def fill(b: DecodeBuffers, size: int, sub=sub) -> None:
                self._fill_decode(b, size, [pad] * n, [r.slot for r in requests],
                                  [SeqSlice(r.pages, 1, pos + sub + 1) for r, pos in zip(requests, base)], sub=sub)
            bufs = self.decode_stage.run(n, fill)
            self.last_codes[:, sub].index_copy_(0, slots, bufs.code0[:n])
        return self.last_codes.index_select(0, slots)

    def _mixed_stage_for(self, plan: StepPlan) -> GraphedStage | None:
        """The mixed stage for this plan's prompts, when it has decodes too and every prompt fits one."""
        stages = self.mixed_stage_by_count
        if stages is None or not plan.prefill or not plan.decode or len(plan.prefill) > max(stages):
            return None
        if any(len(r.prompt) > MIXED_LENGTH for r in plan.prefill):
            return None
        return stages[min(n for n in stages if n >= len(plan.prefill))]

    def _run_prefill(self, requests: Sequence) -> tuple[torch.Tensor, torch.Tensor]:
        """Hidden state and code 0 of every prompt, in the plan's order: prompts grouped by length bucket, up
        to PREFILL_BATCH per launch of that bucket's stage (a CUDA graph per prompt count); prompts longer than
        the last bucket in one eager prefill."""
        stages = self.prefill_stage_by_length
        groups: dict[int | None, list[int]] = {}
        for i, request in enumerate(requests):
            length = next((t for t in sorted(stages) if len(request.prompt) <= t), None)
            groups.setdefault(length, []).append(i)
        order, hiddens, codes = [], [], []
        for length, idx in groups.items():
            for start in range(0, len(idx), PREFILL_BATCH if length is not None else len(idx)):
                part = idx[start : start + PREFILL_BATCH] if length is not None else idx
                group = [requests[i] for i in part]
                if length is None:
                    hidden, code0 = self._prefill_eager(group)
                else:
                    n = len(group)
                    bufs = stages[length].run(n, lambda b, size, g=group, t=length: self._fill_prefill(b, size, t, g))
                    hidden, code0 = bufs.hidden[:n], bufs.code0[:n]
                order += part
                hiddens.append(hidden)
                codes.append(code0)
        hidden, code0 = (torch.cat(hiddens), torch.cat(codes)) if len(hiddens) > 1 else (hiddens[0], codes[0])
        if order != sorted(order):  # back to the plan's order
            inverse = upload(torch.tensor(np.argsort(order), dtype=torch.int64), self.cfg.device)
            hidden, code0 = hidden[inverse], code0[inverse]
        return hidden, code0

    def _prefill_eager(self, requests: Sequence) -> tuple[torch.Tensor, torch.Tensor]:
        """Prompts at their exact lengths, eagerly (those past the last graph bucket)."""
        dev, p = self.cfg.device, self.program
        lengths = [len(r.prompt) for r in requests]
        text_ids = upload(torch.tensor([t for r in requests for t in r.prompt.text_ids], dtype=torch.int64), dev)
        codec_ids = upload(torch.tensor([c for r in requests for c in r.prompt.codec_ids], dtype=torch.int64), dev)
        seqs = [SeqSlice(r.pages, n, n) for r, n in zip(requests, lengths)]
        attn = self._attention(len(requests), sum(lengths), False, False)
        attn.fill(seqs)
        x = p.embed_prompt(text_ids, codec_ids)
        hidden = p.lm_forward(x, attn.positions[: x.shape[0]], attn)
        last = upload(torch.tensor(np.cumsum(lengths) - 1, dtype=torch.int64), dev)
        hidden = hidden[last]
        slots = upload(torch.tensor([r.slot for r in requests], dtype=torch.int64), dev)
        self.history.index_fill_(0, slots, False)  # a new owner of the slot starts clean
        p.reset_codec_slots(self.codec_state, slots)
        sampling = SamplingTensors.from_params([r.params for r in requests], dev)
        self.slot_sampling.scatter(slots, sampling)  # its decode steps read them there
        code0 = p.sample_code(hidden, sampling, self.history[slots], self._zero_sub[: hidden.shape[0]])
        self._mark_history(slots, code0)
        return hidden, code0

    def _mark_history(self, slots: torch.Tensor, code0: torch.Tensor) -> None:
        self.history.index_put_((slots, code0), self._true.expand(slots.shape[0]))

    def decode_filler(self, items: Sequence[DecodeItem]):
        """The fill function of the decode stage for these items (also used by the benchmarks)."""
        def fill(b: DecodeBuffers, size: int) -> None:
            self._fill_decode(b, size, [i.text_id for i in items], [i.request.slot for i in items],
                              [SeqSlice(i.request.pages, 1, i.position + 1) for i in items])
        return fill

    def _fill_decode(self, b: DecodeBuffers, size: int, text_ids: Sequence[int], slots: Sequence[int],
                     seqs: Sequence[SeqSlice], sub: int = 0) -> None:
        """Text ids and slots (padding rows: 0 and the scratch slot) in one upload, then the attention
        context's fill; the sampling parameters are already on the device, in the slots' rows."""
        n = len(text_ids)
        assert size == b.ids.shape[1], (size, b.ids.shape)
        host = b.staging.take().reshape(2, size)
        host[0, :n] = text_ids
        host[0, n:] = 0
        host[1, :n] = slots
        host[1, n:] = self.scratch_slot
        b.staging.upload(b.ids)
        if self.tokens_per_frame > 1:  # one LM token a frame: always sub-step 0, never uploaded
            b.sub.fill_(sub)
        b.attn.fill(seqs)

    def run_codec(self, jobs: Sequence[CodecJob]) -> list[np.ndarray]:
        """Audio for each job (float32, mono, the model's rate), at once: the time-shared loop's codec step."""
        launch = self.launch_codec(jobs, BACKGROUND)
        launch.wait()
        return launch.results()

    @torch.inference_mode()
    def launch_codec(self, jobs: Sequence[CodecJob], lane: str = BACKGROUND, timing: bool = False) -> "CodecLaunch":
        """Starts decoding `jobs` on `lane` and returns at once on the GPU (the audio lands in pinned host
        memory; `CodecLaunch.is_done()` polls its event). Jobs of one request are never in one launch: the
        scheduler keeps one chunk per request in flight, and the codec state is per slot."""
        stages = self.codec_stages_by_lane.get(lane, self.codec_stages)
        is_cuda = self.cfg.device.type == "cuda"
        # a lagging codec: each request's last chunk also returns the held-back tail (finish_codec); a last
        # chunk is never padded (its padding frames would be decoded as frames of the request)
        delay = self.program.codec_delay_samples
        launch = CodecLaunch(lane=lane, jobs=list(jobs), launched_ns=time.monotonic_ns(), delay_samples=delay)
        groups: dict[int, list[int]] = {}  # launch size -> jobs
        sizes = sorted(stages)
        for i, job in enumerate(jobs):
            if job.num_frames == 0:
                launch.empty.append(i)
                continue
            frames = job.num_frames
            if frames not in stages and job.is_last and frames < sizes[-1] and not delay:
                # a last chunk of an odd size runs padded to the next captured size; the codec is causal, so
                # the audio of its real frames is exact and the rest is cut (the slot's state is not used again)
                frames = min(s for s in sizes if s > frames)
            groups.setdefault(frames, []).append(i)
        limit = self.cfg.max_codec_batch
        batches = [(frames, idx[i:i + limit]) for frames, idx in groups.items() for i in range(0, len(idx), limit)]
        with self.lanes.on(lane):
            if is_cuda and timing:
                launch.start_event = torch.cuda.Event(enable_timing=True)
                launch.start_event.record()
            for frames, idx in batches:
                stage = stages.get(frames)
                if stage is None:  # a size outside the schedule and not a last chunk: eagerly
                    stage = GraphedStage(f"codec[{frames}f]", [], lambda b, g, f=frames: self._make_codec_buffers(b, f),
                                         self._codec_body, False)
                group = [jobs[i] for i in idx]
                n = len(group)

                def fill(b: CodecBuffers, size: int, group=group, frames=frames) -> None:
                    upload_into(b.codes, torch.from_numpy(_chunk_codes(group, size, frames, self.program.num_codebooks)))
                    slots = [job.request.slot for job in group] + [self.scratch_slot] * (size - len(group))
                    upload_into(b.slots, torch.tensor(slots, dtype=torch.int64))

                audio = stage.run(n, fill).audio[:n]
                if is_cuda:
                    host = torch.empty(audio.shape, dtype=audio.dtype, pin_memory=True)
                    host.copy_(audio, non_blocking=True)
                else:
                    host = audio.clone()
                launch.parts.append((idx, host))
            last = [i for i, job in enumerate(jobs) if job.is_last] if delay else []
            if last:  # after the last chunks' own frames, on the same stream
                slots = upload(torch.tensor([jobs[i].request.slot for i in last], dtype=torch.int64), self.cfg.device)
                tail = self.program.finish_codec(slots, self.codec_state)
                host = torch.empty(tail.shape, dtype=tail.dtype, pin_memory=True) if is_cuda else tail.clone()
                if is_cuda:
                    host.copy_(tail, non_blocking=True)
                launch.tails.append((last, host))
            if is_cuda:
                launch.event = torch.cuda.Event(enable_timing=timing)
                launch.event.record()
        launch.samples_per_frame = self.program.samples_per_frame
        return launch
