"""The first-turn intent gate: skip recall for chitchat and questions about the assistant itself.

Rule-based, English and Chinese. Only the first turn of an episode is gated (later turns inherit the
task). ``memory_question`` ("what do you remember about X") always recalls.
"""

from __future__ import annotations

import re
from typing import Literal

Intent = Literal["task", "memory_question", "chitchat", "meta", "unknown"]

_CHITCHAT = re.compile(
    r"^\s*(?:hi|hello|hey|yo|thanks|thank you|thx|ok|okay|cool|nice|great|good (?:morning|night|evening)|bye|"
    r"goodbye|lol|👍|你好|您好|嗨|哈喽|谢谢|多谢|好的|好|嗯|再见|早上好|晚安|哈哈+)[\s!.。！~～?？]*$",
    re.IGNORECASE,
)
_META = re.compile(
    r"^\s*(?:who are you|what are you|what can you do|what model are you|are you (?:an? )?(?:ai|bot|gpt|claude)|"
    r"introduce yourself|你是谁|你是什么|你能做什么|你会什么|介绍一下你自己|你是什么模型)[\s!.。！?？]*$",
    re.IGNORECASE,
)
_MEMORY_QUESTION = re.compile(
    r"\b(?:do you remember|what do you (?:remember|know) about|remind me|what did (?:we|i) (?:decide|do|say)|"
    r"have we (?:done|seen|discussed))\b|你还记得|记得.*吗|我们之前|上次我们|之前说过",
    re.IGNORECASE,
)


def classify_intent(query: str) -> Intent:
    """Classify a prompt: task, memory_question, chitchat, meta (or unknown when empty)."""
    text = query.strip()
    if not text:
        return "unknown"
    if _MEMORY_QUESTION.search(text):
        return "memory_question"
    if _CHITCHAT.match(text):
        return "chitchat"
    if _META.match(text):
        return "meta"
    return "task"


def should_skip(intent: Intent) -> bool:
    """Chitchat and meta questions get no recalled memory."""
    return intent in ("chitchat", "meta")
