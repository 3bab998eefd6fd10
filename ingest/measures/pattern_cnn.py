"""A small CNN that classifies 32 × 32 attention-map thumbnails, as Kovaleva et al. did.

The paper trained a CNN on ~400 hand-labelled maps; attnwh's CNN is trained the same way on
thumbnails (`pattern_thumbnails`) with imported labels (`pattern_labels`), seeded, with a
held-out split, and its held-out macro F1 is stored beside that of the rules on the same
maps, so the two classifiers can be compared on the labeller's terms.

Input: a thumbnail scaled so that its largest cell is 1 (maps of different lengths have
different cell means; the structure is what counts). Three 3 × 3 convolutions with pooling
to a 4 × 4 grid keep the coarse position of a stripe ([CLS] is the left column, [SEP] the
right one) as well as its shape.
"""

from __future__ import annotations

import io
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from attnwh.ingest.measures.patterns import PATTERN_TYPES, THUMBNAIL_SIZE


def make_model() -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(1, 8, 3, padding=1),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(8, 16, 3, padding=1),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(16, 16, 3, padding=1),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(4),
        nn.Flatten(),
        nn.Linear(16 * 16, 32),
        nn.ReLU(),
        nn.Linear(32, len(PATTERN_TYPES)),
    )


def prepare(thumbnails: np.ndarray) -> torch.Tensor:
    """(N, 1, 32, 32) network input from (N, 1024) thumbnails."""
    x = torch.as_tensor(np.asarray(thumbnails, dtype=np.float32)).view(-1, 1, THUMBNAIL_SIZE, THUMBNAIL_SIZE)
    return x / x.amax(dim=(2, 3), keepdim=True).clamp_min(1e-12)


def macro_f1(y_true: np.ndarray, y_pred: np.ndarray) -> float:
    """Macro-averaged F1 over the classes that occur in `y_true` or `y_pred` (the default of
    sklearn.metrics.f1_score(average="macro"); a class with no true or predicted positive
    has F1 0)."""
    y_true, y_pred = np.asarray(y_true), np.asarray(y_pred)
    classes = np.union1d(y_true, y_pred)
    if not len(classes):
        return 0.0
    scores = []
    for c in classes:
        tp = np.sum((y_true == c) & (y_pred == c))
        fp = np.sum((y_true != c) & (y_pred == c))
        fn = np.sum((y_true == c) & (y_pred != c))
        scores.append(2 * tp / (2 * tp + fp + fn) if tp else 0.0)
    return float(np.mean(scores))


def split(labels: np.ndarray, test_share: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Seeded train/test indices, stratified: each type keeps about `test_share` of its maps
    in the test set (at least one where it has two or more)."""
    rng = np.random.default_rng(seed)
    train: list[int] = []
    test: list[int] = []
    for c in np.unique(labels):
        idx = rng.permutation(np.flatnonzero(labels == c))
        k = int(round(len(idx) * test_share))
        k = max(k, 1) if len(idx) >= 2 else 0
        test.extend(idx[:k])
        train.extend(idx[k:])
    return np.sort(np.array(train, dtype=np.int64)), np.sort(np.array(test, dtype=np.int64))


@dataclass(frozen=True)
class Trained:
    model: nn.Module
    train: np.ndarray  # indices
    test: np.ndarray
    f1_cnn: float  # held-out macro F1 against the labels
    predictions: np.ndarray  # held-out predictions


def train(
    thumbnails: np.ndarray,
    labels: np.ndarray,
    seed: int = 42,
    epochs: int = 60,
    test_share: float = 0.25,
    learning_rate: float = 3e-3,
    batch_size: int = 64,
) -> Trained:
    """Fit the CNN on a seeded stratified split; CPU or GPU, the same result per seed on one device."""
    train_idx, test_idx = split(labels, test_share, seed)
    model = fit(thumbnails, labels, train_idx, seed, epochs, learning_rate, batch_size)
    predictions = predict(model, thumbnails[test_idx]) if len(test_idx) else np.zeros(0, np.int64)
    return Trained(model, train_idx, test_idx, macro_f1(labels[test_idx], predictions), predictions)


def fit(
    thumbnails: np.ndarray,
    labels: np.ndarray,
    train_idx: np.ndarray,
    seed: int = 42,
    epochs: int = 60,
    learning_rate: float = 3e-3,
    batch_size: int = 64,
) -> nn.Module:
    """The CNN fitted on the maps `train_idx` (seeded initialisation and batch order), in
    eval mode on the CPU."""
    torch.manual_seed(seed)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    x = prepare(thumbnails).to(device)
    y = torch.as_tensor(labels, dtype=torch.long, device=device)
    model = make_model().to(device)
    optimiser = torch.optim.Adam(model.parameters(), lr=learning_rate)
    generator = torch.Generator().manual_seed(seed)
    model.train()
    for _ in range(epochs):
        order = torch.from_numpy(train_idx)[torch.randperm(len(train_idx), generator=generator)]
        for start in range(0, len(order), batch_size):
            b = order[start : start + batch_size].to(device)
            loss = nn.functional.cross_entropy(model(x[b]), y[b])
            optimiser.zero_grad()
            loss.backward()
            optimiser.step()
    return model.eval().cpu()


@torch.inference_mode()
def predict(model: nn.Module, thumbnails: np.ndarray, batch_size: int = 4096) -> np.ndarray:
    """Pattern codes of (N, 1024) thumbnails."""
    out = [model(prepare(thumbnails[s : s + batch_size])).argmax(-1) for s in range(0, len(thumbnails), batch_size)]
    return torch.cat(out).numpy() if out else np.zeros(0, np.int64)


def to_bytes(model: nn.Module) -> bytes:
    buffer = io.BytesIO()
    torch.save(model.state_dict(), buffer)
    return buffer.getvalue()


def from_bytes(data: bytes) -> nn.Module:
    model = make_model()
    model.load_state_dict(torch.load(io.BytesIO(data), weights_only=True))
    return model.eval()
