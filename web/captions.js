// Captions: a context's text, with the words of its `alignment` messages highlighted as they are played.

export class Captions {
  constructor(element) {
    this.element = element;
    this.spans = []; // [{span, word}] of the rendered context
  }

  /** Renders the context's text (as sent so far), each aligned word in its own span. */
  render(context) {
    this.element.replaceChildren();
    this.spans = [];
    const text = context.text;
    const words = [...context.words].sort((a, b) => a.char_start - b.char_start);
    let cursor = 0;
    for (const word of words) {
      if (word.char_start < cursor || word.char_end > text.length) continue;
      this.element.append(text.slice(cursor, word.char_start));
      const span = document.createElement("span");
      span.className = "word";
      span.textContent = text.slice(word.char_start, word.char_end);
      this.element.append(span);
      this.spans.push({ span, word });
      cursor = word.char_end;
    }
    if (cursor < text.length) {
      const rest = document.createElement("span");
      rest.className = "unaligned"; // sent, but not voiced yet
      rest.textContent = text.slice(cursor);
      this.element.append(rest);
    }
  }

  /** Marks words played by `playedMs` as spoken, and the ones being played as current; an interrupted
   * context keeps what was heard and is marked as such. */
  highlight(playedMs, isInterrupted) {
    this.element.classList.toggle("interrupted", isInterrupted);
    for (const { span, word } of this.spans) {
      span.classList.toggle("spoken", word.end_ms <= playedMs);
      span.classList.toggle("current", word.start_ms <= playedMs && playedMs < word.end_ms);
    }
  }

  showHint(text) {
    this.spans = [];
    const hint = document.createElement("span");
    hint.className = "hint";
    hint.textContent = text;
    this.element.replaceChildren(hint);
  }
}
