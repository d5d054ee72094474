"""Where each kind of GPU work runs (issue 7): the LM lane, a background codec lane, an urgent lane.

Modes (`EngineConfig.lanes`, `voxrt serve --lanes`):

- `off`: the time-shared synchronous loop. LM step, then the step's codec chunks, on one stream, in order.
  The baseline every improvement is measured against.
- `green`: the LM lane and the background codec lane on disjoint SM partitions from ONE split of the GPU's
  SMs (`cuDevSmResourceSplitByCount`: separately created green contexts overlap), the urgent lane on the whole
  GPU at high stream priority. `codec_sms` SMs go to the codec lane (rounded to the driver's groups of 8).
- `streams`: the same three lanes as CUDA streams without partitions (LM normal, background low priority,
  urgent high priority): used when green contexts are unavailable.
- `inline`: the lane logic without a GPU: launches run at once, in order. What `auto` means on the CPU is
  `off`; `inline` exists so that the lane bookkeeping is tested on the CPU.
- `auto`: `green` on CUDA when the driver bindings allow it, else `streams`; `off` on the CPU.

`VOXRT_LM_LANE=whole` (runtime/knobs.py) changes where the LM runs with green contexts: on the whole GPU at the
lowest stream priority instead of its partition, the background codec lane on its partition one priority above
the LM. The codec's SMs stay the codec's (its blocks go first there whenever both wait; a running LM block
finishes first, blocks are not preempted), and the LM takes whatever SMs the codec leaves idle, instead of a
fixed share. `partition` (the default) keeps the LM off the codec's SMs altogether. `idle` switches between the two
step by step: two SM modes over the one codec split, the LM on its partition (mode 0) or on the whole GPU (mode 1),
the background codec stream shared; `sched/sm_modes.py`'s `CodecIdleLmMode` runs a step on the whole GPU when it
starts with the background lane idle (no launch in flight, none in the step's plan), so a background launch meets
at most the tail of one such step on its SMs instead of every step (`whole` measured 3-4x the stalled streams).

A CUDA graph keeps the SM partition and the priority of the stream it was captured on, so each lane captures
its own graphs (and its own graph memory pool: two lanes replay at the same time).

SM modes (`--sm-modes 32,64 --sm-mode adaptive`): with green contexts, one split per codec SM count, each a
`LaneMode` (its LM and background streams); the LM and background graphs are captured once per mode. One mode
is active at a time (`set_mode`, at a step boundary: the LM step waits for its codes and a lane keeps one
launch in flight, so old and new streams never run the same lane's work at once). `--sm-mode N` fixes mode N;
`adaptive` lets `sched/sm_modes.py` move between them. Without green contexts there is one mode.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from voxrt.engine.runtime import knobs
from voxrt.engine.sched.plan import BACKGROUND, URGENT

log = logging.getLogger("voxrt.engine.lanes")

LANE_MODES = ("auto", "off", "green", "streams", "inline")
LM = "lm"


@dataclass
class LaneMode:
    """One SM split: the LM and background codec streams on its partitions (none on the CPU)."""

    streams: dict[str, Any] = field(default_factory=dict)  # LM / BACKGROUND -> torch stream
    sm_counts: dict[str, int] = field(default_factory=dict)  # LM / BACKGROUND -> SMs


@dataclass
class Lanes:
    mode: str  # resolved: off, green, streams or inline
    streams: dict[str, Any] = field(default_factory=dict)  # LM / URGENT / BACKGROUND -> torch stream (cuda)
    pools: dict[str, Any] = field(default_factory=dict)  # lane -> graph memory pool handle (cuda)
    sm_counts: dict[str, int] = field(default_factory=dict)  # green: SMs of the LM and background partitions
    note: str = ""  # why this mode (a fallback names its reason)
    lm_lane: str = "partition"  # where the LM runs beside the codec partition (VOXRT_LM_LANE; green and inline)
    sm_modes: list[LaneMode] = field(default_factory=list)  # several SM splits (green, or inline on the CPU)
    active: int = 0  # index into sm_modes

    @property
    def num_sm_modes(self) -> int:
        return max(1, len(self.sm_modes))

    def set_mode(self, index: int) -> bool:
        """Makes SM mode `index` the active one (its LM and background streams); True when it changed. The new
        LM stream waits for the old one, so the LM's work stays in order across the switch."""
        if not 0 <= index < self.num_sm_modes:
            raise ValueError(f"SM mode {index} out of range: {self.num_sm_modes} modes")
        if index == self.active or not self.sm_modes:
            return False
        old_lm = self.streams.get(LM)
        self.active = index
        chosen = self.sm_modes[index]
        self.streams.update(chosen.streams)
        self.sm_counts = dict(chosen.sm_counts)
        new_lm = self.streams.get(LM)
        if old_lm is not None and new_lm is not None and new_lm is not old_lm:
            new_lm.wait_stream(old_lm)
        return True

    @property
    def enabled(self) -> bool:
        """Codec lanes run beside the LM (every mode but `off`)."""
        return self.mode != "off"

    @property
    def is_async(self) -> bool:
        return self.mode in ("green", "streams")

    def on(self, lane: str):
        """Context manager: run the enclosed work on `lane`'s stream (nothing on the CPU or without lanes)."""
        stream = self.streams.get(lane)
        return torch.cuda.stream(stream) if stream is not None else contextlib.nullcontext()

    def stream(self, lane: str):
        return self.streams.get(lane)

    def blas_sm_count(self, lane: str) -> int | None:
        """The SM count cuBLAS chooses kernels for while `lane`'s graphs are captured (runtime/cublas.py): its
        partition's with green lanes and `VOXRT_BLAS_SM_TARGET=lanes`; None (the whole GPU) otherwise, and for
        the urgent lane, which runs on the whole GPU."""
        if self.mode != "green" or knobs.blas_sm_target() != "lanes":
            return None
        return self.sm_counts.get(lane)

    def pool(self, lane: str):
        return self.pools.get(lane)

    def describe(self) -> str:
        lm_where = {"whole": " (LM on the whole GPU at the lowest priority, the codec partition above it)",
                    "idle": " (LM on its partition, or on the whole GPU below the codec partition's priority for "
                            "steps that start while the background codec lane idles)"}.get(self.lm_lane, "")
        if self.mode == "green" and len(self.sm_modes) > 1 and self.lm_lane != "idle":
            splits = ", ".join(f"{m.sm_counts.get(LM)}/{m.sm_counts.get(BACKGROUND)}" for m in self.sm_modes)
            return (f"lanes: green contexts, {len(self.sm_modes)} SM modes (LM/background codec SMs: {splits}) | "
                    f"urgent lane on the whole GPU at high priority{lm_where}")
        if self.mode == "green":  # one split (idle's two modes share it: its first names the LM's partition)
            counts = self.sm_modes[0].sm_counts if self.lm_lane == "idle" else self.sm_counts
            return (f"lanes: green contexts, LM {counts.get(LM)} SMs | background codec "
                    f"{counts.get(BACKGROUND)} SMs | urgent lane on the whole GPU at high priority{lm_where}")
        if self.mode == "streams":
            return f"lanes: CUDA streams without SM partitions ({self.note})" if self.note else \
                "lanes: CUDA streams without SM partitions"
        if self.mode == "inline":
            modes = f", {len(self.sm_modes)} SM modes (bookkeeping only)" if len(self.sm_modes) > 1 else ""
            return f"lanes: in order on the host (no GPU): lane bookkeeping, no overlap{modes}"
        return f"lanes off: time-shared synchronous loop (LM step, then codec, one stream){self.note}"


