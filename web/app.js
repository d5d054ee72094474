// The voxrt browser page: type text, hear it. Wires the session (session.js), decoders (decoder.js), the
// player (player.js + player-worklet.js) and captions (captions.js) to the page, and keeps live counters on
// `window.voxrt` for tests (tests/web/test_browser.py).

import { Auth } from "./auth.js";
import { Captions } from "./captions.js";
import { createDecoder, isOpusSupported } from "./decoder.js";
import { Player } from "./player.js";
import { messages, splitTokens } from "./protocol.js";
import { BufferPlot } from "./plot.js";
import { RealtimeSession } from "./session.js";

const $ = (id) => document.getElementById(id);
const ui = {
  text: $("text"), voice: $("voice"), rate: $("rate"),
  speak: $("speak"), stream: $("stream"), barge: $("barge"), reconnect: $("reconnect"),
  connection: $("connection"), codecNote: $("codec-note"), audioNote: $("audio-note"),
  errors: $("errors"), log: $("log"),
  stat: {
    state: $("stat-state"), codec: $("stat-codec"), ttfa: $("stat-ttfa"), buffer: $("stat-buffer"),
    frames: $("stat-frames"), underruns: $("stat-underruns"), played: $("stat-played"), turn: $("stat-turn"),
  },
};
const captions = new Captions($("captions"));
const auth = new Auth();
const plot = new BufferPlot($("buffer-plot"));
plot.leadMs = 300; // the pacing lead: sessionStart leaves the server's default (docs/protocol.md)
const CLOSE_AUTH = 4001;

// Live counters, read by tests and handy in the devtools console.
const live = (window.voxrt = {
  decodedFrames: 0, playedSamples: 0, underruns: 0, ttfaMs: null, bufferMs: 0,
  lastContextDone: null, cancelledCount: 0, errors: [], state: "closed", codec: null, sampleRate: null,
  needsKey: false, isNoise: null, plotSamples: 0,
});

let player = null;
let codec = "opus";
let session = null;
let numContexts = 0;
const contexts = new Map(); // context id -> context (see newContext)
const contextsByIndex = new Map(); // the u16 index binary frames carry -> context
let shownContext = null; // the one in the captions
let isCaptionsStale = false;
let lastReport = null; // the worklet's latest report
let onReady = null; // what to send once the (re)connected session is ready

// ---- contexts (one per Speak / Stream click) ------------------------------------------------------------

function newContext() {
  const id = `turn-${++numContexts}`;
  const context = {
    id, index: null, text: "", words: [],
    firstTextAt: null, ttfaMs: null, numPlayed: 0, streamer: null,
    isEnding: false, isServerDone: false, isPlayed: false, isCancelled: false, isCutOff: false,
  };
  context.decoder = createDecoder(codec, (samples) => onSamples(context, samples),
    (error) => showError("decode_error", `${id}: ${error.message}`));
  contexts.set(id, context);
  player.open(id);
  shownContext = context;
  isCaptionsStale = true;
  return context;
}

function sendText(context, text) {
  if (context.firstTextAt === null) context.firstTextAt = performance.now();
  context.text += text;
  isCaptionsStale = true;
  session.send(messages.text(context.id, text));
}

function onFrame(frame) {
  const context = contextsByIndex.get(frame.index);
  if (!context || context.isCancelled) return; // frames in flight when we barged in
  context.decoder.decode(frame);
  if (frame.isLast) endAudio(context);
}

function onSamples(context, samples) {
  if (context.isCancelled) return;
  live.decodedFrames += 1;
  if (context.ttfaMs === null) {
    context.ttfaMs = Math.round(performance.now() - context.firstTextAt);
    live.ttfaMs = context.ttfaMs;
  }
  player.push(context.id, samples);
}

/** All of the context's audio is in: once decoded, the player may play it out to the end. */
function endAudio(context) {
  if (context.isEnding) return;
  context.isEnding = true;
  context.decoder.flush().then(() => {
    if (!context.isCancelled) player.end(context.id);
  });
}

function activeContexts() {
  return [...contexts.values()].filter((c) => !c.isCancelled && !c.isPlayed);
}

// ---- actions -----------------------------------------------------------------------------------------

