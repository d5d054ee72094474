// The playback ring buffer, running on the audio rendering thread.
//
// The page posts {type: "push", contextId, samples} (Float32 at the AudioContext's rate), {type: "end",
// contextId} once a context's last frame is in, and {type: "clear"} for barge-in (empties everything
// before the next 128-sample render quantum). Contexts play one after another in the order pushed.
// A context starts (and restarts after running dry) once `reserveSamples` of it are buffered or its last
// frame is in: a small jitter reserve. Running dry while the context is not finished is an underrun.
// About every 100 ms of playback, and at once after a clear or a context's end, the processor posts a
// report: samples played per context, samples buffered, underruns.

class PlayerProcessor extends AudioWorkletProcessor {
  constructor(options) {
    super();
    const { capacitySamples, reserveSamples, reportEverySamples } = options.processorOptions;
    this.ring = new Float32Array(capacitySamples);
    this.readPos = 0;
    this.numBuffered = 0; // samples in the ring, all contexts
    this.reserveSamples = reserveSamples;
    this.reportEverySamples = reportEverySamples;
    this.queue = []; // contexts in play order: {id, numBuffered, numPlayed, isLast, isPlaying}
    this.finished = []; // contexts played to their end since the last report: {id, numPlayed}
    this.numPlayedTotal = 0;
    this.numUnderruns = 0;
    this.numDropped = 0; // samples that did not fit in the ring
    this.numSinceReport = 0;
    this.isReportDue = false;
    this.port.onmessage = (event) => this.onMessage(event.data);
  }

  onMessage(message) {
    if (message.type === "push") this.push(message.contextId, message.samples);
    else if (message.type === "end") this.entry(message.contextId).isLast = true;
    else if (message.type === "clear") this.clear();
  }

  entry(contextId) {
    let entry = this.queue.find((e) => e.id === contextId);
    if (!entry) {
      entry = { id: contextId, numBuffered: 0, numPlayed: 0, isLast: false, isPlaying: false };
      this.queue.push(entry);
    }
    return entry;
  }

  push(contextId, samples) {
    const capacity = this.ring.length;
    const count = Math.min(samples.length, capacity - this.numBuffered);
    let writePos = (this.readPos + this.numBuffered) % capacity;
    const firstPart = Math.min(count, capacity - writePos);
    this.ring.set(samples.subarray(0, firstPart), writePos);
    this.ring.set(samples.subarray(firstPart, count), 0);
    this.numBuffered += count;
    this.numDropped += samples.length - count;
    this.entry(contextId).numBuffered += count;
  }

  clear() {
    this.queue = [];
    this.readPos = 0;
    this.numBuffered = 0;
    this.isReportDue = true;
  }

  /** Copies up to `count` samples of the head context into out[offset...]; returns how many. */
  read(out, offset, count) {
    const capacity = this.ring.length;
    const firstPart = Math.min(count, capacity - this.readPos);
    out.set(this.ring.subarray(this.readPos, this.readPos + firstPart), offset);
    out.set(this.ring.subarray(0, count - firstPart), offset + firstPart);
    this.readPos = (this.readPos + count) % capacity;
    this.numBuffered -= count;
    return count;
  }

  process(inputs, outputs) {
    const out = outputs[0][0]; // mono; the destination up-mixes to the speakers
    out.fill(0);
    let offset = 0;
    while (offset < out.length && this.queue.length > 0) {
      const head = this.queue[0];
      if (!head.isPlaying) {
        if (head.numBuffered < this.reserveSamples && !head.isLast) break; // build the jitter reserve
        head.isPlaying = true;
      }
      if (head.numBuffered === 0) {
        if (head.isLast) {
          this.queue.shift();
          this.finished.push({ id: head.id, numPlayed: head.numPlayed });
          this.isReportDue = true;
          continue;
        }
        this.numUnderruns += 1; // ran dry mid-context: wait for the reserve again
        head.isPlaying = false;
        this.isReportDue = true;
        break;
      }
      const count = this.read(out, offset, Math.min(out.length - offset, head.numBuffered));
      head.numBuffered -= count;
      head.numPlayed += count;
      this.numPlayedTotal += count;
      offset += count;
    }
    if (this.queue.length > 0) this.numSinceReport += out.length;
    if (this.isReportDue || this.numSinceReport >= this.reportEverySamples) this.report();
    return true;
  }

  report() {
    this.port.postMessage({
      type: "report",
      currentTime, // AudioWorkletGlobalScope: seconds of audio rendered, for the page's interpolation
      numPlayedTotal: this.numPlayedTotal,
      numBuffered: this.numBuffered,
      numUnderruns: this.numUnderruns,
      numDropped: this.numDropped,
      contexts: this.queue.map(({ id, numPlayed, numBuffered, isPlaying }) =>
        ({ id, numPlayed, numBuffered, isPlaying })),
      finished: this.finished,
    });
    this.finished = [];
    this.numSinceReport = 0;
    this.isReportDue = false;
  }
}

registerProcessor("voxrt-player", PlayerProcessor);
