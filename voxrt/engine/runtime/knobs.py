"""The GPU kernels' environment knobs, parsed without torch: the kernels (runtime/kernels/) read them at each
launch, and `voxrt serve` checks them all before anything starts (`check_env`), in a process that must not import
torch (the gateway: tests/gateway/test_gc_settle.py). Each parser raises ValueError naming what is allowed.

- `VOXRT_PDL`: programmatic dependent launch of the frame's Triton kernels: `auto` (default), `on`, `off`
  (kernels/__init__.py says what each does and what was measured).
- `VOXRT_GEMV`: the one-row products' grid, first tiles, pipelined loop and warps, and the tensor-core
  product's most K splits (`splitk`; kernels/gemv.py).
- `VOXRT_SAMPLER_SEARCH`: the sampler's top-k / top-p threshold search (kernels/sampling.py).
- `VOXRT_SAMPLER_WARPS`: the sampler kernel's warps (1, 2, 4, 8 or 16; unset: 8 for vocabularies of 2048 and
  more, 4 below; kernels/sampling.py).
- `VOXRT_PAGED_DECODE_CONFIG`: the talker's paged decode attention kernel's tile (kernels/paged_decode.py).
- `VOXRT_DECODE_ATTENTION`: the talker's decode attention kernel (runtime/attention.py).
- `VOXRT_PAGED_DECODE_ROPE`: `on` (default) or `off`: where the paged decode kernel runs (above 8 rows), the
  talker's q/k norm, rotary and K/V write inside it instead of in a kernel before it (kernels/paged_decode.py:
  28 launches fewer a frame). On an H100 the frame at 64 rows 5.003-5.025 -> 4.902 ms, at 128 5.782-5.809 -> 5.716
  (bench/results/2026-12-07-h100-launch-cuts/).
- `VOXRT_PREDICTOR_QKV_TABLE`: `on` (default) or `off`: the Qwen3-TTS code predictor's layer-0 q/k/v of steps
  1-14 as a table lookup (each code's input row through layer 0's packed projection, precomputed at load: 235 MB
  for the 1.7B and 0.6B) that the sampler gathers with the next input row, instead of a product a step
  (models/qwen3_tts/fused.py: 14 launches fewer a frame). On an H100 alone 4.940 ms at 64 rows, 5.741 at 128; with
  the rotary inside the paged decode 4.890-4.896 / 5.675-5.710 (the same run). `off` saves its memory.
- `VOXRT_GLUE_KERNELS`: `on` (default) or `off`: ~37 small launches a frame fewer: Qwen3-TTS's code 0 with its
  processors (repetition penalty, EOS rule, frame 1's tag) inside its sampler kernel, the slots' sampling
  parameters gathered in one kernel (kernels/gather.py), the code predictor's first inputs and the talker's decode
  input in one kernel each. On an H100 the frame at 64 rows 4.895-4.919 -> 4.815-4.825 ms, at 1 row 3.388-3.396 ->
  3.327-3.340 (bench/results/2026-12-07-h100-glue/).
- `VOXRT_CODEC_CHANNELS_LAST`: `on` (default) or `off`: the Qwen3-TTS codec's decoder blocks on channels-last
  activations ([B, T, C] memory: cuDNN's native layout, no conversions; products over the samples' rows). On an
  H100 a 25-frame chunk at batch 32 took 20.84 ms against 23.45 (bench/results/2026-12-06-h100-codec-cl/).
- `VOXRT_CODEC_CONV`: the Qwen3-TTS codec's dilated convs as one Triton kernel each (kernels/tap_conv.py): `off`
  (default), `timed` (a third candidate of the per-shape timed choice beside cuDNN and the cuBLAS products: a
  shape where it loses keeps the faster), `all` (every such conv). On channels-last data it ran the 96-channel
  convs in 0.72 ms against cuDNN's 1.11 on an H100, but slower than cuDNN on plain data; the whole codec with it
  timed not yet measured at the current block sizes, and it adds to the start-up's timing.
- `VOXRT_CODEC_FUSED_UNIT`: the codec's residual units of <= 256 channels as one kernel each
  (kernels/residual_unit.py): `off` (default), `timed`, `all`. Slower than the unfused unit at every measured
  shape on an H100 (2.36-2.84 against 1.26-1.98 ms at 25 x 32), so off.
- `VOXRT_BLAS_SM_TARGET`: `off` (default) or `lanes`: each green-context lane's graphs captured with cuBLAS
  choosing its kernels for that lane's SM count instead of the whole GPU's (runtime/cublas.py). Measured slower
  on an H100 (the frame on the LM's 68-SM partition 6.34 -> 7.27 ms at batch 64, 8.34 -> 9.19 at 128;
  bench/results/2026-12-06-h100-levers/), so it stays off.
- `VOXRT_LM_LANE`: `partition` (default), `whole` or `idle`: with green-context lanes, where the LM's graphs run. `partition`:
  on the SMs the background codec lane leaves (68 of 132 for Qwen3-TTS), where a frame costs ~1.44x the whole GPU's
  (bench/results/2026-12-07-h100-lane-frame/). `whole`: on the whole GPU at the lowest stream priority, the
  background codec lane on its partition one priority above it: the codec keeps first call on its SMs (its blocks
  go first whenever both wait), the LM takes the SMs the codec leaves idle (runtime/lanes.py). On an H200 at max
  batch 256 it held more past the knee (86.1 against 76.3% at 160 req/s) and less below it (92.9 against 98.4% at
  152, 3-4x the stalls): the same capacity, so `partition` stays (bench/results/2026-12-07-h200-lm-lane/). `idle`:
  step by step, the whole GPU for a step that starts while the background codec lane idles (nothing in flight,
  nothing planned), the partition otherwise (sched/sm_modes.py, CodecIdleLmMode). On an H100 under load the codec
  lane was idle at 4% of step starts: 57.1 / 48.0% against 56.8 / 43.4% at 160 / 168 req/s, next to nothing, so it
  stays off (bench/results/2026-12-07-h100-lm-idle/).
"""

