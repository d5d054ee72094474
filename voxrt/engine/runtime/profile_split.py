"""`voxrt profile-split`: LM and codec throughput for each SM split of the GPU, and the split to use.

For each split (the background codec lane's SM count, the LM lane gets the rest, both from one green-context
split) the LM frame (talker decode + code predictor, graphs, `batch` requests with `context` tokens of KV)
and a background codec launch (`codec_batch` chunks of the program's full chunk size) are timed alone and
then together, each on its own lane. The whole GPU with the two run one after the other (the time-shared
loop) is the first row. Throughputs are in audio seconds per second: the LM makes `batch` frames per step,
the codec decodes `codec_batch x frames` frames per launch. The recommended split maximizes the smaller of
the two when they run together (a pipeline runs at the speed of its slower stage).
"""

from __future__ import annotations

import logging

import torch

from voxrt.engine.messages import EngineConfig, SubmitRequest
from voxrt.engine.params import SamplingParams
from voxrt.engine.runtime.lanes import LM
from voxrt.engine.runtime.probe import lane_time_ms
from voxrt.engine.sched.plan import BACKGROUND

log = logging.getLogger("voxrt.engine.profile_split")


def _elapsed_ms(start, end) -> float:
    end.synchronize()
    return start.elapsed_time(end)


