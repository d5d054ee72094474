// Per-context audio decoders: frames in, Float32 samples (mono, 48 kHz) out. One decoder per context,
// because each context is its own Opus stream (the server encodes every context from a fresh state).

import { SAMPLE_RATE } from "./protocol.js";

const OPUS_CONFIG = { codec: "opus", sampleRate: SAMPLE_RATE, numberOfChannels: 1 };

/** Whether WebCodecs can decode our Opus stream (needs a secure context: https or localhost). */
export async function isOpusSupported() {
  if (typeof AudioDecoder === "undefined") return false;
  try {
    return (await AudioDecoder.isConfigSupported(OPUS_CONFIG)).supported === true;
  } catch {
    return false;
  }
}

/** A decoder for the session's codec ("opus" or "pcm16"); onSamples(Float32Array) gets each frame. */
export function createDecoder(codec, onSamples, onError) {
  return codec === "opus" ? new OpusFrameDecoder(onSamples, onError) : new Pcm16FrameDecoder(onSamples);
}

class OpusFrameDecoder {
  constructor(onSamples, onError) {
    this.decoder = new AudioDecoder({
      output: (audioData) => {
        const samples = new Float32Array(audioData.numberOfFrames);
        audioData.copyTo(samples, { planeIndex: 0, format: "f32-planar" });
        audioData.close();
        onSamples(samples);
      },
      error: onError,
    });
    this.decoder.configure(OPUS_CONFIG);
  }

  decode(frame) {
    if (this.decoder.state !== "configured") return;
    // Every Opus packet decodes on its own, hence "key"; WebCodecs timestamps are microseconds.
    this.decoder.decode(new EncodedAudioChunk({ type: "key", timestamp: frame.ptsMs * 1000, data: frame.payload }));
  }

  /** Resolves once every frame given so far has come out (or the decoder was closed). */
  async flush() {
    if (this.decoder.state !== "configured") return;
    try {
      await this.decoder.flush();
    } catch {
      // closed meanwhile (barge-in): nothing more to come out
    }
  }

  /** Drops frames still being decoded: no output follows. */
  close() {
    if (this.decoder.state !== "closed") this.decoder.close();
  }
}

class Pcm16FrameDecoder {
  constructor(onSamples) {
    this.onSamples = onSamples;
    this.isClosed = false;
  }

  decode(frame) {
    if (this.isClosed) return;
    const view = new DataView(frame.payload.buffer, frame.payload.byteOffset, frame.payload.byteLength);
    const samples = new Float32Array(frame.payload.byteLength >> 1);
    for (let i = 0; i < samples.length; i++) samples[i] = view.getInt16(2 * i, true) / 32768;
    this.onSamples(samples);
  }

  async flush() {}

  close() {
    this.isClosed = true;
  }
}
