"""Per-frame microseconds by part of the gateway, from a py-spy raw profile (NAME.pyspy.txt, 200 Hz, 15 s) and
its benchmark point (NAME.json, one row): python profile_categories.py NAME [NAME...]. A stack counts for the
first part whose key it contains; 5 ms of CPU a sample."""
import sys, collections, json
sys.argv.append("")
cats = [("idle: select", ["EpollSelector.select"]), ("engine reader thread", ["Thread._bootstrap"]),
        ("libopus", ["opus.py:115)", "OpusEncoder._encode_input", "opuslib/api/encoder.py:130"]),
        ("opus wrapper", ["OpusEncoder.encode"]),
        ("ws send", ["send_bytes", "WebSocketsSansIOProtocol.send", "sender (starlette", "_SelectorSocketTransport.write", "write_now"]),
        ("frame header", ["encode_audio_frame"]), ("pacer/audio_out bookkeeping", ["AudioOut.", "Pacer.", "start_eagerly"]),
        ("split/resample", ["StreamEncoder.split", "split_finish", "resample"]),
        ("playback reports -> engine", ["report_playback", "set_playback"]),
        ("ws receive + session", ["RealtimeSession.run", "_poll_forever", "receive", "data_received"]),
        ("engine client (loop side)", ["voxrt/engine/client.py"]), ("pump", ["ContextRunner"]),
        ("stats/looplag", ["stats.py", "timing.py"]), ("asyncio loop", ["_run_once"])]
for name in sys.argv[1:]:
    if not name: continue
    c = collections.Counter(); total = 0
    for line in open(f"{name}.pyspy.txt"):
        stack, _, n = line.rstrip().rpartition(" ")
        if not stack: continue
        n = int(n); total += n
        for cn, keys in cats:
            if any(k in stack for k in keys): c[cn] += n; break
        else: c["other"] += n
    row = json.load(open(f"{name}.json"))["rows"][0]
    frames = row["frames_per_s"] * 15
    print(f"== {name}: samples {total}, cpu {row['cpu_cores']:.2f}, us/frame {1e6*row['cpu_cores']/row['frames_per_s']:.0f}; us/frame by part (5 ms a sample):")
    for k, v in c.most_common(): print(f"  {v*5000/frames:6.1f} us  {k}")