function speak() {
  const text = ui.text.value;
  if (!text.trim()) return log("Type some text first.");
  whenReady(() => {
    const context = newContext();
    sendText(context, text);
    session.send(messages.contextEnd(context.id));
  });
}

function streamAsTokens() {
  if (!ui.text.value.trim()) return log("Type some text first.");
  const tokens = splitTokens(ui.text.value);
  const tokensPerS = Math.min(Math.max(Number(ui.rate.value) || 20, 1), 1000);
  whenReady(() => {
    const context = newContext();
    context.streamer = startStreaming(tokens, tokensPerS, (token) => sendText(context, token), () => {
      context.streamer = null;
      session.send(messages.contextEnd(context.id));
    });
  });
}

/** Calls send(token) `tokensPerS` times a second (on a fixed schedule, so timer lateness does not add up),
 * then done(). Returns {stop()}. */
function startStreaming(tokens, tokensPerS, send, done) {
  const startedAt = performance.now();
  let next = 0;
  const tick = () => {
    while (next < tokens.length && performance.now() >= startedAt + (next * 1000) / tokensPerS) send(tokens[next++]);
    if (next < tokens.length) timer = setTimeout(tick, startedAt + (next * 1000) / tokensPerS - performance.now());
    else done();
  };
  let timer = setTimeout(tick, 0); // not synchronously: the caller keeps the returned handle first
  return { stop: () => clearTimeout(timer) };
}

/** Barge-in: silence at once, then tell the server to stop generating. */
function bargeIn() {
  const active = activeContexts();
  player.clear();
  for (const context of active) {
    context.isCancelled = true;
    context.streamer?.stop();
    context.decoder.close();
    session.send(messages.cancel(context.id));
  }
  if (active.length) log(`Barge-in: cancelling ${active.map((c) => c.id).join(", ")}`);
}

/** Runs `action` on a ready session, (re)connecting first if the session was closed. */
function whenReady(action) {
  player.resume();
  if (session.state === "ready") return action();
  onReady = action;
  if (session.state === "closed") connect();
}

async function connect() {
  stopAll();
  try {
    await auth.fresh();
  } catch (error) {
    return askForKey(`could not renew the token: ${error.message}`);
  }
  session.connect(ui.voice.value || "default", codec, auth);
}

/** Shows the key field (the server refused us, or has keys and we hold no token). */
function askForKey(message = null) {
  live.needsKey = true;
  $("auth-card").hidden = false;
  $("auth-error").hidden = !message;
  $("auth-error").textContent = message || "";
  $("api-key").focus();
}

async function submitKey(event) {
  event.preventDefault();
  try {
    await auth.mint($("api-key").value.trim());
  } catch (error) {
    return askForKey(`the server refused the key: ${error.message}`);
  }
  $("api-key").value = "";
  $("auth-card").hidden = true;
  live.needsKey = false;
  log("API key accepted: connected with a short-lived token");
  if (ui.voice.options.length === 0) await loadVoices();
  await loadModel();
  connect();
}

/** Forgets every context (a new session is coming). */
function stopAll() {
  player.clear();
  for (const context of activeContexts()) {
    context.isCancelled = true;
    context.streamer?.stop();
    context.decoder.close();
  }
}

// ---- server messages ---------------------------------------------------------------------------------

