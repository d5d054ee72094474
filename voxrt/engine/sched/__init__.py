"""Pure scheduling: requests, KV pages, slots and policies. No torch, asyncio, sockets or clocks:
data in, data out, `now_ns` passed in."""