def _measure(core, batch: int, codec_batch: int, context: int, iters: int) -> dict:
    runner = core.runner
    lanes = runner.lanes
    spec = core.program.spec
    reqs = [core.submit(SubmitRequest(f"p{i}", core.info.default_voice, SamplingParams(num_frames=context + 64),
                                      "word " * (context + 64), True)) for i in range(batch)]
    while min(r.num_tokens for r in reqs) < context:
        core.step()
    core.finish_lm()
    items = [core.scheduler.next_decode(r) for r in reqs]
    fill = runner.decode_filler(items)
    frames = spec.chunk_frames
    codec = runner.codec_stages_by_lane[BACKGROUND][frames]

    def lm_frame() -> None:
        with lanes.on(LM):
            runner.decode_stage.run(batch, fill)
            runner.depth_stage.run(batch, lambda b, s: None)

    def codec_launch() -> None:
        with lanes.on(BACKGROUND):
            codec.run(codec_batch, lambda b, s: None)

    with torch.inference_mode():
        lm_alone = lane_time_ms(lm_frame, lanes.stream(LM), iters)
        codec_alone = lane_time_ms(codec_launch, lanes.stream(BACKGROUND), max(3, iters // 4))
        if lanes.enabled:  # together, each on its lane, for about the same wall time
            n_lm = iters
            n_codec = max(2, round(iters * lm_alone / codec_alone))
            lm_stream, bg_stream = lanes.stream(LM), lanes.stream(BACKGROUND)
            marks = [torch.cuda.Event(enable_timing=True) for _ in range(4)]
            marks[0].record(lm_stream)
            marks[2].record(bg_stream)
            for i in range(max(n_lm, n_codec)):
                if i < n_codec:
                    codec_launch()
                if i < n_lm:
                    lm_frame()
            marks[1].record(lm_stream)
            marks[3].record(bg_stream)
            lm_shared = _elapsed_ms(marks[0], marks[1]) / n_lm
            codec_shared = _elapsed_ms(marks[2], marks[3]) / n_codec
        else:  # the time-shared loop: one after the other on the whole GPU
            lm_shared, codec_shared = lm_alone, codec_alone
    for r in reqs:
        core.cancel(r.request_id)
    frame_s = spec.frame_ns / 1e9
    lm_rate = batch * frame_s / (lm_shared / 1000)
    codec_rate = codec_batch * frames * frame_s / (codec_shared / 1000)
    if not lanes.enabled:  # one stream: the rate at which both finish a balanced amount of work
        both = 1.0 / (1.0 / (batch * frame_s / (lm_alone / 1000)) + 1.0 / (codec_batch * frames * frame_s / (codec_alone / 1000)))
        lm_rate = codec_rate = both
    return dict(lm_frame_ms_alone=round(lm_alone, 3), lm_frame_ms_shared=round(lm_shared, 3),
                codec_ms_alone=round(codec_alone, 3), codec_ms_shared=round(codec_shared, 3),
                lm_audio_s_per_s=round(lm_rate, 1), codec_audio_s_per_s=round(codec_rate, 1),
                pipeline_audio_s_per_s=round(min(lm_rate, codec_rate), 1))


def profile_split(config: EngineConfig, sm_modes: list[int] | None, batch: int = 64, codec_batch: int | None = None,
                  context: int = 128, iters: int = 20) -> tuple[list[dict], dict | None]:
    """Rows (the time-shared whole GPU first, then one per split) and the recommended row. `codec_batch` None:
    the engine's default on this GPU (`default_max_codec_batch`)."""
    from voxrt.engine.runtime.core import EngineCore, default_max_codec_batch  # noqa: PLC0415
    from voxrt.models.registry import build_program  # noqa: PLC0415

    if not torch.cuda.is_available():
        raise RuntimeError("profile-split needs a CUDA GPU (green contexts split its SMs)")
    device = torch.device(config.device if config.device.startswith("cuda") else "cuda")
    total = torch.cuda.get_device_properties(device).multi_processor_count
    if codec_batch is None:
        codec_batch = default_max_codec_batch(device)
    if not sm_modes:
        sm_modes = list(range(16, total - 15, 16))
    program = build_program(config.model, config.checkpoint)
    rows = []
    for codec_sms in [None] + sm_modes:
        lanes = "off" if codec_sms is None else "green"
        core = EngineCore(EngineConfig(model=config.model, checkpoint=config.checkpoint, device=str(device),
                                       dtype=config.dtype, attention_backend=config.attention_backend,
                                       max_batch_size=batch, max_codec_batch=codec_batch,
                                       max_seq_len=context + 128, num_pages=batch * ((context + 128) // 16 + 2),
                                       lanes=lanes, codec_sms=codec_sms), program=program)
        runner = core.runner
        runner.decode_stage.buckets = [b for b in runner.decode_stage.buckets if b <= 8] + [batch]
        runner.depth_stage.buckets = list(runner.decode_stage.buckets)
        for lane_name, stages in runner.codec_stages_by_lane.items():
            for frames, stage in stages.items():  # the steps before the measurement use a few chunk sizes
                stage.buckets = [b for b in stage.buckets if b <= 4] + [codec_batch] if lane_name == BACKGROUND \
                    else [1]
        runner.capture_graphs()
        row = dict(codec_sms=core.lanes.sm_counts.get(BACKGROUND, total) if codec_sms else None,
                   lm_sms=core.lanes.sm_counts.get(LM, total) if codec_sms else total,
                   mode=core.lanes.mode)
        row.update(_measure(core, batch, codec_batch, context, iters))
        rows.append(row)
        log.info("split %s: %s", codec_sms, row)
        del core, runner
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
    split_rows = [r for r in rows if r["mode"] == "green"]
    best = max(split_rows, key=lambda r: r["pipeline_audio_s_per_s"]) if split_rows else None
    return rows, best


def format_rows(rows: list[dict], best: dict | None) -> str:
    cols = ["codec_sms", "lm_sms", "lm_frame_ms_alone", "lm_frame_ms_shared", "codec_ms_alone", "codec_ms_shared",
            "lm_audio_s_per_s", "codec_audio_s_per_s", "pipeline_audio_s_per_s"]
    lines = ["  ".join(f"{c:>22}" for c in ["split"] + cols)]
    for r in rows:
        name = "time-shared (whole)" if r["mode"] != "green" else f"codec {r['codec_sms']} SMs"
        lines.append("  ".join(f"{str(v):>22}" for v in [name] + [r[c] for c in cols]))
    if best is not None:
        lines.append(f"recommended: --sm-modes {best['codec_sms']} (codec lane {best['codec_sms']} SMs, LM lane "
                     f"{best['lm_sms']} SMs): {best['pipeline_audio_s_per_s']} audio-s/s through both lanes")
    return "\n".join(lines)
