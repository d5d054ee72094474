"""Convolutional layers of the Qwen3-TTS 12 Hz codec decoder, each runnable offline or streaming.

Reference: qwen_tts/core/tokenizer_12hz/modeling_qwen3_tts_tokenizer_v2.py (qwen-tts 0.1.1). Attribute names
match the reference modules so the checkpoint's `decoder.*` keys load unchanged.

Every layer takes `(x, carry)`. `carry=None` is offline decoding: exactly the reference's zero left padding.
With a `Carry`, a stateful layer reads its per-request context (`carry.take(key)`, rows already gathered for
the batch's slots) and hands back the context the next chunk needs (`carry.give(key, ...)`). What each layer
carries, per request:

- `CausalConv` (stride 1, kernel k, dilation d): its last (k - 1) * d inputs. The reference left-pads by
  exactly that and never pads right (its "extra padding" is 0 at stride 1), so output t depends on inputs
  t - (k-1)d .. t only.
- `CausalTransConv` (kernel K, stride s): the overlap tail, K - s output samples holding the last inputs'
  contributions to the next outputs (bias excluded). The reference trims those K - s samples off the right
  end; output n depends only on inputs <= n // s, so every output of a chunk is final when the chunk's
  inputs are in and streaming needs no lookahead (the trimmed tail is completed by the next chunk).
- `SnakeBeta`, the pointwise parts of ConvNeXt and the residual units: nothing.
"""

from __future__ import annotations

import json
import logging

import torch
import torch.nn.functional as F
from torch import nn

from voxrt.engine.runtime.kernels import channels_last
from voxrt.engine.runtime.kernels.residual_unit import MAX_CHANNELS as FUSED_MAX_CHANNELS
from voxrt.engine.runtime.kernels.residual_unit import residual_unit
from voxrt.engine.runtime.kernels.snake import snake_beta
from voxrt.engine.runtime.kernels.tap_conv import tap_conv

TAP_KERNEL_MODES = ("off", "timed", "all")

log = logging.getLogger("voxrt.models.qwen3_tts")


class Carry:
    """The state rows of one streaming call (already gathered for the batch's slots): layers `take` their
    context and `give` the context the next chunk of the same request needs."""

    def __init__(self, rows: dict[str, torch.Tensor]) -> None:
        self.rows = rows
        self.updated: dict[str, torch.Tensor] = {}

    def take(self, key: str) -> torch.Tensor:
        return self.rows[key]

    def give(self, key: str, value: torch.Tensor) -> None:
        assert key not in self.updated, f"state {key!r} written twice in one call"
        self.updated[key] = value


class StatefulLayer(nn.Module):
    """A layer with per-request streaming state; the codec names it `state_key` (its module path)."""

    state_key: str | None = None

    def state_shapes(self) -> dict[str, tuple[int, ...]]:
        """Per-request state tensors (shape without the row dimension), keyed by suffix ('' for one)."""
        raise NotImplementedError


def last_entries(x: torch.Tensor, n: int, dim: int = -1) -> torch.Tensor:
    """The last n entries along `dim` (x[..., -n:] is wrong for n == 0)."""
    return x.narrow(dim, x.shape[dim] - n, n)