function onMessage(message) {
  const context = contexts.get(message.context_id);
  switch (message.type) {
    case "session.started": {
      const out = message.output;
      live.codec = out.codec;
      ui.stat.codec.textContent = out.codec === "opus"
        ? `Opus ${out.sample_rate / 1000} kHz, ${out.frame_ms} ms (WebCodecs)`
        : `PCM16 ${out.sample_rate / 1000} kHz`;
      log(`Session ${message.session_id}: model ${message.model}, voice ${message.voice}`);
      const action = onReady;
      onReady = null;
      action?.();
      break;
    }
    case "context.started":
      if (context) {
        context.index = message.index;
        contextsByIndex.set(message.index, context);
      }
      break;
    case "alignment":
      if (context) {
        context.words.push(...(message.words ?? message.segments.map((s) => ({ ...s, word: s.text }))));
        isCaptionsStale = true;
      }
      break;
    case "cancelled":
      live.cancelledCount += 1;
      log(`${message.context_id} cancelled after ${(message.played_ms / 1000).toFixed(2)} s` +
        (message.spoken_text ? `; heard: \u201c${message.spoken_text}\u201d` : ""));
      break;
    case "context.done":
      live.lastContextDone = message;
      if (context) {
        context.isServerDone = true;
        if (!context.isCancelled) endAudio(context);
      }
      if (message.reason !== "cancelled") {
        const m = message.metrics ?? {};
        log(`${message.context_id} ${message.reason}: ${(message.audio_ms / 1000).toFixed(2)} s of audio, ` +
          `server TTFA ${m.ttfa_ms} ms`);
      }
      break;
    case "error":
      if (message.code === "unknown_context" && context?.isServerDone) {
        break; // a playback report that crossed the context's `context.done`: nothing went wrong
      }
      showError(message.code, message.message + (message.context_id ? ` (${message.context_id})` : ""));
      if (context && context.index === null) {
        // its text was refused before the context opened: nothing will come for it
        context.isServerDone = true;
        endAudio(context);
      }
      break;
    default: // flushed, pong: nothing to show
  }
}

function onClose({ code, reason, isIntended }) {
  for (const context of contexts.values()) {
    context.streamer?.stop();
    context.streamer = null;
    if (!context.isServerDone && !context.isCancelled) {
      context.isCutOff = true; // what arrived still plays out
      endAudio(context);
    }
    context.isServerDone = true;
  }
  contextsByIndex.clear();
  if (code === CLOSE_AUTH) return askForKey("the server refused the connection: an API key or a fresh token is needed");
  if (!isIntended) {
    const message = `connection closed (code ${code}${reason ? `: ${reason}` : ""}); Speak reconnects`;
    showError("closed", message);
  }
}

function onState(state) {
  live.state = state;
  const labels = {
    connecting: "connecting\u2026", starting: "starting session\u2026", ready: "connected", closed: "disconnected",
  };
  ui.connection.textContent = labels[state];
  ui.connection.dataset.state = state;
  ui.stat.state.textContent = labels[state];
  ui.reconnect.hidden = state !== "closed";
}

// ---- the player's reports ------------------------------------------------------------------------------

function onReport(report) {
  lastReport = report;
  live.playedSamples = report.numPlayedTotal;
  live.underruns = report.numUnderruns;
  live.bufferMs = Math.round(report.bufferMs);
  plot.add(live.bufferMs);
  live.plotSamples = plot.samples.length;
  for (const { id, numPlayed } of report.contexts) onPlayed(id, numPlayed, false);
  for (const { id, numPlayed } of report.finished) onPlayed(id, numPlayed, true);
}

/** Keeps the context's played count, and tells the server (it paces the audio by what we have heard). */
function onPlayed(contextId, numPlayed, isFinished) {
  const context = contexts.get(contextId);
  if (!context || context.isCancelled) return;
  const isNew = numPlayed !== context.numPlayed;
  context.numPlayed = numPlayed;
  if (isFinished) context.isPlayed = true;
  if (isNew && !context.isServerDone) {
    session.send(messages.playback(contextId, Math.round(player.samplesToMs(numPlayed))));
  }
}

/** ms of the context played by now: the last report plus the time rendered since, if it is playing. */
function playedMsNow(context) {
  if (context.isPlayed) return Infinity;
  let playedMs = player.samplesToMs(context.numPlayed);
  const entry = lastReport?.contexts.find((c) => c.id === context.id);
  if (entry?.isPlaying && !context.isCancelled) {
    const sinceMs = (player.audioContext.currentTime - lastReport.currentTime) * 1000;
    playedMs += Math.min(Math.max(sinceMs, 0), player.samplesToMs(entry.numBuffered));
  }
  return playedMs;
}

// ---- the page ----------------------------------------------------------------------------------------

