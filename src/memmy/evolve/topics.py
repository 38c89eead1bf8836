"""Topic evidence for task segmentation and pairing: content keywords (English words, Chinese bigrams).

A new task inside a session shows up as a message whose content words share little with the open task's
turns (requests, answers, commands, files, errors) and whose meaning is far from them. Both languages:
English words (stop words and generic verbs such as "run", "fix", "error" removed) and, for Chinese, the
bigrams of each CJK run minus function bigrams ("一下", "帮我", "怎么" ...). Identifiers such as
``@shop/payments`` or ``etl/clean.py`` are split into their parts so that a path and a module name match.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

from memmy.evolve.rules_text import short_input
from memmy.kinds.trace import Trace

_ASCII = re.compile(r"[A-Za-z][A-Za-z0-9_]*")
_CJK_RUN = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]+")
# identifiers made of digits that name the same thing in a request, a command and an error: dates, ports, ids
_NUMERIC = re.compile(r"\b\d{4}-\d{2}-\d{2}\b|(?<![\w.-])\d{3,}(?![\w.-])")
# function characters: a bigram across one of them ("的订", "把昨") is no word; runs are split at them
_CJK_FUNCTION = re.compile(
    r"一下|帮我|请帮|给我|帮忙|麻烦|怎么|什么|看看|一直|[的了是在把和与或吗呢吧啊被让我你他她它们个这那给都也就]"
)
STOP_EN = frozenset(
    """a about above after again against all also an and any anything are as at be because been before being
    below between both but by can could did do does doing done down during each else even ever every few first
    for from further get gets got had has have having he her here hers him his how i if in into is it its itself
    just let lets me more most my need needs no nor not now of off on once one only or other our out over own
    please same she should so some still such than that the their them then there these they this those through
    to too two under until up us very was we were what when where which while who whom why will with would you
    your yours yes ok okay thanks thank great works work worked working fine good right wrong again same going
    look see show check make run runs running ran fix fixed fixes fixing try tried use using used want why
    error errors fail fails failed failing failure broken break issue problem something thing things way
    didn doesn isn wasn couldn won aren haven shouldn
    change changing changed find figure out help keep still first next another moving let""".split()
)
STOP_ZH = frozenset(
    """一下 一个 这个 那个 帮我 请帮 我们 你们 怎么 什么 为什 么会 还是 然后 看看 一直 现在 需要 可以 是不 不是
    之前 之后 以后 原因 问题 报错 失败 成功 了吗 好的 谢谢 搞定 出来 起来 一些 东西 这样 那样 如何 能不 不能 处理
    接下 下来 另外 下一 先查 查一 再改 先看 是怎 怎么 么回 回事 同样 样的 的错 错误 误的 重新 运行 执行 修复 修一
    一个 给我 帮忙 麻烦""".split()
)


def content_keywords(text: str) -> set[str]:
    """Lower-case content words (>= 3 letters, no stop words, a plural ``s`` dropped), numeric identifiers
    (dates, numbers of three or more digits: ports, ids) and CJK bigrams (runs split at function characters)."""
    found: set[str] = set()
    for match in _ASCII.finditer(text):
        for part in match.group(0).lower().split("_"):
            if len(part) < 3 or part in STOP_EN or part.isdigit():
                continue
            found.add(part[:-1] if len(part) > 4 and part.endswith("s") and not part.endswith("ss") else part)
    found.update(match.group(0) for match in _NUMERIC.finditer(text))
    for run in (piece for whole in _CJK_RUN.findall(text) for piece in _CJK_FUNCTION.split(whole)):
        for i in range(len(run) - 1):
            bigram = run[i : i + 2]
            if bigram not in STOP_ZH:
                found.add(bigram)
    return found


def enough_content(keywords: set[str]) -> bool:
    """True when a message names enough to start a topic of its own: two words, four Chinese bigrams, or one
    word and two bigrams ("look into why first" or "先查一下原因再改" do not)."""
    cjk = sum(1 for k in keywords if _CJK_RUN.match(k))
    words = len(keywords) - cjk
    return words >= 2 or cjk >= 4 or (words >= 1 and cjk >= 2)


STRONG_SIMILARITY = 0.45  # one shared content word is enough when the meaning also matches this well


def topical(query: str, memory_text: str, similarity: float = 0.0, vocabulary: str | None = None) -> bool:
    """Does a memory speak to the prompt's topic? It must share content words with the prompt: two, or a third
    of a long prompt's (one when the prompt names only one or two, or when its meaning matches at
    ``STRONG_SIMILARITY``), a Chinese bigram counting as a word. A prompt without content words has no topic.

    With a ``vocabulary`` (the lower-cased text of everything recalled for the prompt), a Chinese bigram found
    nowhere in it (one across two words) does not count against every memory (see :func:`_known`).

    This is what keeps an unrelated prompt silent: meaning alone (MiniLM cosine) puts "run the checkout tests"
    near "run the DAG tests", and Chinese text near any other Chinese text. To judge many memories against one
    prompt, :class:`Topic` reads the prompt once.
    """
    return Topic.of(query, vocabulary).covers(memory_text, similarity)


@dataclass(frozen=True)
class Topic:
    """A prompt's topic as :func:`topical` judges it, read once for the many memories of one recall.

    ``wanted``: the prompt's content words; ``needed``: how many a memory must share; ``by_meaning``: whether
    one shared word plus a ``STRONG_SIMILARITY`` meaning match is enough (not for a prompt with CJK text).
    """

    wanted: frozenset[str]
    needed: int
    by_meaning: bool

    @classmethod
    def of(cls, query: str, vocabulary: str | None = None) -> Topic:
        """The topic of ``query``, with ``vocabulary`` as in :func:`topical`."""
        wanted = content_keywords(query)
        needed = 1 if len(wanted) <= 2 else max(2, math.ceil(len(_known(wanted, vocabulary)) / 3))
        return cls(frozenset(wanted), needed, _CJK_RUN.search(query) is None)

    def covers(self, memory_text: str, similarity: float = 0.0) -> bool:
        """Whether a memory with this text (and this similarity to the prompt) is on the topic."""
        if not self.wanted:
            return False
        found = self.wanted & content_keywords(memory_text)
        if len(found) >= self.needed:
            return True
        # MiniLM cannot judge Chinese by meaning: its similarity only counts for text without CJK
        return bool(found) and similarity >= STRONG_SIMILARITY and self.by_meaning


def _known(wanted: set[str], vocabulary: str | None) -> set[str]:
    """The prompt's words, less the Chinese bigrams that occur nowhere in ``vocabulary``: a bigram across two
    words ("端商" of 前端商城) is an artefact of having no word boundaries. A word the store does not know is
    kept: it says the prompt is about something else."""
    if vocabulary is None:
        return wanted
    return {w for w in wanted if not _CJK_RUN.match(w) or w in vocabulary}


EVIDENCE_SHARE = 0.5  # the share of a prompt's content words that derived guidance must carry to be recalled on it


def evidence_covers(query: str, evidence: str, vocabulary: str | None = None) -> bool:
    """Does derived guidance carry the prompt's task in its evidence? Its text (the tasks it was seen in, the
    commands, files and error it names) holds at least two of the prompt's content words and at least half
    of those found in ``vocabulary`` (see :func:`topical`). A repeat of a task worded differently ("Backfill
    the orders table for 2026-12-01" for a task whose command was ``etl.load_orders --date 2026-12-01``) is
    found this way when its meaning is not."""
    wanted = content_keywords(query)
    found = wanted & content_keywords(evidence)
    return len(found) >= 2 and len(found) >= EVIDENCE_SHARE * len(_known(wanted, vocabulary))


def overlap(new: set[str], context: set[str]) -> float:
    """Share of ``new``'s content found in ``context`` (0 when ``new`` is empty).

    A word counts one; Chinese counts by its characters, half a word each, a character being found when one of
    ``new``'s bigrams holding it is in ``context``. Bigrams alone would halve a Chinese share: a run has as many
    bigrams across two words (大内, 存后 of 调大内存后重新构建) as words, and those are never found anywhere, so
    "调大内存后重新构建" after a build that ran out of memory (内存不足) shared 2 of 7 bigrams (0.29, a new task)
    where "raise the memory limit and build again" shares 2 of 4 words.
    """
    if not new:
        return 0.0
    words = {k for k in new if not _CJK_RUN.match(k)}
    bigrams = new - words
    chars = {ch for gram in bigrams for ch in gram}
    found = {ch for gram in bigrams & context for ch in gram}
    total = len(words) + 0.5 * len(chars)
    return (len(words & context) + 0.5 * len(found)) / total if total else 0.0


def shared(a: set[str], b: set[str]) -> set[str]:
    """The keywords two texts share."""
    return a & b


def evidence_keywords(trace: Trace) -> set[str]:
    """What a step is about: the content words of its request, answer, tool inputs, outputs and errors, without
    the tools' program names (``pnpm``, ``kubectl``), which two unrelated steps easily share."""
    heads: set[str] = set()
    parts = [trace.user_text, trace.agent_text, *trace.error_signatures]
    for call in trace.tool_calls:
        command = short_input(call.get("input"))
        heads.update(w.lower() for w in command.split()[:1])
        heads.add(str(call.get("name") or "").lower())
        parts += [command, str(call.get("error") or ""), str(call.get("output") or "")[:400]]
    return content_keywords("\n".join(parts)) - heads


def step_keywords(tool_calls: list[dict[str, Any]]) -> set[str]:
    """What a step's tool calls touch: content words of their inputs (files, command arguments) and errors,
    without the programs' names (``pnpm``, ``kubectl``) and the tools' names."""
    heads: set[str] = set()
    parts: list[str] = []
    for call in tool_calls:
        if not isinstance(call, dict):
            continue
        command = short_input(call.get("input"))
        heads.update(w.lower() for w in command.split()[:1])
        heads.add(str(call.get("name") or "").lower())
        parts.append(command)
        if call.get("error") or call.get("success") is False:
            parts.append(f"{call.get('error') or ''} {str(call.get('output') or '')[:300]}")
    return content_keywords("\n".join(parts)) - heads


def shares_evidence(failed: Trace, later: Trace, minimum: int = 2) -> bool:
    """True when a later step is about the same thing as a failed one: they share at least ``minimum`` content
    words (error text, file, command arguments, key terms). A step of another task does not pair with it."""
    return len(evidence_keywords(failed) & evidence_keywords(later)) >= minimum
