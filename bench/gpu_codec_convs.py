"""Each conv of the Qwen3-TTS codec decoder alone (issue 14): which formulation is fastest per shape.

    python bench/gpu_codec_convs.py --checkpoint /tmp/q17 [--frames 25 --batch 16] --out DIR

The shapes come from one `decode_stream` call (forward hooks on every CausalConv and CausalTransConv). Per
distinct shape, each formulation is captured in a CUDA graph and timed (median of 20 replays):
  ncl       what the codec runs: F.conv1d / F.conv_transpose1d on [B, C, T] (cuDNN, with its layout changes)
  nhwc      the same conv on channels-last data (conv2d over [B, C, 1, T] in channels_last: cuDNN's native
            layout for bf16 tensor cores, no conversions)
  gemm      channels-last [B, T, C] data, the conv as cuBLAS products: a k-tap conv is k accumulated products
            over row-shifted views of the padded input (batch rows flattened: the ctx rows between batch
            entries are computed and dropped); a 1x1 conv one product with the residual added (addmm beta=1);
            a transposed conv (k = 2r, stride r) one product to [B*T, k*Cout] plus the overlap-add
  module    CausalConv.forward with set_products(True): the codec's own products path (NCL in and out:
            a channels-last copy of the padded input, then k batched products)
  tap       a conv with taps as one Triton kernel (kernels/tap_conv.py: NCL in and out, every tap summed in
            float32), the best of TAP_CONFIGS (the default `tap_conv_config` first; the JSON keeps each
            config's time, the default config and the best one's name as `tap_configs`)
  tapcl     the tap kernel on channels-last data ([B, C, L] over [B, L, C] memory in and out), at tap's best config
Each row also checks that the formulation's output equals ncl's (max abs error, bf16). Then each residual
unit shape alone: as the reference composes it (cuDNN convs, bias and residual passes) against the folded
path (codec_layers.ResidualUnit.set_folded, conv1 choosing cuDNN or products by timing), the folded path on
channels-last data (`set_channels_last`), and (up to 256 channels) the unit as one kernel
(kernels/residual_unit.py, `set_fused("all")`) on plain and on channels-last data.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

from voxrt.engine.runtime.kernels.residual_unit import MAX_CHANNELS as FUSED_MAX_CHANNELS
from voxrt.engine.runtime.kernels.tap_conv import tap_conv, tap_conv_config
from voxrt.models.qwen3_tts.codec import load_codec
from voxrt.models.qwen3_tts.codec_layers import CausalConv, CausalTransConv, ResidualUnit
from voxrt.models.qwen3_tts.loader import codec_dir

from graph_timing import graph_ms


# block sizes tried for the tap kernel past its default (BLOCK_O, BLOCK_T, BLOCK_I, warps, stages)
TAP_CONFIGS = [(64, 128, 32, 4, 3), (128, 64, 32, 4, 3), (128, 128, 64, 8, 3), (128, 256, 32, 8, 3),
               (64, 256, 32, 8, 4), (32, 128, 32, 4, 4), (128, 128, 32, 8, 4)]


def tap_rows(conv: torch.nn.Conv1d, xpad: torch.Tensor, ref: torch.Tensor) -> tuple[tuple[float, float], dict]:
    """The tap kernel at its default config and at each of TAP_CONFIGS: ((best ms, its max abs error), times)."""
    taps = conv.weight.detach().permute(2, 0, 1).contiguous()
    d = conv.dilation[0]
    c_out, c_in = taps.shape[1], taps.shape[2]
    configs = [None] + [dict(BLOCK_O=o, BLOCK_T=t, BLOCK_I=i, num_warps=w, num_stages=st)
                        for o, t, i, w, st in TAP_CONFIGS]
    times, best = {}, (float("inf"), float("nan"), None)
    for cfg in configs:
        name = "default" if cfg is None else "o{BLOCK_O}t{BLOCK_T}i{BLOCK_I}w{num_warps}s{num_stages}".format(**cfg)
        try:
            got = tap_conv(xpad, taps, conv.bias, d, "triton", config=cfg)
            ms = graph_ms(lambda cfg=cfg: tap_conv(xpad, taps, conv.bias, d, "triton", config=cfg))
        except Exception as exc:  # noqa: BLE001 (a config the GPU cannot run, e.g. out of shared memory)
            times[name] = f"{type(exc).__name__}"
            continue
        times[name] = round(ms, 4)
        if ms < best[0]:
            best = (ms, (got - ref).abs().max().item(), name)
    times["default_config"] = tap_conv_config(c_in, c_out, ref.shape[-1])
    times["best"] = best[2]
    return (best[0], best[1]), times


def tap_cl_row(conv: torch.nn.Conv1d, xpad: torch.Tensor, ref: torch.Tensor, config: dict | None
               ) -> tuple[float, float]:
    """The tap kernel on channels-last data (the codec's channels-last decoder): [B, C, L] over [B, L, C]
    memory in and out, at the config `tap_rows` found best."""
    taps = conv.weight.detach().permute(2, 0, 1).contiguous()
    xcl = xpad.transpose(1, 2).contiguous().transpose(1, 2)
    d = conv.dilation[0]
    got = tap_conv(xcl, taps, conv.bias, d, "triton", config=config)
    return graph_ms(lambda: tap_conv(xcl, taps, conv.bias, d, "triton", config=config)), (got - ref).abs().max().item()


def conv_rows(conv: torch.nn.Conv1d, context: int, x: torch.Tensor) -> dict:
    """x: [B, C, T] (the conv's input before padding)."""
    batch, cin, time = x.shape
    w, b, d, k = conv.weight, conv.bias, conv.dilation[0], conv.kernel_size[0]
    cout = w.shape[0]
    xpad = F.pad(x, (context, 0)).contiguous()  # [B, C, ctx + T]
    ref = F.conv1d(xpad, w, b, dilation=d)
    out = {}
    out["ncl"] = (graph_ms(lambda: F.conv1d(xpad, w, b, dilation=d)), 0.0)
    x4 = xpad.unsqueeze(2).contiguous(memory_format=torch.channels_last)
    w4 = w.unsqueeze(2).contiguous(memory_format=torch.channels_last)
    y4 = F.conv2d(x4, w4, b, dilation=(1, d))
    out["nhwc"] = (graph_ms(lambda: F.conv2d(x4, w4, b, dilation=(1, d))),
                   (y4.squeeze(2) - ref).abs().max().item())
    xcl = xpad.transpose(1, 2).contiguous()  # [B, ctx + T, C]
    rows = batch * (context + time) - context
    flat = xcl.view(-1, cin)
    wt = w.permute(2, 1, 0).contiguous()  # [k, Cin, Cout]
    res = torch.randn(batch, time, cout, device=x.device, dtype=x.dtype) if k == 1 else None
    full = torch.empty(rows, cout, device=x.device, dtype=x.dtype)

    def gemm():
        if k == 1:  # 1x1: the residual stream += x @ w^T + b
            res.view(-1, cout).addmm_(flat, wt[0])
            return res
        torch.mm(flat[0:rows], wt[0], out=full)
        for j in range(1, k):
            full.addmm_(flat[j * d: j * d + rows], wt[j])
        view = full.as_strided((batch, time, cout), ((context + time) * cout, cout, 1))
        view.add_(b)
        return view

    if k == 1:
        res0 = res.clone()
        got = gemm() - res0 + b
        res.copy_(res0)
    else:
        got = gemm()
    err = (got.transpose(1, 2) - ref).abs().max().item()
    out["gemm"] = (graph_ms(gemm), err)
    if k > 1:
        mod = CausalConv(cin, cout, k, dilation=d).to(x.device, x.dtype)
        mod.conv.load_state_dict(conv.state_dict())
        mod.set_products(True)
        y = mod(x)
        out["module"] = (graph_ms(lambda: mod(x)), (y - ref).abs().max().item())
        out["tap"], out["_tap_configs"] = tap_rows(conv, xpad, ref)
        best = out["_tap_configs"]["best"]
        config = None if best in (None, "default") else next(
            dict(BLOCK_O=o, BLOCK_T=t, BLOCK_I=i, num_warps=w, num_stages=st) for o, t, i, w, st in TAP_CONFIGS
            if f"o{o}t{t}i{i}w{w}s{st}" == best)
        try:
            out["tapcl"] = tap_cl_row(conv, xpad, ref, config)
        except Exception as exc:  # noqa: BLE001 (reported, the other columns kept)
            print(f"tap kernel on channels-last data failed: {type(exc).__name__}: {exc}", flush=True)
    return out


def trans_rows(mod: CausalTransConv, x: torch.Tensor) -> dict:
    conv = mod.conv
    batch, cin, time = x.shape
    w, b, r = conv.weight, conv.bias, mod.stride  # w [Cin, Cout, k]
    cout, k = w.shape[1], w.shape[2]
    ref = F.conv_transpose1d(x, w, None, stride=r)  # [B, Cout, T*r + overlap]
    out = {"ncl": (graph_ms(lambda: F.conv_transpose1d(x, w, None, stride=r)), 0.0)}
    x4 = x.unsqueeze(2).contiguous(memory_format=torch.channels_last)
    w4 = w.unsqueeze(2).contiguous(memory_format=torch.channels_last)
    y4 = F.conv_transpose2d(x4, w4, None, stride=(1, r))
    out["nhwc"] = (graph_ms(lambda: F.conv_transpose2d(x4, w4, None, stride=(1, r))),
                   (y4.squeeze(2) - ref).abs().max().item())
    xcl = x.transpose(1, 2).contiguous().view(-1, cin)  # [B*T, Cin]
    wt = w.permute(0, 2, 1).contiguous().view(cin, k * cout)  # [Cin, k*Cout]
    prod = torch.empty(batch * time, k * cout, device=x.device, dtype=x.dtype)
    full = torch.zeros(batch, time * r + (k - r), cout, device=x.device, dtype=x.dtype)

    def gemm():
        torch.mm(xcl, wt, out=prod)
        p = prod.view(batch, time, k // r, r, cout)
        full.zero_()
        for part in range(k // r):  # tap block `part` lands `part` input steps later
            dst = full.narrow(1, part * r, time * r).view(batch, time, r, cout)
            dst.add_(p[:, :, part])
        return full

    got = gemm()
    err = (got.transpose(1, 2) - ref).abs().max().item() if k % r == 0 else float("nan")
    out["gemm"] = (graph_ms(gemm), err)
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--checkpoint", required=True)
    ap.add_argument("--frames", type=int, default=25)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--out", default=".")
    args = ap.parse_args()
    codec = load_codec(codec_dir(Path(args.checkpoint)), "cuda").to(torch.bfloat16).eval()
    codec.set_kernel_impl("triton", fold=False, conv_products="off")  # the shapes; each path is set per row
    seen: dict[tuple, tuple] = {}
    hooks = []
    for name, mod in codec.named_modules():
        if isinstance(mod, (CausalConv, CausalTransConv)):
            def hook(m, inputs, _out, name=name):
                x = inputs[0]
                conv = m.conv
                key = (type(m).__name__, tuple(x.shape), tuple(conv.weight.shape), conv.dilation[0], conv.groups)
                if key not in seen:
                    seen[key] = (name, m, x.detach().clone())
                else:
                    seen[key] = (seen[key][0] + "," + name, m, seen[key][2])
            hooks.append(mod.register_forward_hook(hook))
    state = codec.new_state(args.batch, "cuda", torch.bfloat16)
    codes = torch.randint(0, codec.cfg.codebook_size, (args.batch, args.frames, codec.num_quantizers), device="cuda")
    with torch.inference_mode():
        codec.decode_stream(codes, torch.arange(args.batch, device="cuda"), state)
    for h in hooks:
        h.remove()
    results = []
    print(f"== codec convs, frames {args.frames} batch {args.batch}, bf16, CUDA graphs, ms (max abs err vs ncl)")
    print(f"{'kind':<16} {'input':<18} {'weight':<18} {'d':>2} {'g':>4} {'ncl':>8} {'nhwc':>16} {'gemm':>16} "
          f"{'module':>16} {'tap':>16} {'tapcl':>16}  layers")
    totals = {"ncl": 0.0, "nhwc": 0.0, "gemm": 0.0, "module": 0.0, "tap": 0.0, "tapcl": 0.0}
    with torch.inference_mode():
        for key, (names, mod, x) in seen.items():
            kind, xshape, wshape, d, groups = key
            count = names.count(",") + 1
            if groups != 1:
                row = {"ncl": (graph_ms(lambda: mod(x)), 0.0)}  # depthwise: only what runs today
            elif kind == "CausalConv":
                row = conv_rows(mod.conv, mod.context, x)
            else:
                row = trans_rows(mod, x)
            tap_configs = row.pop("_tap_configs", None)
            for m, (ms, _) in row.items():
                totals[m] += ms * count
            for m in totals:
                if m not in row:
                    totals[m] += row["ncl"][0] * count
            cells = {m: f"{row[m][0]:.3f} ({row[m][1]:.0e})" if m in row else "-"
                     for m in ("nhwc", "gemm", "module", "tap", "tapcl")}
            print(f"{kind:<16} {str(xshape):<18} {str(wshape):<18} {d:>2} {groups:>4} {row['ncl'][0]:>8.3f} "
                  f"{cells['nhwc']:>16} {cells['gemm']:>16} {cells['module']:>16} {cells['tap']:>16} {cells['tapcl']:>16}  x{count} "
                  f"{names[:60]}", flush=True)
            results.append(dict(kind=kind, input=xshape, weight=wshape, dilation=d, groups=groups, count=count,
                                layers=names, **{m: dict(ms=v[0], max_abs=v[1]) for m, v in row.items()},
                                **({"tap_configs": tap_configs} if tap_configs else {})))
    print("sum over the decoder's convs (x count; depthwise at ncl in every column): " +
          ", ".join(f"{m} {v:.2f} ms" for m, v in totals.items()))
    units = []
    print("\n== residual units alone (offline), ms: reference composition -> folded (conv1 timed: cuDNN or products); "
          "channels-last folded, one kernel (fused), one kernel on channels-last data")
    with torch.inference_mode():
        for name, mod in codec.named_modules():
            if isinstance(mod, ResidualUnit):
                conv1 = mod.conv1
                key = (conv1.conv.in_channels, conv1.conv.dilation[0])
                x = next((v[2] for k, v in seen.items() if k[0] == "CausalConv" and k[2] == tuple(conv1.conv.weight.shape)
                          and k[3] == key[1]), None)
                if x is None or key in {(u["channels"], u["dilation"]) for u in units}:
                    continue
                mod.set_folded(False)
                conv1.set_products(False)
                ref = mod(x.clone())
                plain = graph_ms(lambda: mod(x.clone()))
                mod.set_folded(True)
                conv1.set_products("timed")
                got = mod(x.clone())
                folded = graph_ms(lambda: mod(x.clone()))
                err = (got - ref).abs().max().item()
                row = dict(channels=key[0], dilation=key[1], input=tuple(x.shape), plain_ms=plain, folded_ms=folded,
                           max_abs=err)
                # channels-last (conv1 timed among cuDNN's channels-last kernels and the products over rows), and
                # the unit as one kernel (kernels/residual_unit.py) in both layouts, each against the reference
                xcl = x.transpose(1, 2).contiguous().transpose(1, 2)
                conv1.set_channels_last(True)
                got = mod(xcl.clone())
                row.update(cl_folded_ms=graph_ms(lambda: mod(xcl.clone())), cl_max_abs=(got - ref).abs().max().item())
                if key[0] <= FUSED_MAX_CHANNELS:
                    mod.set_fused("all")
                    for label, inp in (("fused", x), ("cl_fused", xcl)):
                        got = mod(inp.clone())
                        row[f"{label}_ms"] = graph_ms(lambda inp=inp: mod(inp.clone()))
                        row[f"{label}_max_abs"] = (got - ref).abs().max().item()
                    mod.set_fused("off")
                conv1.set_channels_last(False)
                units.append(row)
                extra = "  ".join(f"{k[:-3]} {v:.3f}" for k, v in row.items() if k.endswith("_ms") and k not in
                                  ("plain_ms", "folded_ms"))
                print(f"  {str(tuple(x.shape)):<18} d {key[1]}: {plain:.3f} -> {folded:.3f} ms (max abs {err:.1e}); "
                      f"{extra}  {name}", flush=True)
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, f"convs-{args.frames}x{args.batch}.json"), "w") as f:
        json.dump(dict(frames=args.frames, batch=args.batch, rows=results, totals=totals, units=units,
                       device=torch.cuda.get_device_name()), f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
