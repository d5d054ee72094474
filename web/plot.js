// A small live plot of the player's buffer level (ms of audio queued) over the last `windowS` seconds, with
// the server's pacing lead as a dashed line: a healthy stream hovers near it, an underrun touches zero.

export class BufferPlot {
  constructor(canvas, windowS = 10) {
    this.canvas = canvas;
    this.windowS = windowS;
    this.samples = []; // [timeMs, bufferMs]
    this.leadMs = null;
  }

  add(bufferMs, nowMs = performance.now()) {
    this.samples.push([nowMs, bufferMs]);
    const oldestMs = nowMs - this.windowS * 1000;
    while (this.samples.length && this.samples[0][0] < oldestMs) this.samples.shift();
  }

  draw(nowMs = performance.now()) {
    const { canvas } = this;
    const ctx = canvas.getContext("2d");
    const w = canvas.width, h = canvas.height;
    const topMs = Math.max(500, (this.leadMs ?? 0) * 1.5, ...this.samples.map(([, b]) => b));
    const x = (t) => w - ((nowMs - t) / (this.windowS * 1000)) * w;
    const y = (b) => h - 2 - (b / topMs) * (h - 4);
    ctx.clearRect(0, 0, w, h);
    if (this.leadMs) {
      ctx.setLineDash([4, 4]);
      ctx.strokeStyle = "#9aa5b1";
      ctx.beginPath();
      ctx.moveTo(0, y(this.leadMs));
      ctx.lineTo(w, y(this.leadMs));
      ctx.stroke();
      ctx.setLineDash([]);
    }
    ctx.strokeStyle = "#2f6fed";
    ctx.lineWidth = 2;
    ctx.beginPath();
    this.samples.forEach(([t, b], i) => (i ? ctx.lineTo(x(t), y(b)) : ctx.moveTo(x(t), y(b))));
    ctx.stroke();
    ctx.fillStyle = "#52606d";
    ctx.font = "11px system-ui, sans-serif";
    ctx.fillText(`${Math.round(topMs)} ms`, 4, 12);
    ctx.fillText(`${this.windowS} s`, w - 26, h - 4);
  }
}
