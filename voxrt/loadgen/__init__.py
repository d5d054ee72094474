"""`voxrt loadgen`: Poisson load against the realtime WebSocket (or the engine directly), with a simulated
listener per request, SLO attainment / TTFA percentiles / goodput per rate, a capacity search, and plots.

- `workload`: JSONL texts, and the pinned output length of each (`pinned_frames`).
- `listener`: PURE. A simulated listener's playback timeline: TTFA, stalls, played audio.
- `metrics`: PURE. Per-request records -> a summary per rate (attainment, p50/p90/p99 TTFA, goodput).
- `runner`: the asyncio edge: arrivals, WebSocket clients (voxrt.client) or engine-direct (EngineClient).
- `procs`: `--procs N`, one point spread over N processes (the same arrivals), records merged.
- `sweep`: several rates, and the capacity search by bisection; the table.
- `plots`: matplotlib (Agg) PNGs against rate.
"""
