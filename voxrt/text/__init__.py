"""Text in, speakable segments out: pure (standard library only), tested in milliseconds.

- speakable.py: markdown and emoji removed, whitespace collapsed, offsets into the input kept.
- boundaries.py: where pending text may be cut (sentences, clauses, paragraphs, limits), decided only when
  no later fragment can change the decision.
- segmenter.py: `Segmenter`, the streaming state (push / flush) and `Segment`, what it emits.
- stream.py: `SpeakableStream`, speakable applied as text arrives (word forwarding for programs that read
  text incrementally), equal to the offline result however the text was split.
"""

from voxrt.text.segmenter import MODES, Segment, Segmenter
from voxrt.text.speakable import speakable
from voxrt.text.stream import SpeakableStream, Speech

__all__ = ["MODES", "Segment", "Segmenter", "SpeakableStream", "Speech", "speakable"]
