"""Text in, speakable segments out: pure (standard library only), tested in milliseconds.

- speakable.py: markdown and emoji removed, whitespace collapsed, offsets into the input kept.
- boundaries.py: where pending text may be cut (sentences, clauses, paragraphs, limits), decided only when
  no later fragment can change the decision.
- segmenter.py: `Segmenter`, the streaming state (push / flush) and `Segment`, what it emits.
"""

from voxrt.text.segmenter import MODES, Segment, Segmenter
from voxrt.text.speakable import speakable

__all__ = ["MODES", "Segment", "Segmenter", "speakable"]