class CausalConv(StatefulLayer):
    """Qwen3TTSTokenizerV2CausalConvNet at stride 1 (the only stride the decoder uses): left pad (k-1)*d."""

    products: bool | str = False  # True: cuBLAS products over channels-last rows, not cuDNN; "timed": per shape
    tap_kernel: str = "off"  # the one-kernel conv (kernels/tap_conv.py): "off", "timed" (a candidate), "all"
    cl = False  # set_channels_last: channels-last input runs channels-last formulations

    def __init__(self, c_in: int, c_out: int, kernel_size: int, dilation: int = 1, groups: int = 1) -> None:
        super().__init__()
        self.conv = nn.Conv1d(c_in, c_out, kernel_size, dilation=dilation, groups=groups)
        self.context = (kernel_size - 1) * dilation  # inputs carried across chunks

    def state_shapes(self) -> dict[str, tuple[int, ...]]:
        return {"": (self.conv.in_channels, self.context)} if self.context else {}

    def forward(self, x: torch.Tensor, carry: Carry | None = None, act: SnakeBeta | None = None,
                bias: bool = True, in_bias: torch.Tensor | None = None) -> torch.Tensor:  # [B, C, T] -> [B, C', T]
        """`act`: the activation before the conv (conv(act(x))), written straight into the conv's padded
        input, behind the carried context, instead of into a tensor of its own that is then concatenated.
        `bias=False`: leave the bias out (the caller folds it into what reads the output). `in_bias` (with
        `act`): conv(act(x + in_bias)), a previous layer's bias folded into the activation."""
        b = self.conv.bias if bias else None
        if self.context == 0:
            h = x if act is None else act(x, in_bias=in_bias)
            if self.cl and channels_last(h) and self.conv.groups == 1:  # a product over [B, T, C] rows: the layout stays
                out = torch.matmul(h.transpose(1, 2), self.conv.weight[:, :, 0].t().to(h.dtype))
                return (out if b is None else out.add_(b.to(h.dtype))).transpose(1, 2)
            return F.conv1d(h, self.conv.weight, b, groups=self.conv.groups)
        return self.conv_padded(self.padded_input(x, carry, act, in_bias), b)

    def conv_padded(self, padded: torch.Tensor, b: torch.Tensor | None) -> torch.Tensor:
        """The conv of an input already padded with its context (`padded_input`), by the chosen formulation."""
        if self.tap_kernel == "all":
            return self._tap_kernel(padded, b)
        if self.products is True:
            return self._products(padded, b)
        if self.products == "timed":
            candidates = {"cudnn": lambda: self._cudnn(padded, b), "products": lambda: self._products(padded, b)}
            if self.tap_kernel == "timed":
                candidates["tap-kernel"] = lambda: self._tap_kernel(padded, b)
            return candidates[_timed_choice(self, padded, b is None, candidates)]()
        return self._cudnn(padded, b)

    def _cudnn(self, padded: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
        if self.cl and channels_last(padded):  # cuDNN's channels-last kernels: conv2d over [B, C, 1, L]
            return F.conv2d(padded.unsqueeze(2), _weight_cl(self, padded.dtype), bias,
                            dilation=(1, self.conv.dilation[0]), groups=self.conv.groups).squeeze(2)
        return F.conv1d(padded, self.conv.weight, bias, dilation=self.conv.dilation, groups=self.conv.groups)

    def set_channels_last(self, on: bool) -> None:
        """On: channels-last input ([B, C, T] over [B, T, C] memory) runs channels-last formulations (cuDNN's
        channels-last kernels with a channels-last copy of the weight, products over the samples' rows, the tap
        kernel through its strides) and gives channels-last output (the codec's channels-last decoder:
        `Qwen3TTSCodec.set_kernel_impl(channels_last=True)`). Off (the default), or plain input: the plain
        formulations whatever the input's strides, as before."""
        _set_weight_cl(self, on)

    def set_products(self, on: bool | str) -> None:
        """Run this conv as k accumulated products (one per tap) over a channels-last copy of its padded
        input: out[b] = sum_j W_j @ x[b, :, j*d : j*d + T]. cuDNN runs some dilated shapes of the released
        codec on a fallback kernel without tensor cores (bench/results/2026-12-02-codec: 384 channels x 4000,
        dilation 9: 4.6 ms against 0.42 ms as products), and most others faster than these products.
        "timed": per input shape, whichever of the two measured faster the first time the shape ran (on
        CUDA, outside graph capture: the engine's warm-up runs every graph's shape before capturing it);
        cuDNN for a shape first seen during a capture, and always on the CPU. Only for plain (groups 1)
        convs with taps."""
        if on not in (True, False, "timed"):
            raise ValueError(f"set_products takes True, False or 'timed', got {on!r}")
        on = on if self.context > 0 and self.conv.groups == 1 else False
        self.products = on
        self._choices: dict[tuple, str] = {}
        self._losers: set[tuple[str, int | None]] = set()
        if on:
            self._make_taps()

    def set_tap_kernel(self, mode: str) -> None:
        """The conv as one Triton kernel summing every tap in float32 (kernels/tap_conv.py), on CUDA: "all"
        (every call: tests, benchmarks), "timed" (a third candidate of `set_products("timed")`'s per-shape
        choice, so a shape where it loses keeps cuDNN or the products), "off". Only for plain (groups 1) convs
        with taps; the others keep "off"."""
        if mode not in TAP_KERNEL_MODES:
            raise ValueError(f"set_tap_kernel takes {', '.join(TAP_KERNEL_MODES)}, got {mode!r}")
        self.tap_kernel = mode if self.context > 0 and self.conv.groups == 1 else "off"
        self._choices = {}
        self._losers = set()
        if self.tap_kernel != "off":
            self._make_taps()

    def _make_taps(self) -> None:
        with torch.no_grad():  # [k, C_out, C_in], moving with the module
            self.register_buffer("taps", self.conv.weight.detach().permute(2, 0, 1).contiguous(), persistent=False)

    def _tap_kernel(self, padded: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
        return tap_conv(padded, self.taps, bias, self.conv.dilation[0])

    def _products(self, padded: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
        batch, _, length = padded.shape
        time, step = length - self.context, self.conv.dilation[0]
        if self.cl and channels_last(padded):  # the rows are there: out[b] = sum_j rows[b, j*d : j*d + T] @ W_j^T
            rows = padded.transpose(1, 2)  # [B, context + T, C], contiguous
            taps = self.taps.to(padded.dtype).transpose(1, 2)  # [k, C_in, C_out]: W_j^T, read transposed
            first = rows[:, :time]
            if bias is None:
                out = torch.bmm(first, taps[0].expand(batch, -1, -1))
            else:
                out = torch.baddbmm(bias.to(padded.dtype)[None, None], first, taps[0].expand(batch, -1, -1))
            for j in range(1, taps.shape[0]):
                out.baddbmm_(rows[:, j * step : j * step + time], taps[j].expand(batch, -1, -1))
            return out.transpose(1, 2)  # [B, C_out, T], channels-last
        rows = padded.transpose(1, 2).contiguous()  # [B, context + T, C]: a tap's input is a row window
        taps = self.taps.to(padded.dtype)
        first = rows[:, :time].transpose(1, 2)  # [B, C, T], column-major: cuBLAS reads it transposed
        if bias is None:
            out = torch.bmm(taps[0].expand(batch, -1, -1), first)
        else:
            out = torch.baddbmm(bias[None, :, None].to(padded.dtype), taps[0].expand(batch, -1, -1), first)
        for j in range(1, taps.shape[0]):
            out.baddbmm_(taps[j].expand(batch, -1, -1), rows[:, j * step : j * step + time].transpose(1, 2))
        return out

    def padded_input(self, x: torch.Tensor, carry: Carry | None = None, act: SnakeBeta | None = None,
                     in_bias: torch.Tensor | None = None) -> torch.Tensor:  # [B, C, T] -> [B, C, context + T]
        """What the conv reads: the carried context (zeros offline) then act(x + in_bias); hands the next
        context on. (`in_bias` only with `act`.)"""
        if carry is None and act is None and not (self.cl and channels_last(x)):
            return F.pad(x, (self.context, 0))
        batch, channels, time = x.shape
        if self.cl and channels_last(x):  # [B, C, context + T] over [B, context + T, C] memory: the layout goes on
            padded = x.new_empty(batch, self.context + time, channels).transpose(1, 2)
        else:
            padded = x.new_empty(batch, channels, self.context + time)  # [B, C, context + T]
        if carry is None:
            padded[..., : self.context].zero_()  # the reference's zero left padding
        else:
            padded[..., : self.context].copy_(carry.take(self.state_key))
        if act is None:
            padded[..., self.context :].copy_(x)
        else:
            act(x, out=padded[..., self.context :], in_bias=in_bias)
        if carry is not None:
            carry.give(self.state_key, last_entries(padded, self.context))
        return padded


def _set_weight_cl(layer: nn.Module, on: bool) -> None:
    """`layer.cl` = on, and `weight_cl`: the layer's conv weight as [*, *, 1, K] in channels_last (what F.conv2d /
    conv_transpose2d take with channels-last input), a buffer that moves with the module; removed when off."""
    layer.cl = on
    if on:
        with torch.no_grad():
            layer.register_buffer("weight_cl", layer.conv.weight.detach().unsqueeze(2).contiguous(
                memory_format=torch.channels_last), persistent=False)
    elif "weight_cl" in layer._buffers:
        del layer._buffers["weight_cl"]


def _weight_cl(layer: nn.Module, dtype: torch.dtype) -> torch.Tensor:
    """The channels-last 4-D weight for channels-last input: the buffer when set, else converted now."""
    weight = layer._buffers.get("weight_cl")
    if weight is None:
        weight = layer.conv.weight.unsqueeze(2).contiguous(memory_format=torch.channels_last)
    return weight.to(dtype)


def _timed_choice(layer: nn.Module, x: torch.Tensor, flag: bool, candidates: dict) -> str:
    """Which of `candidates` ({name: fn}, the first one the fallback: cuDNN) `layer` runs for this input: the
    fastest, measured once per (shape, dtype, flag, layout) on CUDA outside graph capture and cached in
    `layer._choices`; the first when not cached and it cannot time (a capture, the CPU)."""
    key = (tuple(x.shape), x.dtype, flag, channels_last(x))  # a layout's formulations differ: timed apart
    choice = layer._choices.get(key)
    if choice is not None:
        return choice
    first = next(iter(candidates))
    if x.device.type != "cuda" or torch.cuda.is_current_stream_capturing():
        return first
    # The fallback is timed last, and a candidate whose eager run (the second: the first pays lazy initialisation,
    # `_eager_past`) is already GIVE_UP_FACTOR times the best so far is not captured and replayed: cuDNN's
    # channels-last kernel for the 384-channel dilation-9 conv took 1.1 s a call on an H100 against 1.4 ms as
    # products (bench/results/2026-12-06-h100-codec-cl), and timing it fully at every shape cost the start-up tens
    # of seconds. One that lost by that factor at one shape of this layer is not timed again at the layer's other
    # batch sizes of that length (`_losers`: (name, length)); at another length it is: cuDNN took 44 ms a call at
    # the 192-channel dilation-3 conv's 1-frame length on an H100 and 1.58 ms at 25 frames, where products took
    # 1.74 (bench/results/2026-12-07-h100-codecfix). One whose call took over LAYER_GIVE_UP_MS is left out of every
    # length of the layer (`(name, None)`): there (the 384-channel dilation-9 conv: 355, 710, 1,110 ms a call at
    # 2, 4 and 25 frames) each length's two eager calls cost the start-up seconds for a kernel that never won.
    losers = layer._losers  # set beside `_choices` by set_products / set_tap_kernel / set_fused
    length = x.shape[-1]
    ms = {}
    for name in [n for n in candidates if n != first] + [first]:
        if (name, length) in losers or (name, None) in losers:
            continue
        best = min(ms.values(), default=None)
        try:  # a candidate that fails here (a kernel that does not compile for this GPU) is left out, said once
            ms[name] = _time_ms(candidates[name], give_up_ms=None if best is None else
                                max(GIVE_UP_FACTOR * best, GIVE_UP_MS))
        except Exception as exc:  # noqa: BLE001
            if name == first:  # the fallback itself: nothing to fall back to
                raise
            log.warning("codec %s %s: %s failed (%s: %s); choosing among the others", type(layer).__name__,
                        list(x.shape), name, type(exc).__name__, str(exc).splitlines()[0][:200] if str(exc) else "")
    choice = layer._choices[key] = min(ms, key=ms.get) if ms else first  # (every other one failed or lost)
    losers.update((name, None if t > LAYER_GIVE_UP_MS else length) for name, t in ms.items()
                  if choice in ms and t >= GIVE_UP_FACTOR * ms[choice])
    log.debug("codec %s %s: %s (%s)", type(layer).__name__, list(x.shape), choice,
              ", ".join(f"{name} {t:.3f} ms" for name, t in ms.items()))
    return choice


GIVE_UP_FACTOR = 20  # a candidate this many times slower than the best so far is not timed further
GIVE_UP_MS = 20.0  # ... nor below this many ms (an eager call pays the launches a graph does not)
LAYER_GIVE_UP_MS = 250.0  # one cut short past this many ms is left out of every length of its layer


def timed_choices(module: nn.Module) -> str | None:
    """What the timed choices of `module`'s layers picked, in one line for the engine's log: shapes per
    formulation, and the layers where a candidate was cut short and left out of the layer's other batch sizes at
    that length (the line that shows a start-up that judged a kernel wrong). None when nothing was timed (the CPU,
    torch kernels)."""
    picked: dict[str, int] = {}
    layers: dict[str, int] = {}
    lengths: dict[str, int] = {}
    whole: dict[str, int] = {}
    for layer in module.modules():
        for choice in getattr(layer, "_choices", {}).values():
            picked[choice] = picked.get(choice, 0) + 1
        cut = getattr(layer, "_losers", set())
        for name in {name for name, _ in cut}:
            layers[name] = layers.get(name, 0) + 1
        for name, length in cut:
            counts = lengths if length is not None else whole
            counts[name] = counts.get(name, 0) + 1
    if not picked:
        return None

    def where(name: str) -> str:
        parts = [f"{n} length{'s' if n > 1 else ''}" for n in [lengths.get(name, 0)] if n]
        parts += [f"every length in {n}" for n in [whole.get(name, 0)] if n]
        return ", ".join(parts)
    line = f"{sum(picked.values())} shapes timed: " + ", ".join(f"{n} {c}" for n, c in sorted(picked.items()))
    if layers:
        line += (f"; cut short ({GIVE_UP_FACTOR}x slower) and left out of a layer's other batch sizes at that "
                 "length: " + ", ".join(f"{n} in {c} layer{'s' if c > 1 else ''} ({where(n)})"
                                        for n, c in sorted(layers.items())))
    return line


def choice_names(layer: nn.Module) -> frozenset[str]:
    """The formulations `_timed_choice` may pick for `layer` as it is set now; empty when it does not time."""
    if isinstance(layer, ResidualUnit):
        return frozenset({"unfused", "fused"}) if layer.fused == "timed" else frozenset()
    if isinstance(layer, (CausalConv, CausalTransConv)) and layer.products == "timed":
        tap = isinstance(layer, CausalConv) and layer.tap_kernel == "timed"
        return frozenset({"cudnn", "products"} | ({"tap-kernel"} if tap else set()))
    return frozenset()


def saved_choices(module: nn.Module) -> dict[str, list]:
    """The timed choices of `module`'s layers as JSON values: {layer name: [[shape, dtype, flag, channels last,
    choice], ...]}, for `restore_choices` at a later start (runtime/tuning_cache.py)."""
    out = {}
    for name, layer in module.named_modules():
        entries = [[list(shape), str(dtype).removeprefix("torch."), flag, cl, choice]
                   for (shape, dtype, flag, cl), choice in getattr(layer, "_choices", {}).items()]
        if entries:
            out[name] = sorted(entries, key=json.dumps)
    return out


def restore_choices(module: nn.Module, saved: dict) -> int:
    """`saved_choices`'s entries back into the layers' choices, so that those shapes are not timed again; only
    where the layer is there, times now (`choice_names`) and the choice is one of its formulations: anything else
    is left out (its shape is timed as before). How many were restored."""
    if not isinstance(saved, dict):
        return 0
    layers = dict(module.named_modules())
    restored = 0
    for name, entries in saved.items():
        layer = layers.get(name)
        names = choice_names(layer) if layer is not None else frozenset()
        if not names or not isinstance(entries, list):
            continue
        for entry in entries:
            try:
                shape, dtype_name, flag, cl, choice = entry
                key = (tuple(int(n) for n in shape), getattr(torch, dtype_name), bool(flag), bool(cl))
            except (TypeError, ValueError, AttributeError):
                continue
            if choice in names and isinstance(key[1], torch.dtype) and key not in layer._choices:
                layer._choices[key] = choice
                restored += 1
    return restored


def _time_ms(fn, reps: int = 3, give_up_ms: float | None = None) -> float:
    """fn's GPU time as it runs in the engine, in a CUDA graph: the best of `reps` replays of a graph captured
    for this once (eager timing would charge the products' extra launches, which a graph does not pay). On the
    current stream (a lane's, with its SM partition), or a side stream when that is the default stream (which
    cannot capture). `give_up_ms`: when an eager call after the first (which pays lazy initialisation) already
    takes longer, its time is returned as is (`_eager_past`)."""
    current = torch.cuda.current_stream()
    stream = torch.cuda.Stream() if current == torch.cuda.default_stream() else current
    stream.wait_stream(current)
    best = float("inf")
    with torch.cuda.stream(stream):
        eager_ms = _eager_past(lambda: _eager_call_ms(fn), give_up_ms)
        if eager_ms is not None:
            current.wait_stream(stream)
            return eager_ms
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, stream=stream, capture_error_mode="relaxed"):
            fn()
        for i in range(reps + 1):  # the first replay uploads the graph
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            graph.replay()
            end.record()
            end.synchronize()
            if i:
                best = min(best, start.elapsed_time(end))
    current.wait_stream(stream)
    del graph
    return best


def _eager_past(call_ms, give_up_ms: float | None) -> float | None:
    """The give-up judgement of `_time_ms`: a first call (`call_ms()` runs the candidate once and returns its ms)
    pays the lazy initialisation outside the capture (cuBLAS handles, cuDNN's plan for a new shape, module loads),
    so it is not what is judged; with `give_up_ms` a second call is, and its ms come back when past the bound
    (the candidate is cut short), else None (time it in full). cuDNN's first call at the 192-channel dilation-1
    conv's `[2, 192, 646]` took 20.1 ms on an H100 where its next ones take 0.016 ms, and judging that call cut
    cuDNN from the layer, 2x faster than products at 25 frames (bench/results/2026-12-07-h100-lm-idle, -codecfix)."""
    call_ms()
    if give_up_ms is None:
        return None
    ms = call_ms()
    return ms if ms > give_up_ms else None


def _eager_call_ms(fn) -> float:
    """One eager call of fn on the current stream, in ms (CUDA events)."""
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    fn()
    end.record()
    end.synchronize()
    return start.elapsed_time(end)


class CausalTransConv(StatefulLayer):
    """Qwen3TTSTokenizerV2CausalTransConvNet: ConvTranspose1d(K, stride s), right K - s samples trimmed."""

    def __init__(self, c_in: int, c_out: int, kernel_size: int, stride: int) -> None:
        super().__init__()
        self.conv = nn.ConvTranspose1d(c_in, c_out, kernel_size, stride=stride)
        self.stride = stride
        self.overlap = kernel_size - stride  # output samples carried across chunks (the reference's right_pad)

    def state_shapes(self) -> dict[str, tuple[int, ...]]:
        return {"": (self.conv.out_channels, self.overlap)} if self.overlap else {}

    products: bool | str = False  # as CausalConv.products: True, False or "timed" (per input shape)
    cl = False  # set_channels_last

    def forward(self, x: torch.Tensor, carry: Carry | None = None, bias: bool = True
                ) -> torch.Tensor:  # [B, C, T] -> [B, C', T*s]
        """`bias=False`: leave the bias out (the caller folds it into what reads the output)."""
        num_out = x.shape[-1] * self.stride
        use_products = self.products is True or (self.products == "timed" and _timed_choice(
            self, x, bias, {"cudnn": lambda: self._cudnn(x), "products": lambda: self._products(x)}) == "products")
        full = self._products(x) if use_products else self._cudnn(x)  # [B, C', T*s + overlap], no bias
        if self.overlap and carry is not None:
            # Overlap-add: the previous inputs' contributions (the tail) plus this chunk's; the tail handed on
            # is the part past num_out, which the bias add below does not touch.
            full[..., : self.overlap] += carry.take(self.state_key).to(full.dtype)  # [B, C', overlap]
            carry.give(self.state_key, full[..., num_out:])
        out = full[..., :num_out] if self.overlap else full
        return out.add_(self.conv.bias[:, None]) if bias else out

    def _cudnn(self, x: torch.Tensor) -> torch.Tensor:
        if self.cl and channels_last(x):  # cuDNN's channels-last kernels, as in CausalConv._cudnn
            return F.conv_transpose2d(x.unsqueeze(2), _weight_cl(self, x.dtype), None,
                                      stride=(1, self.stride)).squeeze(2)
        return F.conv_transpose1d(x, self.conv.weight, None, stride=self.stride)

    def set_channels_last(self, on: bool) -> None:
        """As CausalConv.set_channels_last; with products on, also their weight for channels-last input:
        [C_in, K * C_out], columns (tap, output channel), so that one product's output rows are output samples."""
        _set_weight_cl(self, on)
        if on and self.products:
            with torch.no_grad():
                self.register_buffer("taps_cl", self.conv.weight.detach().permute(0, 2, 1).reshape(
                    self.conv.in_channels, -1).contiguous(), persistent=False)

    def set_products(self, on: bool | str) -> None:
        """Run the transposed conv as one cuBLAS product, [C'*K, C] @ x, and its overlap-add (K / s strided
        adds): at small shapes cuDNN's transposed conv and its layout conversions cost 3-6x as much
        (bench/results/2026-12-02-codec/folded/convs-2x1.log). "timed" as in CausalConv.set_products. Only
        when the kernel is a multiple of the stride (every released one: K = s or 2s)."""
        if on not in (True, False, "timed"):
            raise ValueError(f"set_products takes True, False or 'timed', got {on!r}")
        kernel = self.conv.kernel_size[0]
        self.products = on if kernel % self.stride == 0 else False
        self._choices: dict[tuple, str] = {}
        self._losers: set[tuple[str, int | None]] = set()
        if self.products:
            with torch.no_grad():  # [C_out * K, C_in], rows (c_out, tap), moving with the module
                self.register_buffer("taps", self.conv.weight.detach().permute(1, 2, 0).reshape(
                    self.conv.out_channels * kernel, self.conv.in_channels).contiguous(), persistent=False)

    def _products(self, x: torch.Tensor) -> torch.Tensor:
        batch, _, time = x.shape
        stride, channels = self.stride, self.conv.out_channels
        parts = self.conv.kernel_size[0] // stride
        if self.cl and channels_last(x):  # [B, T, C] @ [C, K * C'] -> [B, T, parts, s, C']: step t, tap part*s + r
            taps = getattr(self, "taps_cl", None)
            if taps is None:
                taps = self.conv.weight.detach().permute(0, 2, 1).reshape(self.conv.in_channels, -1)
            prod = torch.matmul(x.transpose(1, 2), taps.to(x.dtype)).view(batch, time, parts, stride, channels)
            if parts == 1:
                return prod.view(batch, time * stride, channels).transpose(1, 2)
            full = x.new_zeros(batch, (time + parts - 1) * stride, channels)
            for part in range(parts):  # output sample (t + part) * s + r, as below
                full.narrow(1, part * stride, time * stride).view(batch, time, stride, channels).add_(prod[:, :, part])
            return full.transpose(1, 2)
        prod = torch.matmul(self.taps.to(x.dtype), x).view(batch, channels, parts, stride, time)
        if parts == 1:  # kernel == stride: each input step writes its own s outputs
            return prod[:, :, 0].transpose(-1, -2).reshape(batch, channels, time * stride)
        full = x.new_zeros(batch, channels, (time + parts - 1) * stride)
        for part in range(parts):  # taps part*s .. part*s + s - 1 land `part` input steps later
            full.narrow(-1, part * stride, time * stride).view(batch, channels, time, stride).add_(
                prod[:, :, part].transpose(-1, -2))
        return full


class SnakeBeta(nn.Module):
    """x + 1 / (exp(beta) + 1e-9) * sin(x * exp(alpha))^2, per channel (log-scale parameters). `impl`
    "triton" runs it as one kernel (voxrt/engine/runtime/kernels/snake.py, float32 inside); "torch" is the
    reference's ops."""

    impl = "torch"

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.alpha = nn.Parameter(torch.zeros(channels))
        self.beta = nn.Parameter(torch.zeros(channels))

    def forward(self, x: torch.Tensor, carry: Carry | None = None, out: torch.Tensor | None = None,
                in_bias: torch.Tensor | None = None) -> torch.Tensor:  # [B, C, T]
        """`in_bias` [C]: added to x first (a previous conv's bias, folded in here)."""
        if self.impl == "torch":
            if in_bias is not None:
                x = x + in_bias[:, None]
            alpha = self.alpha.exp()[:, None]  # [C, 1]
            beta = self.beta.exp()[:, None]
            y = x + (1.0 / (beta + 1e-9)) * torch.sin(x * alpha).pow(2)
            return y if out is None else out.copy_(y)
        return snake_beta(x, self.alpha_exp, self.inv_beta, self.impl, out, in_bias)

    def set_impl(self, impl: str) -> None:
        """Picks the implementation; a kernel one gets exp(alpha) and 1 / (exp(beta) + 1e-9) computed here, once
        (in float32, as buffers that move with the module), not in every call."""
        self.impl = impl
        if impl != "torch":
            with torch.no_grad():
                self.register_buffer("alpha_exp", self.alpha.detach().float().exp(), persistent=False)
                self.register_buffer("inv_beta", 1.0 / (self.beta.detach().float().exp() + 1e-9), persistent=False)


class ConvNeXtBlock(nn.Module):
    """Qwen3TTSTokenizerV2ConvNeXtBlock: causal depthwise conv 7 -> LayerNorm -> MLP x4 (GELU) -> gamma,
    residual."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.dwconv = CausalConv(dim, dim, 7, groups=dim)
        self.norm = nn.LayerNorm(dim, eps=1e-6)
        self.pwconv1 = nn.Linear(dim, 4 * dim)
        self.act = nn.GELU()
        self.pwconv2 = nn.Linear(4 * dim, dim)
        self.gamma = nn.Parameter(torch.full((dim,), 1e-6))

    def forward(self, x: torch.Tensor, carry: Carry | None = None) -> torch.Tensor:  # [B, C, T]
        h = self.dwconv(x, carry).transpose(1, 2)  # [B, T, C]
        h = self.pwconv2(self.act(self.pwconv1(self.norm(h))))
        return x + (self.gamma * h).transpose(1, 2)


FOLD_ROWS = 8  # rows (1, 0, ..., 0) under a folded product's input: the bias column, K kept a multiple of 8


class ResidualUnit(nn.Module):
    """Qwen3TTSTokenizerV2DecoderDecoderResidualUnit: Snake -> causal conv 7 (dilated) -> Snake -> conv 1."""

    def __init__(self, dim: int, dilation: int) -> None:
        super().__init__()
        self.act1 = SnakeBeta(dim)
        self.conv1 = CausalConv(dim, dim, 7, dilation=dilation)
        self.act2 = SnakeBeta(dim)
        self.conv2 = CausalConv(dim, dim, 1)

    folded = False  # set_folded: biases folded into the activations, conv2 + residual as one product
    fused = "off"  # set_fused: the folded unit as one kernel (kernels/residual_unit.py): "off", "timed", "all"

    def forward(self, x: torch.Tensor, carry: Carry | None = None, in_bias: torch.Tensor | None = None
                ) -> torch.Tensor:  # [B, C, T]
        """`in_bias` (folded path only): x's missing bias, [C] (the block's transposed conv runs without its
        bias; it is added where x is read: act1's input, and conv2's product through `w_out`)."""
        if not self.folded:
            return x + self.conv2(self.conv1(x, carry, act=self.act1), carry, act=self.act2)
        padded = self.conv1.padded_input(x, carry, act=self.act1, in_bias=in_bias)  # hands the context on
        w_out = self.w_out if in_bias is None else self.w_out_first
        if self.fused == "all":
            return self._fused(padded, x, w_out)
        if self.fused == "timed":  # timed on copies of x: both paths write x in place
            candidates = {"unfused": lambda: self._unfused(padded, x.clone(), w_out),
                          "fused": lambda: self._fused(padded, x.clone(), w_out)}
            if _timed_choice(self, padded, in_bias is None, candidates) == "fused":
                return self._fused(padded, x, w_out)
        return self._unfused(padded, x, w_out)

    def _fused(self, padded: torch.Tensor, x: torch.Tensor, w_out: torch.Tensor) -> torch.Tensor:
        out = None  # in place where x is dense (a view into a wider buffer, e.g. a transposed conv's, is not)
        if not x.is_contiguous() and not x.transpose(1, 2).is_contiguous():
            batch, channels, time = x.shape
            out = (x.new_empty(batch, time, channels).transpose(1, 2) if channels_last(x)
                   else x.new_empty(batch, channels, time))
        b2 = self.fused_b2 if w_out is self.w_out else self.fused_b2_first
        return residual_unit(padded, x, self.conv1.taps, self.conv1.conv.bias, self.act2.alpha_exp,
                             self.act2.inv_beta, self.fused_w2, b2, self.conv1.conv.dilation[0], out=out)

    def _unfused(self, padded: torch.Tensor, x: torch.Tensor, w_out: torch.Tensor) -> torch.Tensor:
        h = self.conv1.conv_padded(padded, None)  # [B, C, T], conv1's bias not in
        batch, channels, time = h.shape
        # act2(h + bias1) into the first C rows of the product's input; the rows after them are (1, 0, ..)
        # so that the product adds w_out's last columns: conv2's bias (plus x's missing bias)
        cl = self.conv1.cl and channels_last(h) and channels_last(x)
        if cl:  # [B, C + 8, T] over [B, T, C + 8] memory
            rows = h.new_empty(batch, time, channels + FOLD_ROWS).transpose(1, 2)
        else:
            rows = h.new_empty(batch, channels + FOLD_ROWS, time)
        rows[:, channels:].copy_(self.one_rows.to(h.dtype).expand(batch, -1, time))
        self.act2(h, out=rows[:, :channels], in_bias=self.conv1.conv.bias)
        w_out = w_out.to(h.dtype).expand(batch, -1, -1)
        if cl:  # x^T += rows^T @ w_out^T: one product over the samples' rows, in place where x allows
            x_rows, w_t = x.transpose(1, 2), w_out.transpose(1, 2)
            if x_rows.is_contiguous():
                x_rows.baddbmm_(rows.transpose(1, 2), w_t)
                return x
            return torch.baddbmm(x_rows, rows.transpose(1, 2), w_t).transpose(1, 2)
        if x.is_contiguous():
            return x.baddbmm_(w_out, rows)  # x + conv2(...) + biases, in place: nothing else reads x now
        return torch.baddbmm(x, w_out, rows)

    def set_fused(self, mode: str) -> None:
        """The folded unit as one Triton kernel (kernels/residual_unit.py: conv1, its bias, the second Snake,
        conv2, its bias and the residual with nothing between them in memory): "all" every call, "timed" where
        it times faster than the unfused folded path (per input shape, as the convs choose), "off". Only for
        folded units of at most FUSED_MAX_CHANNELS channels with the Snake kernels on (`SnakeBeta.set_impl`);
        the others keep "off"."""
        if mode not in TAP_KERNEL_MODES:
            raise ValueError(f"set_fused takes {', '.join(TAP_KERNEL_MODES)}, got {mode!r}")
        channels = self.conv1.conv.in_channels
        usable = self.folded and channels <= FUSED_MAX_CHANNELS and self.act2.impl != "torch"
        self.fused = mode if usable else "off"
        self._choices: dict[tuple, str] = {}
        self._losers: set[tuple[str, int | None]] = set()
        if self.fused != "off":
            self.conv1._make_taps()
            with torch.no_grad():  # conv2's weight and its bias columns (w_out's) as the kernel reads them
                self.register_buffer("fused_w2", self.w_out[:, :channels].contiguous(), persistent=False)
                self.register_buffer("fused_b2", self.w_out[:, channels].contiguous(), persistent=False)
                first = getattr(self, "w_out_first", self.w_out)
                self.register_buffer("fused_b2_first", first[:, channels].contiguous(), persistent=False)

    def set_folded(self, on: bool, in_bias: torch.Tensor | None = None) -> None:
        """The folded path: conv1 without its bias (act2 adds it), and conv2 (1x1) with its bias and the
        residual add as one product, x += [W2 | b2 | 0] @ [act2(h + b1); 1; 0] (cuBLAS, beta = 1): no
        separate bias or residual passes over the [B, C, T] activations. `in_bias`: x's bias when the layer
        before leaves it out (the first unit of a block), put into act1's input and conv2's bias column."""
        self.folded = on
        if not on:
            return
        conv2 = self.conv2.conv
        with torch.no_grad():
            weight = conv2.weight.detach()[:, :, 0]  # [C, C]

            def with_bias(bias: torch.Tensor) -> torch.Tensor:  # [C, C + FOLD_ROWS]: [W2 | bias | 0 ...]
                extra = weight.new_zeros(weight.shape[0], FOLD_ROWS)
                extra[:, 0] = bias
                return torch.cat([weight, extra], 1)

            self.register_buffer("w_out", with_bias(conv2.bias.detach()), persistent=False)
            if in_bias is not None:
                self.register_buffer("w_out_first", with_bias(conv2.bias.detach() + in_bias.detach()),
                                     persistent=False)
            one = weight.new_zeros(FOLD_ROWS, 1)
            one[0] = 1
            self.register_buffer("one_rows", one, persistent=False)


class DecoderBlock(nn.Module):
    """Qwen3TTSTokenizerV2DecoderDecoderBlock: Snake -> transposed conv (kernel 2r, stride r) halving the
    channels -> residual units with dilations 1, 3, 9."""

    def __init__(self, in_dim: int, out_dim: int, rate: int) -> None:
        super().__init__()
        self.block = nn.ModuleList([SnakeBeta(in_dim), CausalTransConv(in_dim, out_dim, 2 * rate, rate)]
                                   + [ResidualUnit(out_dim, d) for d in (1, 3, 9)])

    folded = False

    def forward(self, x: torch.Tensor, carry: Carry | None = None) -> torch.Tensor:  # [B, C, T] -> [B, C/2, T*r]
        if not self.folded:
            for layer in self.block:
                x = layer(x, carry)
            return x
        act, trans, *units = self.block
        x = trans(act(x), carry, bias=False)  # its bias goes in with the first unit (ResidualUnit.set_folded)
        x = units[0](x, carry, in_bias=trans.conv.bias)
        for unit in units[1:]:
            x = unit(x, carry)
        return x

    def set_folded(self, on: bool) -> None:
        """Biases folded into the next reader and each residual unit's 1x1 conv + residual as one product."""
        self.folded = on
        units = list(self.block)[2:]
        units[0].set_folded(on, in_bias=self.block[1].conv.bias)
        for unit in units[1:]:
            unit.set_folded(on)


class UpsampleStage(nn.ModuleList):
    """One entry of the reference decoder's `upsample`: [transposed conv (kernel = stride = r), ConvNeXt]."""

    def __init__(self, dim: int, rate: int) -> None:
        super().__init__([CausalTransConv(dim, dim, rate, rate), ConvNeXtBlock(dim)])

    def forward(self, x: torch.Tensor, carry: Carry | None = None) -> torch.Tensor:  # [B, C, T] -> [B, C, T*r]
        for layer in self:
            x = layer(x, carry)
        return x
