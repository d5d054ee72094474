"""Collapsed py-spy stacks (py-spy record -f raw) -> the share of samples per part of the gateway's per-frame
path. A stack counts for the first category whose key it contains (order matters: libopus before its caller).
    python profile_categories.py PROFILE.txt
"""
import sys, collections
cats = [("idle: select", ["EpollSelector.select"]), ("engine reader thread", ["Thread._bootstrap"]),
        ("libopus", ["opus.py:115)", "opuslib/api/encoder.py:130"]), ("float_to_int16 (main only)", ["float_to_int16"]),
        ("opus wrapper (clip, nan, bytes; opuslib on main)", ["OpusEncoder.encode"]),
        ("ws send (starlette/uvicorn/websockets/transport)", ["send_bytes", "WebSocketsSansIOProtocol.send", "sender (starlette", "_SelectorSocketTransport.write"]),
        ("frame header", ["encode_audio_frame"]), ("pacer/audio_out bookkeeping", ["AudioOut.", "Pacer.", "start_eagerly"]),
        ("split/resample", ["StreamEncoder.split", "split_finish", "resample"]),
        ("playback reports -> engine", ["report_playback", "set_playback"]),
        ("ws receive + session", ["RealtimeSession.run", "_poll_forever", "receive"]),
        ("engine client (loop side)", ["voxrt/engine/client.py"]), ("pump", ["ContextRunner"]),
        ("stats/looplag", ["stats.py", "timing.py"]), ("asyncio loop", ["_run_once"])]
c = collections.Counter(); total = 0
for line in open(sys.argv[1]):
    stack, _, n = line.rstrip().rpartition(" ")
    if not stack: continue
    n = int(n); total += n
    for name, keys in cats:
        if any(k in stack for k in keys): c[name] += n; break
    else: c["other"] += n
busy = total - c["idle: select"]
for k, v in c.most_common(): print(f"{100*v/total:5.1f}% of samples {100*v/busy:5.1f}% of busy  {k}")