function render() {
  if (shownContext) {
    if (isCaptionsStale) captions.render(shownContext);
    isCaptionsStale = false;
    captions.highlight(playedMsNow(shownContext), shownContext.isCancelled);
  }
  const s = ui.stat;
  s.ttfa.textContent = live.ttfaMs === null ? "\u2013" : `${live.ttfaMs} ms`;
  s.buffer.textContent = `${live.bufferMs} ms`;
  s.frames.textContent = String(live.decodedFrames);
  s.underruns.textContent = String(live.underruns);
  s.played.textContent = `${(live.playedSamples / player.sampleRate).toFixed(1)} s`;
  s.turn.textContent = shownContext ? `${shownContext.id}: ${turnStatus(shownContext)}` : "\u2013";
  ui.barge.disabled = activeContexts().length === 0;
  ui.audioNote.hidden = player.audioContext.state !== "suspended";
  plot.draw();
  requestAnimationFrame(render);
}

function turnStatus(context) {
  if (context.isCancelled) return "cancelled";
  if (context.isPlayed) return context.isCutOff ? "cut off (connection closed)" : "done";
  if (context.streamer) return "streaming tokens";
  if (context.numPlayed > 0 || context.ttfaMs !== null) return "speaking";
  return "waiting for audio";
}

function log(text) {
  const item = document.createElement("li");
  item.textContent = `${new Date().toLocaleTimeString()}  ${text}`;
  ui.log.append(item);
  while (ui.log.children.length > 50) ui.log.firstElementChild.remove();
  ui.log.scrollTop = ui.log.scrollHeight;
}

function showError(code, message) {
  live.errors.push({ code, message });
  const item = document.createElement("li");
  const strong = document.createElement("strong");
  strong.textContent = code;
  item.append(strong, ` ${message}`);
  ui.errors.append(item);
  while (ui.errors.children.length > 20) ui.errors.firstElementChild.remove();
  ui.errors.hidden = false;
}

/** The served model; says plainly when its audio is noise (random weights: `tiny` and the benchmark shapes). */
async function loadModel() {
  try {
    const response = await auth.fetch("/v1/models");
    if (!response.ok) return;
    const model = (await response.json()).data[0];
    live.isNoise = Boolean(model.audio_is_noise);
    const note = $("noise-note");
    note.hidden = !live.isNoise;
    note.textContent = live.isNoise
      ? `The model "${model.id}" has random weights: what you hear is noise, not speech. It exercises the ` +
        "gateway and the engine (timing, streaming, barge-in); serve a real checkpoint (e.g. --model qwen3-tts) to hear speech."
      : "";
  } catch {
    // the page works without it
  }
}

/** false when the server wants a key we do not have. */
async function loadVoices() {
  try {
    const response = await auth.fetch("/v1/voices");
    if (response.status === 401) {
      askForKey(auth.token ? "the token was refused (expired?): paste an API key" : null);
      return false;
    }
    if (!response.ok) throw new Error(`HTTP ${response.status}`);
    const { default: defaultVoice, voices } = await response.json();
    for (const voice of voices) {
      const option = new Option(voice.name === voice.id ? voice.id : `${voice.name} (${voice.id})`, voice.id);
      option.selected = voice.id === defaultVoice;
      ui.voice.append(option);
    }
  } catch (error) {
    ui.voice.append(new Option("default", "default"));
    showError("voices_unavailable", `could not load /v1/voices: ${error.message}`);
  }
  return true;
}

async function main() {
  $("auth-form").addEventListener("submit", submitKey);
  const [isAllowed, hasOpus] = await Promise.all([loadVoices(), isOpusSupported()]);
  codec = hasOpus ? "opus" : "pcm16";
  ui.codecNote.hidden = hasOpus;
  try {
    player = await Player.create(onReport);
    live.sampleRate = player.sampleRate;
  } catch (error) {
    showError("audio_unavailable", `this browser cannot play audio here: ${error.message}`);
    return;
  }
  document.addEventListener("pointerdown", () => player.resume()); // autoplay policy: sound after a click
  session = new RealtimeSession({ onState, onMessage, onFrame, onClose });
  ui.speak.addEventListener("click", speak);
  ui.stream.addEventListener("click", streamAsTokens);
  ui.barge.addEventListener("click", bargeIn);
  ui.reconnect.addEventListener("click", connect);
  ui.voice.addEventListener("change", () => {
    log(`Voice ${ui.voice.value}: starting a new session`);
    connect();
  });
  requestAnimationFrame(render);
  if (!isAllowed) return; // the key form connects once a key is accepted
  await loadModel();
  connect();
}

main();
