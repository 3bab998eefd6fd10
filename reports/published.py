"""The published numbers the results pages (`attnwh report results`) set beside the
warehouse's: each with the paper and the table or figure it comes from."""

from __future__ import annotations

# Kovaleva et al. (2019), "Revealing the Dark Secrets of BERT", arXiv:1908.08593:
# bert-base-uncased fine-tuned on the full train sets, GLUE dev, in points (×100). Table 1:
# (pre-trained without fine-tuning, fine-tuned from random weights, fine-tuned from the
# pre-trained weights); MRPC gives F1 and accuracy, STS-B one number (its metric not named).
KOVALEVA_TABLE1: dict[str, dict[str, tuple[float, float, float]]] = {
    "mrpc": {"f1": (0.0, 81.2, 87.9), "accuracy": (31.6, 68.3, 82.3)},
    "stsb": {"score": (33.1, 2.9, 82.7)},
    "sst2": {"accuracy": (49.1, 80.5, 92.0)},
    "rte": {"accuracy": (52.7, 52.7, 64.6)},
}
# Table 1: the fine-tuned minus the pre-trained (untrained head) score, in points, the mean
# over the paper's seven tasks.
KOVALEVA_MEAN_GAIN = 35.9
# Fig. 2: the range of each pattern type's share over the fine-tuned models of the seven
# tasks, in %.
KOVALEVA_PATTERN_SHARES: dict[str, tuple[int, int]] = {
    "vertical": (22, 42),
    "diagonal": (4, 7),
    "vertical+diagonal": (7, 23),
    "block": (3, 6),
    "heterogeneous": (32, 61),
}
# §4.2: the two heads whose mean max attention on frame links exceeded the 99th percentile.
KOVALEVA_FRAME_HEADS = (0.201, 0.209)
# §3: dev examples per task in the analyses, and the fine-tuning epochs.
KOVALEVA_EXAMPLES = 1_000
KOVALEVA_EPOCHS = 3
# Examples in the full GLUE train sets (Wang et al. 2019, arXiv:1804.07461), Kovaleva et al.'s
# seven tasks: the cost of the paper's setting at a measured rate.
GLUE_TRAIN: dict[str, int] = {
    "sst2": 67_349,
    "mrpc": 3_668,
    "rte": 2_490,
    "stsb": 5_749,
    "qnli": 104_743,
    "qqp": 363_846,
    "mnli": 392_702,
}
# Gu et al. (2025), "When Attention Sink Emerges in Language Models", arXiv:2410.10781: a head
# is a sink head when its mean attention to a token kind exceeds ε (the report's default too).
GU_SINK_EPS = 0.3
# Wu et al. (2025), "Retrieval Head Mechanistically Explains Long-Context Factuality",
# arXiv:2404.15574: fewer than 5 % of a model's heads are retrieval heads, in every model read.
WU_RETRIEVAL_SHARE = 0.05
# Gu et al. (2025), §3/Fig. 2: the share of sink heads (ε = 0.3, 64-token inputs) on models
# from GPT-2 XL to Llama-3-8B; sinks are already in Pythia-14M.
GU_SINK_SHARES = (0.70, 0.91)
# Xiao et al. (2024), "DuoAttention: Efficient Long-Context LLM Inference with Retrieval and
# Streaming Heads", arXiv:2410.10819: decoding memory reduced by up to 2.55× for multi-head
# and 1.67× for grouped-query attention models.
DUO_GQA_MEMORY = 1.67