def make_lanes(mode: str, device: torch.device, codec_sms: int | Sequence[int] | None = None,
               codec_share: float = 0.5) -> Lanes:
    """The lanes of `mode` on `device`. `codec_sms`: the background codec lane's SM count, or one per SM mode
    (green contexts; inline lanes on the CPU keep the modes for their bookkeeping); None: `codec_share` of the
    GPU's SMs (the model program's `codec_sm_share`)."""
    if not 0 < codec_share < 1:
        raise ValueError(f"codec_share must be between 0 and 1, got {codec_share}")
    if mode not in LANE_MODES:
        raise ValueError(f"unknown lanes mode {mode!r}; choose one of {', '.join(LANE_MODES)}")
    counts = [codec_sms] if codec_sms is None or isinstance(codec_sms, int) else list(codec_sms)
    if not counts:
        raise ValueError("codec_sms: give at least one SM count")
    if device.type != "cuda":
        if mode in ("green", "streams"):
            return Lanes("off", note=f" ({mode} lanes need a CUDA device)")
        if mode == "inline":
            lm_lane = knobs.lm_lane()
            if lm_lane == "idle":  # the bookkeeping of the two modes: partition, whole GPU
                check_idle_counts(counts)
                modes = [LaneMode(sm_counts={BACKGROUND: counts[0]}), LaneMode(sm_counts={BACKGROUND: counts[0]})]
            else:
                modes = [LaneMode(sm_counts={BACKGROUND: c}) for c in counts] if len(counts) > 1 else []
            return Lanes("inline", sm_modes=modes, lm_lane=lm_lane)
        return Lanes("off", note="" if mode != "auto" else " (no GPU)")
    if mode == "inline":
        raise ValueError("lanes mode 'inline' is for the CPU; on CUDA use auto, green, streams or off")
    if mode == "off":
        return Lanes("off")
    lanes = Lanes("streams")
    index = device.index if device.index is not None else torch.cuda.current_device()
    low, high = _priority_range()
    placement = lm_placement(knobs.lm_lane(), low, high)
    if placement.lane == "idle":
        check_idle_counts(counts)
    if mode in ("auto", "green"):
        try:
            modes = []
            total = torch.cuda.get_device_properties(index).multi_processor_count
            whole_lm = torch.cuda.Stream(device, priority=placement.lm_priority) if placement.whole_stream else None
            for count in counts:
                count = default_codec_sms(total, codec_share) if count is None else count
                lm_stream, bg_stream, sm_counts = green_streams(index, count, placement.background_priority)
                if placement.lane == "idle":  # mode 0 on the partition, mode 1 on the whole GPU; one codec stream
                    modes.append(LaneMode({LM: lm_stream, BACKGROUND: bg_stream}, sm_counts))
                if whole_lm is not None:
                    lm_stream, sm_counts = whole_lm, {**sm_counts, LM: total}
                modes.append(LaneMode({LM: lm_stream, BACKGROUND: bg_stream}, sm_counts))
            lanes = Lanes("green", streams=dict(modes[0].streams), sm_counts=dict(modes[0].sm_counts),
                          sm_modes=modes if len(modes) > 1 else [], lm_lane=placement.lane)
        except Exception as exc:  # noqa: BLE001 (no driver bindings, an old driver, MIG: fall back, say why)
            if mode == "green":
                raise RuntimeError(f"green contexts unavailable: {type(exc).__name__}: {exc}") from exc
            lanes.note = f"green contexts unavailable: {type(exc).__name__}: {exc}"
    if lanes.mode == "streams" and len(counts) > 1:
        lanes.note = (lanes.note + "; " if lanes.note else "") + "one SM mode: SM modes need green contexts"
    if lanes.mode == "streams" and placement.lane != "partition":
        lanes.note = (lanes.note + "; " if lanes.note else "") + \
            f"VOXRT_LM_LANE={placement.lane} ignored: it needs green contexts (every lane is on the whole GPU here)"
    if lanes.mode == "streams":
        lanes.streams[LM] = torch.cuda.Stream(device)
        lanes.streams[BACKGROUND] = torch.cuda.Stream(device, priority=low)
    lanes.streams[URGENT] = torch.cuda.Stream(device, priority=high)
    for lane in (LM, URGENT, BACKGROUND):
        lanes.pools[lane] = torch.cuda.graph_pool_handle()
    return lanes


