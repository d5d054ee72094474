"""The `voxrt` command. The only reader of argv."""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys

from voxrt.engine.errors import EngineError


def _engine_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", default="tiny", help="model program name (see `voxrt models`); default: tiny")
    p.add_argument("--checkpoint", default=None, help="local directory or hub repo id (resolved in the local cache)")
    p.add_argument("--device", default="auto", help="auto (cuda when available), cpu, cuda, cuda:N")
    p.add_argument("--dtype", default="auto", help="auto (bfloat16 on cuda, float32 on cpu), float32, bfloat16, float16")
    p.add_argument("--attention-backend", default="auto", choices=["auto", "torch", "flashinfer"])
    p.add_argument("--no-cuda-graphs", action="store_true", help="run eagerly on the GPU")
    p.add_argument("--max-batch-size", type=int, default=64)
    p.add_argument("--max-seq-len", type=int, default=4096)
    p.add_argument("--num-pages", type=int, default=None, help="KV pages (default: sized from memory)")
    p.add_argument("--page-size", type=int, default=16)
    p.add_argument("--scheduler-type", default="base")


def _engine_config(args: argparse.Namespace):
    from voxrt.engine.messages import EngineConfig  # noqa: PLC0415

    return EngineConfig(model=args.model, checkpoint=args.checkpoint, device=args.device, dtype=args.dtype,
                        attention_backend=args.attention_backend, use_cuda_graphs=not args.no_cuda_graphs,
                        scheduler_type=args.scheduler_type, page_size=args.page_size, num_pages=args.num_pages,
                        max_batch_size=args.max_batch_size, max_seq_len=args.max_seq_len)


def _check_model(name: str) -> None:
    from voxrt.models.registry import available_models  # noqa: PLC0415

    if name not in available_models():
        raise SystemExit(f"error: unknown model {name!r}; available: {', '.join(available_models())}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="voxrt", description="Realtime voice gateway and speech-LM engine")
    parser.add_argument("-v", "--verbose", action="store_true")
    sub = parser.add_subparsers(dest="command", required=True)

    sub.add_parser("models", help="list the available model programs")

    bench = sub.add_parser("bench", help="N concurrent requests through the engine, no HTTP")
    _engine_args(bench)
    bench.add_argument("--requests", type=int, default=8)
    bench.add_argument("--text", default=None, help="text of every request (default: a 2-sentence sample)")
    bench.add_argument("--greedy", action="store_true", help="argmax sampling")
    bench.add_argument("--num-frames", type=int, default=None, help="pin every request's length (benchmark control)")
    bench.add_argument("--out", default=None, help="write one WAV per request into this directory")

    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")
    if args.command == "models":
        from voxrt.models.registry import available_models  # noqa: PLC0415

        print("\n".join(available_models()))
        return 0
    if args.command == "bench":
        from voxrt.engine.bench import DEFAULT_TEXT, run_bench  # noqa: PLC0415

        _check_model(args.model)
        if args.requests < 1:
            parser.error("--requests must be >= 1")
        try:
            asyncio.run(run_bench(_engine_config(args), args.requests, args.text or DEFAULT_TEXT, args.greedy,
                                  args.num_frames, args.out))
        except EngineError as exc:
            print(f"error: {exc.message}", file=sys.stderr)
            return 2
        return 0
    return 1


if __name__ == "__main__":
    sys.exit(main())
