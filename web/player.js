// The page side of playback: an AudioContext with the ring-buffer worklet (player-worklet.js).
//
// Contexts play in the order they were opened. Audio of a later context that arrives while an earlier one
// is still coming is held here and handed to the worklet once the earlier context's last frame is in, so the
// worklet's ring only ever holds whole contexts back to back.

import { SAMPLE_RATE } from "./protocol.js";

const CAPACITY_MS = 10000;
const RESERVE_MS = 60; // jitter reserve before a context starts playing
const REPORT_EVERY_MS = 100;

export class Player {
  /** onReport(report) gets the worklet's reports (see player-worklet.js) with ms fields added. */
  static async create(onReport) {
    let audioContext;
    try {
      audioContext = new AudioContext({ sampleRate: SAMPLE_RATE, latencyHint: "interactive" });
    } catch {
      audioContext = new AudioContext(); // this device's rate; we resample below
    }
    await audioContext.audioWorklet.addModule(new URL("./player-worklet.js", import.meta.url));
    const rate = audioContext.sampleRate;
    const node = new AudioWorkletNode(audioContext, "voxrt-player", {
      numberOfInputs: 0,
      numberOfOutputs: 1,
      outputChannelCount: [1],
      processorOptions: {
        capacitySamples: Math.round((CAPACITY_MS * rate) / 1000),
        reserveSamples: Math.round((RESERVE_MS * rate) / 1000),
        reportEverySamples: Math.round((REPORT_EVERY_MS * rate) / 1000),
      },
    });
    node.connect(audioContext.destination);
    return new Player(audioContext, node, onReport);
  }

  constructor(audioContext, node, onReport) {
    this.audioContext = audioContext;
    this.node = node;
    this.order = []; // context ids not yet fully handed to the worklet, in play order
    this.pending = new Map(); // context id -> {chunks: Float32Array[], isEnded, resampler}
    node.port.onmessage = (event) => onReport(this.withMs(event.data));
  }

  get sampleRate() {
    return this.audioContext.sampleRate;
  }

  samplesToMs(numSamples) {
    return (numSamples * 1000) / this.sampleRate;
  }

  /** Browsers start an AudioContext suspended until a user gesture (autoplay policy). */
  resume() {
    if (this.audioContext.state === "suspended") this.audioContext.resume();
  }

  /** Reserves the context's place in the play order (call when the context is created). */
  open(contextId) {
    const resampler = this.sampleRate === SAMPLE_RATE ? null : new LinearResampler(SAMPLE_RATE, this.sampleRate);
    this.pending.set(contextId, { chunks: [], isEnded: false, resampler });
    this.order.push(contextId);
  }

  /** Queues decoded 48 kHz samples of a context. */
  push(contextId, samples) {
    const entry = this.pending.get(contextId);
    if (!entry || entry.isEnded) return;
    entry.chunks.push(entry.resampler ? entry.resampler.process(samples) : samples);
    this.pump();
  }

  /** No more audio for the context: it may finish playing without counting an underrun. */
  end(contextId) {
    const entry = this.pending.get(contextId);
    if (!entry) return;
    entry.isEnded = true;
    this.pump();
  }

  /** Forgets a context's audio that has not reached the worklet (it was cancelled). */
  drop(contextId) {
    this.pending.delete(contextId);
    this.order = this.order.filter((id) => id !== contextId);
    this.pump();
  }

  /** Barge-in: silence now. */
  clear() {
    this.order = [];
    this.pending.clear();
    this.node.port.postMessage({ type: "clear" });
  }

  pump() {
    while (this.order.length > 0) {
      const contextId = this.order[0];
      const entry = this.pending.get(contextId);
      for (const samples of entry.chunks) {
        this.node.port.postMessage({ type: "push", contextId, samples }, [samples.buffer]);
      }
      entry.chunks = [];
      if (!entry.isEnded) return;
      this.node.port.postMessage({ type: "end", contextId });
      this.order.shift();
      this.pending.delete(contextId);
    }
  }

  withMs(report) {
    return { ...report, bufferMs: this.samplesToMs(report.numBuffered) };
  }
}

/** Linear interpolation from one rate to another, continuous across chunks (only when the browser would
 * not give us a 48 kHz AudioContext). */
class LinearResampler {
  constructor(fromRate, toRate) {
    this.step = fromRate / toRate; // input samples per output sample
    this.position = 0; // of the next output sample, in input samples from `previous` (index 0)
    this.previous = null; // the last input sample of the chunk before
  }

  process(input) {
    const source = this.previous === null ? input : Float32Array.of(this.previous, ...input);
    const output = [];
    for (; this.position <= source.length - 1; this.position += this.step) {
      const i = Math.floor(this.position);
      const frac = this.position - i;
      output.push(frac === 0 ? source[i] : source[i] * (1 - frac) + source[i + 1] * frac);
    }
    this.position -= source.length - 1;
    this.previous = source[source.length - 1];
    return Float32Array.from(output);
  }
}
