// The voxrt.v1 wire protocol as the page uses it (docs/protocol.md): client messages, the 12-byte binary
// audio frame header, and the LLM-like tokenizer behind "Stream as tokens".

export const SAMPLE_RATE = 48000;
export const FRAME_MS = 20;

const FRAME_HEADER_BYTES = 12;
const FRAME_KIND_AUDIO = 1;
const FLAG_FIRST = 0b01;
const FLAG_LAST = 0b10;

/** Parses one binary frame: header (big-endian) + payload. Returns null for a kind other than audio. */
export function parseAudioFrame(buffer) {
  const view = new DataView(buffer);
  if (buffer.byteLength < FRAME_HEADER_BYTES || view.getUint8(0) !== FRAME_KIND_AUDIO) return null;
  const flags = view.getUint8(1);
  return {
    isFirst: (flags & FLAG_FIRST) !== 0,
    isLast: (flags & FLAG_LAST) !== 0,
    index: view.getUint16(2),
    seq: view.getUint32(4),
    ptsMs: view.getUint32(8),
    payload: new Uint8Array(buffer, FRAME_HEADER_BYTES),
  };
}

/** Client -> server messages (JSON text frames). */
export const messages = {
  sessionStart: (voice, codec) => ({
    type: "session.start",
    voice,
    output: { codec, sample_rate: SAMPLE_RATE, frame_ms: FRAME_MS },
  }),
  text: (contextId, text) => ({ type: "text", context_id: contextId, text }),
  contextEnd: (contextId) => ({ type: "context.end", context_id: contextId }),
  cancel: (contextId) => ({ type: "cancel", context_id: contextId }),
  playback: (contextId, playedMs) => ({ type: "playback", context_id: contextId, played_ms: playedMs }),
};

// A word (letters/digits, with inner apostrophes: "Smith's") or one punctuation mark, each with the
// whitespace before it; trailing whitespace is a token of its own. Joining the tokens gives the text back.
const TOKEN_RE = /\s*(?:[\p{L}\p{N}]+(?:['\u2019][\p{L}\p{N}]+)*|[^\s\p{L}\p{N}])|\s+$/gu;

/** Splits text the way an LLM streams it: "Hi, Dr. Lee" -> ["Hi", ",", " Dr", ".", " Lee"]. */
export function splitTokens(text) {
  return text.match(TOKEN_RE) ?? [];
}
