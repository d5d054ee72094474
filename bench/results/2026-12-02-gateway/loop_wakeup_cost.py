"""What one wake-up of an idle asyncio loop costs on this machine: a timer at 100..2000 per second doing
nothing, pinned to CPU 0; prints the CPU per wake-up (os.times: user, system)."""
import asyncio, time, os
os.sched_setaffinity(0, {0})
async def main(rate):
    loop = asyncio.get_running_loop()
    n = 0
    period = 1 / rate
    t0 = time.process_time(); w0 = time.monotonic()
    next_t = loop.time()
    done = loop.create_future()
    def tick():
        nonlocal n, next_t
        n += 1
        next_t += period
        if n >= rate * 3: done.set_result(None); return
        loop.call_at(next_t, tick)
    loop.call_at(next_t, tick)
    await done
    cpu = time.process_time() - t0; tt=os.times()
    print(f"user {tt.user:.2f} sys {tt.system:.2f} rate {rate}/s: cpu {cpu/3*100:.1f}% of a core, {cpu/n*1e6:.1f} us per wakeup")
for r in (100, 500, 1000, 2000):
    asyncio.run(main(r))