@dataclass(frozen=True)
class LmPlacement:
    """Where green lanes put the LM (`VOXRT_LM_LANE`) and the stream priorities that go with it."""

    lane: str  # partition, whole or idle (knobs.LM_LANES)
    lm_priority: int  # the whole-GPU LM stream's priority (whole, idle)
    background_priority: int | None  # the codec partition's stream priority; None: the driver's default

    @property
    def whole_stream(self) -> bool:
        """The LM gets a whole-GPU stream (for every step, or for the steps `idle` picks)."""
        return self.lane != "partition"


def lm_placement(lane: str, low: int, high: int) -> LmPlacement:
    """`partition`: the LM on its own partition, both partitions' streams at the default priority. `whole` and
    `idle`: the whole-GPU LM stream at the lowest priority `low`, the background codec one above it (CUDA counts
    priorities down: `high` is the most negative), so the codec's blocks go first on its SMs; on a GPU with a
    single priority level both share it (the codec then keeps its SMs only by arriving first)."""
    if lane not in knobs.LM_LANES:
        raise ValueError(f"LM lane {lane!r}; expected one of {', '.join(knobs.LM_LANES)}")
    if lane == "partition":
        return LmPlacement(lane, low, None)
    return LmPlacement(lane, low, max(high, low - 1))