from __future__ import annotations

import functools
import os

PDL_MODES = ("auto", "on", "off")
GEMV_KEYS = {"programs": "TARGET_PROGRAMS", "first": "PLAIN_FIRST_ELEMENTS", "pipe": "PIPELINE", "warps": "WARPS",
             "pdlfirst": "PREFETCH_ELEMENTS", "splitk": "SKINNY_SPLIT_K"}
SAMPLER_SEARCHES = ("rounds", "sort", "rounds16", "radix")
DECODE_KERNELS = ("auto", "cuda-cores", "fa2-nosplit", "fa3", "triton")
BLAS_SM_TARGETS = ("off", "lanes")
LM_LANES = ("partition", "whole", "idle")
CODEC_CONV_MODES = ("off", "timed", "all")
CODEC_FUSED_UNIT_MODES = ("off", "timed", "all")
ON_OFF = ("on", "off")  # a switch that is on unless set off
OFF_ON = ("off", "on")  # a switch that is off unless set on
DEFAULT_SAMPLER_SEARCH = "radix"  # fastest measured (kernels/sampling.py); bench/pick_tuned.py's COMMITTED_SEARCH


def pdl_mode() -> str:
    """`VOXRT_PDL`: `auto` (the default: PDL for launches of at most kernels.PDL_AUTO_MAX_ROWS rows), `on` / `1`
    (every launch), `off` / `0`."""
    raw = os.environ.get("VOXRT_PDL", "auto").strip().lower() or "auto"
    mode = {"1": "on", "true": "on", "yes": "on", "0": "off", "false": "off", "no": "off"}.get(raw, raw)
    if mode not in PDL_MODES:
        raise ValueError(f"VOXRT_PDL={raw!r}; expected auto, on (1) or off (0)")
    return mode


