"""Attention to feature words (Kovaleva et al. 2019, §4.4): nouns, verbs, pronouns,
subjects, objects and negation words, per head.

Features come from the CoNLL-U annotation of each word:

- `noun`: UPOS NOUN or PROPN; `verb`: UPOS VERB (auxiliaries are AUX, not counted);
  `pronoun`: UPOS PRON.
- `subject`: deprel nsubj with any subtype (nsubj:pass, nsubj:outer); clausal subjects
  (csubj) are left out, their head word being a verb rather than the subject itself.
- `object`: deprel obj or iobj.
- `negation`: the lower-cased form is in :data:`NEGATION_WORDS`.

The score follows the paper: for a sentence, a head and a word w, the attention w receives
is the sum of the word-level attention to w from every word of the sentence (w included),
divided by the number of words, i.e. the mean over query words of A[i, w] (word-level maps:
to a word = sum over its pieces, from a word = mean over its pieces, [CLS]/[SEP] no words).
When a sentence has several words of a feature, the sentence's score is the largest of them;
sentences without the feature are left out; `mean_attention` is the mean over the remaining
sentences. `per_word_attention` is the mean over every feature word instead. The
`uniform_*` columns are the same scores for a head that spreads its attention evenly over all
real tokens ([CLS]/[SEP] included): word w then receives pieces(w) / tokens.

On a decoder word w is seen only by itself and the words after it, so the attention it
receives is the mean of A[i, w] over the words i >= w, and the uniform head spreads each
token's row evenly over the tokens that row sees (the first token included): the reference is
computed through the same word-level pooling (docs/metrics.md#relations-on-decoders).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

FEATURES = ("noun", "verb", "pronoun", "subject", "object", "negation")

# Kovaleva et al. used "17 negation words" without printing the list, and we could not find
# it; this is attnwh's own list of 17 English negation words. UD splits "don't" into "do" +
# "n't", so "n't" stands for every contracted negation.
NEGATION_WORDS = frozenset(
    {
        "no",
        "not",
        "n't",
        "never",
        "none",
        "nobody",
        "nothing",
        "neither",
        "nor",
        "nowhere",
        "cannot",
        "without",
        "hardly",
        "barely",
        "scarcely",
        "seldom",
        "rarely",
    }
)


def feature_words(words: Sequence[str], upos: Sequence[str], relations: Sequence[str]) -> dict[str, list[int]]:
    """Per feature, the indices of the words that carry it (relations without subtype)."""
    found: dict[str, list[int]] = {f: [] for f in FEATURES}
    for i, (form, pos, rel) in enumerate(zip(words, upos, relations)):
        if pos in ("NOUN", "PROPN"):
            found["noun"].append(i)
        if pos == "VERB":
            found["verb"].append(i)
        if pos == "PRON":
            found["pronoun"].append(i)
        if rel == "nsubj":
            found["subject"].append(i)
        if rel in ("obj", "iobj"):
            found["object"].append(i)
        if form.lower() in NEGATION_WORDS or form.lower() in ("n’t",):
            found["negation"].append(i)
    return found


@dataclass
class FeatureCounts:
    """Running sums per feature: sentence scores and word scores per (layer, head)."""

    layers: int
    heads: int
    sentence_sum: dict[str, np.ndarray] = field(default_factory=dict)  # feature -> (layers, heads)
    word_sum: dict[str, np.ndarray] = field(default_factory=dict)
    uniform_sentence_sum: dict[str, float] = field(default_factory=dict)
    uniform_word_sum: dict[str, float] = field(default_factory=dict)
    n_sentences: dict[str, int] = field(default_factory=dict)
    n_words: dict[str, int] = field(default_factory=dict)

    def add(self, found: dict[str, list[int]], received: np.ndarray, uniform: np.ndarray, present: np.ndarray) -> None:
        """One sentence: `received` (layers, heads, W) is the mean over its words of the
        attention each word receives; `uniform` (W,) the same for an even head; words
        without pieces (`present` False) are skipped."""
        for feature, indices in found.items():
            indices = [i for i in indices if present[i]]
            if not indices:
                continue
            if feature not in self.n_sentences:
                self.sentence_sum[feature] = np.zeros((self.layers, self.heads))
                self.word_sum[feature] = np.zeros((self.layers, self.heads))
                self.uniform_sentence_sum[feature] = self.uniform_word_sum[feature] = 0.0
                self.n_sentences[feature] = self.n_words[feature] = 0
            scores = received[:, :, indices]
            self.sentence_sum[feature] += scores.max(-1)
            self.word_sum[feature] += scores.sum(-1)
            self.uniform_sentence_sum[feature] += float(uniform[indices].max())
            self.uniform_word_sum[feature] += float(uniform[indices].sum())
            self.n_sentences[feature] += 1
            self.n_words[feature] += len(indices)

    def mean(self, feature: str) -> np.ndarray:
        """(layers, heads): the paper's score, mean over sentences with the feature."""
        return self.sentence_sum[feature] / self.n_sentences[feature]

    def rows(self) -> dict[str, list]:
        keys = (
            "feature",
            "layer",
            "head",
            "n_sentences",
            "n_words",
            "mean_attention",
            "per_word_attention",
            "uniform_attention",
            "uniform_per_word",
        )
        rows: dict[str, list] = {k: [] for k in keys}
        for feature in (f for f in FEATURES if f in self.n_sentences):
            n_s, n_w = self.n_sentences[feature], self.n_words[feature]
            mean, per_word = self.mean(feature), self.word_sum[feature] / n_w
            for layer in range(self.layers):
                for head in range(self.heads):
                    values = (
                        feature,
                        layer,
                        head,
                        n_s,
                        n_w,
                        float(mean[layer, head]),
                        float(per_word[layer, head]),
                        self.uniform_sentence_sum[feature] / n_s,
                        self.uniform_word_sum[feature] / n_w,
                    )
                    for key, value in zip(keys, values):
                        rows[key].append(value)
        return rows


def received_attention(maps, present, n_tokens, piece_counts, uniform_maps=None):
    """Per sentence of a batch: (B, layers, heads, W) mean over its words of the word-level
    attention each word receives, and (B, W) the same for an even head. Torch in, numpy out.

    `uniform_maps` (B, W, W), a decoder's: word w is seen only by the words i >= w, so it
    receives the mean over those words of A[i, w], and the even head is the causal one of
    `wordlevel.WordBatch.uniform_maps` (each token's row spread over the tokens it sees)."""
    if uniform_maps is None:
        n_words = present.sum(-1).clamp(min=1).float()  # (B,)
        received = maps.sum(-2) / n_words[:, None, None, None]
        uniform = piece_counts / n_tokens[:, None]
        return received.cpu().numpy(), uniform.cpu().numpy()
    # seeing[b, w]: the present words i >= w (w itself included, as on an encoder).
    seeing = present.flip(-1).float().cumsum(-1).flip(-1).clamp(min=1)
    received = maps.sum(-2) / seeing[:, None, None, :]
    uniform = uniform_maps.sum(-2) / seeing
    return received.cpu().numpy(), uniform.cpu().numpy()
