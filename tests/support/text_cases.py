"""Texts for the text-path tests (tests/text, tests/gateway): real utterances, agent replies, tricky pieces,
and the ways a stream may split them."""

from __future__ import annotations

import json
import random
import re
from pathlib import Path

WORKLOAD = [json.loads(line)["text"] for line in
            (Path(__file__).parents[1] / "text" / "data" / "workload_texts.jsonl").read_text("utf-8").splitlines()]

REPLIES = [
    "Sure, Dr. Smith's balance is $3.50. Thanks!",
    "Of course! Your appointment with Prof. J. K. Lee is on Jan. 5 at 10:30 a.m., in room No. 4. See you then.",
    "Hmm… let me check. Version v1.2.3 (released 2.0.1?) fixed it; e.g. the crash at .5 s. Anything else?!",
    "**Great news:** your order shipped 🎉🎉! Track it at [the portal](https://x.io/t?id=5). Questions? Ask me.",
    "Here are your options:\n\n1. The **basic** plan, $10.\n2. The _pro_ plan — $20.\n- Or `custom`.\n\nWhich one?",
    "## Summary\nAll done 👍🏽 — mostly. The U.S. office opens at 9 a.m. Mr. and Mrs. Smith, etc. will attend.",
    "```python\nprint('hi')\n```\nThat prints hi. ![a cat](cat.png \"Cat\") Cute 😊, right?",
    "> Quoted **wisdom**\n---\n* one\n+ two\n10) ten ~~old~~ new 1️⃣ 👩‍💻 dev 🇺🇸 go",
    "Call 1-800-555-0199 or e-mail dr.who@example.com; it's 20% off (3 × 4 = 12) → 50°F. Done!",
    "你好。我可以帮你！还有问题吗？ Okay, bye.",
    "   Leading space and trailing space.   ",
    "🚀🚀🚀",
]

PIECES = [
    " ", " ", " ", "  ", "\n", "\n\n", "\t", " \t", "Hello", "world", "the", "a", "I", "J", "Dr", "No", "e.g",
    "U.S", ".", ".", "...", "…", "!", "!!", "?", ",", ";", ":", "—", "–", "-", "-5", "3", "50", "12.", "1)",
    "123456789.", "1234567890.", "*", "**", "***", "_", "__", "___", "~", "~~", "`", "``", "```", "```py", "~~~",
    "---", "- - -", "#", "## ", "######", "#######", "- ", "+", "+ ", "1. ", ">", "> ", "[", "]", "](", "(u", ")",
    "![", "[x](y)", "[a](b \"t\")", '"', '" ', "'", "🎉", "👍🏽", "❤️", "😊", "👩‍💻", "1️⃣", "\u200d", "\ufe0f",
    "\u20e3", "🏽", "你好", "。", "é", "x" * 30,
]


def llm_tokens(text: str) -> list[str]:
    """As voxrt/loadgen/runner.py's `tokens`: each word with the whitespace before it."""
    return re.findall(r"\s*\S+\s*$|\s*\S+", text) or [text]


def random_split(text: str, rng: random.Random, max_len: int = 6) -> list[str]:
    fragments, i = [], 0
    while i < len(text):
        n = rng.randint(0, max_len)
        fragments.append(text[i:i + n])
        i += n
    return fragments