def gemv_settings(value: str | None = None) -> dict[str, int]:
    """`VOXRT_GEMV` (e.g. `programs=512,first=16384,pipe=1,warps=8`) as {key: int}, over nothing: kernels/gemv.py
    puts its module defaults under it. Read at every product's launch: the parse is cached per value."""
    return dict(_gemv_items(os.environ.get("VOXRT_GEMV", "") if value is None else value))


@functools.lru_cache(maxsize=16)
def _gemv_items(value: str) -> tuple[tuple[str, int], ...]:
    out: dict[str, int] = {}
    for item in filter(None, (part.strip() for part in value.split(","))):
        key, sep, raw = item.partition("=")
        key = key.strip().lower()
        if not sep or key not in GEMV_KEYS:
            raise ValueError(f"VOXRT_GEMV: {item!r}; expected key=value pairs with keys {', '.join(GEMV_KEYS)}")
        try:
            number = int(raw)
        except ValueError:
            raise ValueError(f"VOXRT_GEMV: {key}={raw!r} is not an integer") from None
        ok = {"programs": number >= 1, "first": number >= 0, "pipe": number in (0, 1),
              "warps": number in (1, 2, 4, 8, 16), "pdlfirst": number >= 0,
              "splitk": number in (1, 2, 4, 8, 16, 32, 64)}[key]
        if not ok:
            raise ValueError(f"VOXRT_GEMV: {key}={number} out of range (programs >= 1, first and pdlfirst >= 0, "
                             "pipe 0 or 1, warps a power of two up to 16, splitk a power of two up to 64)")
        out[key] = number
    return tuple(out.items())


def sampler_search() -> str:
    """`VOXRT_SAMPLER_SEARCH` (`radix`, the default, `rounds`, `sort` or `rounds16`)."""
    search = os.environ.get("VOXRT_SAMPLER_SEARCH", DEFAULT_SAMPLER_SEARCH).strip().lower() or DEFAULT_SAMPLER_SEARCH
    if search not in SAMPLER_SEARCHES:
        raise ValueError(f"VOXRT_SAMPLER_SEARCH={search!r}; expected one of {', '.join(SAMPLER_SEARCHES)}")
    return search


def sampler_warps() -> int | None:
    """`VOXRT_SAMPLER_WARPS` (1, 2, 4, 8 or 16), None when unset."""
    env = os.environ.get("VOXRT_SAMPLER_WARPS", "").strip()
    if not env:
        return None
    if env not in ("1", "2", "4", "8", "16"):
        raise ValueError(f"VOXRT_SAMPLER_WARPS={env!r}: expected 1, 2, 4, 8 or 16")
    return int(env)


def paged_decode_config() -> list[int]:
    """`VOXRT_PAGED_DECODE_CONFIG` (`BLOCK_T[,WARPS[,STAGES]]`) as the values given ([] when unset)."""
    env = os.environ.get("VOXRT_PAGED_DECODE_CONFIG", "").strip()
    if not env:
        return []
    try:
        values = [int(v) for v in env.split(",")]
    except ValueError:
        values = []
    if not 1 <= len(values) <= 3 or any(v <= 0 for v in values) or values[0] & (values[0] - 1) or values[0] < 16:
        raise ValueError(f"VOXRT_PAGED_DECODE_CONFIG={env!r}: expected BLOCK_T[,WARPS[,STAGES]] (BLOCK_T a power "
                         "of two >= 16, the others positive integers)")
    return values


def decode_attention() -> str:
    """`VOXRT_DECODE_ATTENTION` (`auto`, the default, or one of DECODE_KERNELS)."""
    kernel = os.environ.get("VOXRT_DECODE_ATTENTION", "") or "auto"
    if kernel not in DECODE_KERNELS:
        raise ValueError(f"VOXRT_DECODE_ATTENTION={kernel!r}: choose one of {', '.join(DECODE_KERNELS)}")
    return kernel