def check_idle_counts(counts: Sequence[int | None]) -> None:
    """`VOXRT_LM_LANE=idle` makes its own two SM modes over one codec split: one codec SM count at most."""
    if len(counts) > 1:
        raise ValueError(f"VOXRT_LM_LANE=idle switches the LM between its partition and the whole GPU beside one "
                         f"codec split; give one --sm-modes count, not {list(counts)}")


def _priority_range() -> tuple[int, int]:
    """(lowest, highest) stream priority; CUDA counts down: the highest priority is the most negative."""
    try:
        low, high = torch.cuda.Stream.priority_range()
        return low, high
    except Exception:  # noqa: BLE001
        return 0, -1


def default_codec_sms(total_sms: int, codec_share: float) -> int:
    """The background codec lane's SMs when no count is given: `codec_share` of the GPU, at least one, leaving
    the LM at least one (the driver then rounds up to its groups of 8)."""
    return min(total_sms - 1, max(1, round(total_sms * codec_share)))


def green_streams(device_index: int, codec_sms: int | None,
                  codec_priority: int | None = None) -> tuple[Any, Any, dict[str, int]]:
    """Two streams on disjoint SM partitions of one split: (LM stream, codec stream, SM counts), through
    FlashInfer's green-context helpers (cuda-python driver bindings underneath). The codec lane gets
    `codec_sms` (rounded up to the driver's granularity, 8 on Hopper; `make_lanes` passes the program's
    `codec_sm_share` of the GPU when none is given), the LM lane the remaining SMs. `codec_priority`: the codec
    stream's priority (FlashInfer's streams have the default, 0)."""
    from flashinfer.green_ctx import split_device_green_ctx_by_sm_count  # noqa: PLC0415 (GPU only)

    device = torch.device("cuda", device_index)
    total = torch.cuda.get_device_properties(device).multi_processor_count
    if codec_sms is None:
        codec_sms = total // 2
    if not 0 < codec_sms < total:
        raise ValueError(f"codec SMs must be between 1 and {total - 1} on this GPU, got {codec_sms}")
    streams, resources = split_device_green_ctx_by_sm_count(device, [codec_sms])
    codec_stream, lm_stream = streams[0], streams[1]
    if codec_priority is not None:
        codec_stream = _green_stream(device, resources[0], codec_priority)
    counts = {BACKGROUND: int(resources[0].sm.smCount), LM: int(resources[1].sm.smCount)}
    return lm_stream, codec_stream, counts


def _green_stream(device: torch.device, resource: Any, priority: int) -> Any:
    """A stream at `priority` on a green context over `resource` (an SM partition from the split above): the
    driver calls FlashInfer's helper makes, with a priority it does not take."""
    from cuda.bindings import driver  # noqa: PLC0415 (GPU only)
    from flashinfer.cuda_utils import checkCudaErrors  # noqa: PLC0415
    from flashinfer.green_ctx import get_cudevice  # noqa: PLC0415

    cu_dev = get_cudevice(device)
    desc = checkCudaErrors(driver.cuDevResourceGenerateDesc([resource], 1))
    ctx = checkCudaErrors(driver.cuGreenCtxCreate(desc, cu_dev, driver.CUgreenCtxCreate_flags.CU_GREEN_CTX_DEFAULT_STREAM))
    stream = checkCudaErrors(driver.cuGreenCtxStreamCreate(ctx, driver.CUstream_flags.CU_STREAM_NON_BLOCKING, priority))
    return torch.cuda.get_stream_from_external(stream)
