// One WebSocket session on /v1/realtime: connect, `session.start`, then JSON messages and binary audio
// frames out to the handlers. States: connecting -> starting -> ready -> closed.

import { messages, parseAudioFrame } from "./protocol.js";

export class RealtimeSession {
  /** handlers: {onState(state), onMessage(message), onFrame(frame), onClose({code, reason, isIntended})} */
  constructor(handlers) {
    this.handlers = handlers;
    this.socket = null;
    this.state = "closed";
    this.started = null; // the `session.started` message
  }

  /** `auth` (auth.js) adds `?token=` on a keyed server. */
  connect(voice, codec, auth = null) {
    this.close();
    const url = new URL("/v1/realtime", location.href);
    url.protocol = location.protocol === "https:" ? "wss:" : "ws:";
    auth?.withToken(url);
    const socket = new WebSocket(url, "voxrt.v1");
    socket.binaryType = "arraybuffer";
    this.socket = socket;
    this.started = null;
    this.setState("connecting");
    socket.onopen = () => {
      this.setState("starting");
      this.send(messages.sessionStart(voice, codec));
    };
    socket.onmessage = (event) => {
      if (socket !== this.socket) return;
      if (typeof event.data === "string") this.receiveText(event.data);
      else {
        const frame = parseAudioFrame(event.data);
        if (frame) this.handlers.onFrame(frame);
      }
    };
    socket.onclose = (event) => {
      if (socket !== this.socket) return;
      this.socket = null;
      this.setState("closed");
      this.handlers.onClose({ code: event.code, reason: event.reason, isIntended: false });
    };
  }

  receiveText(text) {
    let message;
    try {
      message = JSON.parse(text);
    } catch {
      return; // the server only sends JSON; nothing sensible to do with anything else
    }
    if (message.type === "session.started") {
      this.started = message;
      this.setState("ready");
    }
    this.handlers.onMessage(message);
  }

  send(message) {
    if (this.socket?.readyState !== WebSocket.OPEN) return false;
    this.socket.send(JSON.stringify(message));
    return true;
  }

  close() {
    const socket = this.socket;
    if (!socket) return;
    this.socket = null; // its close event is ours, not news
    socket.close(1000, "client closed");
    this.setState("closed");
    this.handlers.onClose({ code: 1000, reason: "client closed", isIntended: true });
  }

  setState(state) {
    this.state = state;
    this.handlers.onState(state);
  }
}