def paged_decode_rope() -> bool:
    """`VOXRT_PAGED_DECODE_ROPE`: `on` (the default) or `off` (runtime/attention.py, PagedDecodeAttention)."""
    return _mode_knob("VOXRT_PAGED_DECODE_ROPE", ON_OFF) == "on"


def predictor_qkv_table() -> bool:
    """`VOXRT_PREDICTOR_QKV_TABLE`: `on` (the default) or `off` (models/qwen3_tts/fused.py, read at load)."""
    return _mode_knob("VOXRT_PREDICTOR_QKV_TABLE", ON_OFF) == "on"


def glue_kernels() -> bool:
    """`VOXRT_GLUE_KERNELS`: `on` (the default) or `off`: the small launches around the frame's kernels cut, read
    at load (models/qwen3_tts/fused.py: code 0's repetition penalty and EOS rule inside its sampler kernel, the
    code predictor's first inputs and the talker's decode input in one kernel each; runtime/sampling.py's
    SlotSampling: the six sampling parameters gathered in one kernel)."""
    return _mode_knob("VOXRT_GLUE_KERNELS", ON_OFF) == "on"


def _mode_knob(name: str, modes: tuple[str, ...]) -> str:
    """An environment knob whose first mode is its default (unset, empty), `off` also spelled 0, no, false;
    ValueError naming the modes for anything else not among them."""
    raw = os.environ.get(name, modes[0]).strip().lower() or modes[0]
    mode = {"0": "off", "no": "off", "false": "off"}.get(raw, raw)
    if mode not in modes:
        raise ValueError(f"{name}={raw!r}; expected {', '.join(modes[:-1])} or {modes[-1]}")
    return mode


def blas_sm_target() -> str:
    """`VOXRT_BLAS_SM_TARGET`: `off` (the default: cuBLAS picks its kernels for the whole GPU) or `lanes` (for the
    SMs of the green-context lane a graph is captured on)."""
    return _mode_knob("VOXRT_BLAS_SM_TARGET", BLAS_SM_TARGETS)


def lm_lane() -> str:
    """`VOXRT_LM_LANE`: `partition` (the default: the LM's graphs on the SMs the codec partition leaves), `whole`
    (on the whole GPU below the codec lane's priority) or `idle` (the whole GPU for the steps that start while the
    background codec lane idles), read when the lanes are made (runtime/lanes.py)."""
    return _mode_knob("VOXRT_LM_LANE", LM_LANES)


def codec_conv() -> str:
    """`VOXRT_CODEC_CONV`: `off` (the default), `timed` or `all` (models/qwen3_tts/codec_layers.py,
    CausalConv.set_tap_kernel)."""
    return _mode_knob("VOXRT_CODEC_CONV", CODEC_CONV_MODES)


def codec_channels_last() -> bool:
    """`VOXRT_CODEC_CHANNELS_LAST`: `on` (the default) or `off` (models/qwen3_tts/codec.py,
    Qwen3TTSCodec.set_kernel_impl's `channels_last`)."""
    return _mode_knob("VOXRT_CODEC_CHANNELS_LAST", ON_OFF) == "on"


def codec_fused_unit() -> str:
    """`VOXRT_CODEC_FUSED_UNIT`: `off` (the default), `timed` or `all` (models/qwen3_tts/codec_layers.py,
    ResidualUnit.set_fused)."""
    return _mode_knob("VOXRT_CODEC_FUSED_UNIT", CODEC_FUSED_UNIT_MODES)


def check_env() -> None:
    """Every knob above, parsed: a bad one raises ValueError (`voxrt serve` turns it into a usage error)."""
    decode_attention()
    pdl_mode()
    gemv_settings()
    sampler_search()
    sampler_warps()
    paged_decode_config()
    paged_decode_rope()
    predictor_qkv_table()
    glue_kernels()
    blas_sm_target()
    lm_lane()
    codec_conv()
    codec_channels_last()
    codec_fused_unit()
