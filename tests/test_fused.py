"""The compiled per-tile reductions give what their eager definitions give."""

from __future__ import annotations

import shutil

import pytest
import torch

from attnwh.ingest.measures import fused


@pytest.fixture
def tile():
    generator = torch.Generator().manual_seed(0)
    scores = torch.randn(2, 3, 37, 300, generator=generator) * 4
    scores[1, :, :, 250:] = -torch.inf  # padding keys: weight exactly 0
    return scores.softmax(-1)


@pytest.mark.skipif(
    not any(shutil.which(c) for c in ("g++", "c++", "clang++")),
    reason="torch.compile needs a C++ compiler on a CPU; without one attnwh stays eager (tested below)",
)
def test_compiled_reductions_match_the_eager_ones(tile, monkeypatch):
    monkeypatch.setattr(fused, "COMPILE_MIN_CELLS", 0)
    monkeypatch.setattr(fused, "COMPILE_MIN_KEYS", 0)
    gram = torch.randn(2, 300, 3, 3)
    gram = gram @ gram.transpose(-1, -2)
    levels = tile.amax((-1, -2))[..., None] * torch.tensor([0.02, 0.05, 0.1, 0.25, 0.5])
    with torch.inference_mode():
        entropy, top = fused.rows(tile)
        counts = fused.counts(tile, levels)
        squares = fused.squares(tile, gram)
    assert not fused._rows.failed and not fused._counts.failed and not fused._squares.failed, "compiling failed"
    assert fused._rows.compiled is not None
    expected_entropy, expected_top = fused.rows_eager(tile)
    torch.testing.assert_close(entropy, expected_entropy, rtol=1e-6, atol=1e-6)
    assert torch.equal(top, expected_top)
    assert torch.equal(counts, fused.counts_eager(tile, levels))
    torch.testing.assert_close(squares, fused.squares_eager(tile, gram), rtol=1e-5, atol=1e-6)
    # The counts mean what they say.
    assert torch.equal(counts[..., 2].long(), (tile > levels[..., 2, None, None]).sum(-1))


def test_a_failed_compile_falls_back_to_eager_with_one_note(tile, monkeypatch, capsys):
    monkeypatch.setattr(fused, "COMPILE_MIN_CELLS", 0)
    monkeypatch.setattr(fused, "COMPILE_MIN_KEYS", 0)
    broken = fused._Compiled(fused.rows_eager)

    def no_compiler(function, **options):
        raise RuntimeError("no C++ compiler found\nmore detail")

    monkeypatch.setattr(torch, "compile", no_compiler)
    monkeypatch.setattr(fused, "_rows", broken)
    entropy, top = fused.rows(tile)
    fused.rows(tile)
    expected_entropy, expected_top = fused.rows_eager(tile)
    assert torch.equal(entropy, expected_entropy) and torch.equal(top, expected_top)
    assert broken.failed
    assert capsys.readouterr().err.splitlines() == [
        "attnwh: note: long-input reductions run uncompiled (no C++ compiler found)"
    ]


def test_compiling_can_be_switched_off(tile, monkeypatch):
    monkeypatch.setattr(fused, "COMPILE_MIN_CELLS", 0)
    monkeypatch.setattr(fused, "COMPILE_MIN_KEYS", 0)
    monkeypatch.setenv("ATTNWH_COMPILE", "0")
    calls = []
    monkeypatch.setattr(fused, "rows_eager", lambda a: calls.append(a) or (a.sum(-1), a.amax(-1)))
    fused.rows(tile)
    assert calls
