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

from memmy.evolve.model import TraceView
from memmy.evolve.rules_text import short_input

_ASCII = re.compile(r"[A-Za-z][A-Za-z0-9_]*")
_CJK_RUN = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]+")
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
    """Lower-case content words (>= 3 letters, no stop words, a plural ``s`` dropped) and CJK bigrams."""
    found: set[str] = set()
    for match in _ASCII.finditer(text):
        for part in match.group(0).lower().split("_"):
            if len(part) < 3 or part in STOP_EN or part.isdigit():
                continue
            found.add(part[:-1] if len(part) > 4 and part.endswith("s") and not part.endswith("ss") else part)
    for run in _CJK_RUN.findall(text):
        if len(run) == 1:
            continue
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


def topical(query: str, memory_text: str, similarity: float = 0.0) -> bool:
    """Does a memory speak to the prompt's topic? It must share content words with the prompt: two, or a third
    of a long prompt's (one when the prompt names only one or two, or when its meaning matches at
    ``STRONG_SIMILARITY``), a Chinese bigram counting as a word. A prompt without content words has no topic.

    This is what keeps an unrelated prompt silent: meaning alone (MiniLM cosine) puts "run the checkout tests"
    near "run the DAG tests", and Chinese text near any other Chinese text.
    """
    wanted = content_keywords(query)
    if not wanted:
        return False
    found = wanted & content_keywords(memory_text)
    if len(found) >= (1 if len(wanted) <= 2 else max(2, math.ceil(len(wanted) / 3))):
        return True
    # MiniLM cannot judge Chinese by meaning: its similarity only counts for text without CJK
    return bool(found) and similarity >= STRONG_SIMILARITY and not _CJK_RUN.search(query)


def overlap(new: set[str], context: set[str]) -> float:
    """Share of ``new``'s keywords found in ``context`` (0 when ``new`` is empty)."""
    return len(new & context) / len(new) if new else 0.0


def shared(a: set[str], b: set[str]) -> set[str]:
    """The keywords two texts share."""
    return a & b


def evidence_keywords(trace: TraceView) -> set[str]:
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


def shares_evidence(failed: TraceView, later: TraceView, minimum: int = 2) -> bool:
    """True when a later step is about the same thing as a failed one: they share at least ``minimum`` content
    words (error text, file, command arguments, key terms). A step of another task does not pair with it."""
    return len(evidence_keywords(failed) & evidence_keywords(later)) >= minimum
