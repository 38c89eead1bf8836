"""Where a cosine of one embedding model stands on all-MiniLM-L6-v2's scale, for memmy's cosine thresholds.

Models do not share a cosine scale. MiniLM scores unrelated texts around 0.13 and spreads related ones up to 1;
multilingual-e5-small (trained with a low InfoNCE temperature) scores unrelated texts around 0.81 and almost every
pair between 0.78 and 0.95. The turn-start gates (``minTraceSim`` in the semantic gate, ``STRONG_SIMILARITY`` in the
topic gate) and fusion's zero (``minTraceSim``) are MiniLM cosines, so with e5 every hit passed the gates (an
off-topic prompt got memory injected) and every candidate's semantic evidence was nearly the same.

A :class:`SimilarityScale` maps a model's cosine to the MiniLM cosine that the same share of unrelated text pairs
stays under (quantile matching over one set of sentence pairs, embedded by both models as query against passage):
a gate then lets through the same share of unrelated hits whatever the model. The anchors are measured by
``bench/similarity_scale.py`` over sentences of memmy's own docs (not a set any recall figure is measured on).
Ranking orders by each model's own cosine; fusion scales a cosine from the model's equivalent of ``minTraceSim``
(:meth:`SimilarityScale.from_reference`), so that e5's narrow band still tells candidates apart. Which vector hits
are kept at all stays ``minTraceSim`` as it is: moving that floor dropped e5's true paraphrases (docs/recall.md).

Two stored texts (a trace against a policy, two policies of a world model, a memory against its would-be twin in
Dream, a prompt against the task's earlier requests) have anchors of their own (``between="texts"``): e5 embeds
both sides the same way, and such pairs sit higher on its scale than a query against a passage (its unrelated
median 0.821 against 0.807, its 99.9 % 0.913 against 0.889), while MiniLM, which has no prefixes, gives the same
cosines either way. Without them e5 put "The deploy script lives in scripts/deploy.sh" and "The build script
lives in scripts/build.sh" at 0.976, over Dream's 0.95 for twins.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np

from memmy.embed.factory import LOCAL, MULTILINGUAL_ALIASES

#: The shares of unrelated pairs the anchors are taken at.
ANCHOR_SHARES = (0.5, 0.7, 0.8, 0.9, 0.95, 0.98, 0.99, 0.995, 0.999)
#: all-MiniLM-L6-v2's cosines at those shares (``python bench/similarity_scale.py``).
MINILM_ANCHORS = (0.126, 0.183, 0.221, 0.279, 0.334, 0.4, 0.447, 0.496, 0.612)


@dataclass(frozen=True)
class SimilarityScale:
    """A model's cosines at :data:`ANCHOR_SHARES` of unrelated pairs (``anchors``); None for MiniLM itself."""

    anchors: tuple[float, ...] | None = None

    def to_reference(self, cosine: float) -> float:
        """``cosine`` of this model as the all-MiniLM-L6-v2 cosine at the same share of unrelated pairs (linear
        between anchors, and from the outer anchors to -1 and 1)."""
        if self.anchors is None:
            return cosine
        return float(np.interp(cosine, (-1.0, *self.anchors, 1.0), (-1.0, *MINILM_ANCHORS, 1.0)))

    def from_reference(self, reference: float) -> float:
        """The cosine of this model at the share of unrelated pairs where all-MiniLM-L6-v2 scores ``reference``
        (the inverse of :meth:`to_reference`): a MiniLM threshold such as ``minTraceSim`` on this model's scale."""
        if self.anchors is None:
            return reference
        return float(np.interp(reference, (-1.0, *MINILM_ANCHORS, 1.0), (-1.0, *self.anchors, 1.0)))


#: multilingual-e5-small's anchors, query against passage (``python bench/similarity_scale.py``, with
#: ``memmy[multilingual]``).
E5_SCALE = SimilarityScale((0.807, 0.819, 0.827, 0.837, 0.845, 0.855, 0.863, 0.87, 0.89))
#: multilingual-e5-small's anchors between two texts embedded alike (passage against passage; query against
#: query lies within 0.008 of them), from the same run.
E5_TEXTS_SCALE = SimilarityScale((0.821, 0.835, 0.843, 0.855, 0.864, 0.876, 0.884, 0.893, 0.913))

#: Which cosines a scale is for: a query against stored passages (recall), or two texts embedded alike.
Between = Literal["query-passage", "texts"]


def similarity_scale(provider: str, model: str | None, between: Between = "query-passage") -> SimilarityScale:
    """The scale of the embedding model ``provider``/``model`` for cosines ``between`` a query and a passage or
    two texts: e5's for the local multilingual model; MiniLM's own (the identity) for MiniLM and for a remote
    model, whose scale is not measured (its thresholds are MiniLM's)."""
    if (provider or "").strip().lower() == LOCAL and (model or "").strip() in MULTILINGUAL_ALIASES:
        return E5_SCALE if between == "query-passage" else E5_TEXTS_SCALE
    return SimilarityScale()
