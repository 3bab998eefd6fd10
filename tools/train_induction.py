"""Train, on the CPU in a few minutes, a two-layer attention-only decoder in which an
induction circuit forms (Olsson et al. 2022), check independently that it did, and save it
as a small model folder with a word-level tokenizer and a ``known_answer.json`` naming the
heads: a model where the answer to "which head does induction, and which previous-token
head feeds it" is known, for end-to-end checks of attnwh's head-role scores and ablations.

The model is a GPT-2 (``--family gpt2``, the default: learned absolute positions,
pre-LayerNorm) or a Llama (``--family llama``: RoPE, RMSNorm) of 2 layers × 2 heads (``--heads``), width
64, with an untied unembedding. With 4 heads per layer the copying is shared between
three (GPT-2) or four (Llama) layer-1 induction heads, so no single one is needed (disabling the best raised the
repeat's loss by 0.71 nats in the GPT-2, 0.05 in the Llama); with 2, each matters. It is attention-only exactly: each block's MLP output
projection (GPT-2's ``mlp.c_proj``, weight and bias; Llama's ``mlp.down_proj``, which has no
bias) is zero and frozen, so the MLP adds exactly 0 to the residual stream; the rest of the
MLP is frozen too (its gradient is 0 anyway). The tokenizer is a ``tokenizers`` WordLevel model over the words
``t0`` … ``t99`` (ids 4 … 103) after ``<pad>``, ``<unk>``, ``<bos>`` and ``<eos>`` (0 … 3),
split on whitespace, with ``<bos>`` put first: ``"t5 t17 t5"`` → ``[2, 9, 21, 9]``.

Training data (seeded), in-context bigrams (Bietti et al. 2023, "Birth of a Transformer: a
memory viewpoint"): each sequence is ``<bos>`` then 64 words. Per sequence, 3 to 8 trigger
words are drawn, each with its own output word (a non-trigger); wherever a trigger occurs,
the next word is its output; any other word is a trigger with probability 0.3 and otherwise
a uniform non-trigger word, so each trigger occurs a few times. The words before each
occurrence are random, so matching on several earlier words is useless (data that copied
spans of consecutive words taught the model exactly that: lagged heads, no previous-token
head; tools/README.md), and a trigger's output after its second occurrence is known only
from the word that followed its first: a layer-0 previous-token head (each output learns
"my previous word was T") feeding a layer-1 induction head (the query T finds the keys
whose previous word was T and copies their word). The loss is the next-token cross-entropy
on every position, a trigger's output weighted 10 times (``--output-weight``; with weight 1
nothing formed in 2000 steps: the predictable words are too few); AdamW, peak learning
rate 3e-3 with a cosine schedule, batches of 64, one CPU thread.

Verification (plain torch on the saved folder, reloaded with eager attention and
``output_attentions=True``), on the induction probe of the warehouse's design (§12):
``<bos>``, m = 20 distinct random words t_1..t_m, then the same m again; 64 such inputs.
Per head: previous-token score, the mean of A[i, i−1] over rows i ≥ 1; induction score, the
mean of A[m+k, k+1] over k = 1..m; duplicate-token score, the mean of A[m+k, k]. Loss of the
first half (targets at positions 1..m) and of the repeat (targets at m+2..2m; position m+1
follows t_m, which nothing predicts). Disabling a head zeroes its slice of the input of its
layer's attention output projection (``attn.c_proj``, ``self_attn.o_proj``), so it adds nothing to the residual.
The script exits with status 1 and one line saying why unless: the best induction head is in
layer 1 with a score above 0.5 and no layer-0 head scores above 0.3 on induction (no
fixed-offset shortcut); the best layer-0 previous-token head scores above 0.5; the repeat's
loss is below 1 nat while the first half's stays above 3.5 (ln 100 = 4.61); disabling the
induction head raises the repeat's loss by more than 1 nat and moves the first half's by
less than 0.2; disabling the previous-token head raises the repeat's loss by more than 1 nat
(the induction head's keys are composed from it: K-composition).

The model is written to a temporary folder beside ``--out`` and moved there only once it
passes, so a failed run leaves nothing behind.

Usage: ``python tools/train_induction.py [--out tests/fixtures/induction-2l] [--steps N]
[--family gpt2|llama] [--heads N] [--learning-rate LR] [--output-weight W]``.

Measured (the defaults: GPT-2, 2 × 2 heads, 2000 steps; the committed
tests/fixtures/induction-2l; two runs gave byte-identical weights): layer-0 head 0 is the
previous-token head (previous-token score 0.639; head 1: 0.382), layer-1 head 0 the
induction head (induction score 0.968; layer-1 head 1 is one too, 0.959; layer-0 heads
≤ 0.004); probe loss 4.613 nats on the first half, 0.180 on the repeat; disabling the
induction head: first half +0.025, repeat +1.077; disabling the previous-token head: first
half +0.044, repeat +3.120. Training took 94 s on one thread of a shared CPU (191 s with
another run beside it). Every configuration tried: tools/README.md.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import torch
from tokenizers import Tokenizer, models, pre_tokenizers, processors
from torch.nn import functional as F
from transformers import (
    AutoModelForCausalLM,
    GPT2Config,
    LlamaConfig,
    PreTrainedModel,
    PreTrainedTokenizerFast,
)

SPECIALS = ("<pad>", "<unk>", "<bos>", "<eos>")
WORDS = 100  # t0 .. t99
LAYERS, HEADS, WIDTH, POSITIONS = 2, 2, 64, 128
SEQUENCE = 64  # random words after <bos> in a training sequence
# Triggers per sequence (inclusive range), and the chance that a word not forced to be an
# output is a trigger.
TRIGGERS, TRIGGER_RATE = (3, 8), 0.3
# The loss weighs a trigger's output (the only predictable words) this much more than others.
OUTPUT_WEIGHT = 10.0
PROBE_LENGTH, PROBE_EXAMPLES, PROBE_SEED = 20, 64, 1234
TRAIN_SEED, BATCH, STEPS, LEARNING_RATE = 0, 64, 2000, 3e-3
DEFAULT_OUT = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "induction-2l"


# ---------------------------------------------------------------- tokenizer and model


def make_tokenizer() -> PreTrainedTokenizerFast:
    """WordLevel over the specials and t0..t99, whitespace-split, <bos> first."""
    vocab = {token: i for i, token in enumerate([*SPECIALS, *(f"t{i}" for i in range(WORDS))])}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.post_processor = processors.TemplateProcessing(
        single="<bos> $A", pair="<bos> $A $B", special_tokens=[("<bos>", vocab["<bos>"])]
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token="<bos>",
        eos_token="<eos>",
        unk_token="<unk>",
        pad_token="<pad>",
        model_max_length=POSITIONS,
        model_input_names=["input_ids", "attention_mask"],
    )


def make_model(family: str = "gpt2", heads: int = HEADS) -> PreTrainedModel:
    """A seeded causal LM of 2 layers × `heads` heads whose MLPs add exactly nothing (output projection
    zero and frozen), without dropout, with eager attention (for output_attentions)."""
    special = {"pad_token_id": 0, "bos_token_id": 2, "eos_token_id": 3, "tie_word_embeddings": False}
    config: GPT2Config | LlamaConfig
    if family == "gpt2":
        config = GPT2Config(
            vocab_size=len(SPECIALS) + WORDS,
            n_positions=POSITIONS,
            n_embd=WIDTH,
            n_layer=LAYERS,
            n_head=heads,
            n_inner=4,  # unused width: the MLP's output is zero whatever its input projection
            resid_pdrop=0.0,
            embd_pdrop=0.0,
            attn_pdrop=0.0,
            architectures=["PreTrainedModel"],
            **special,
        )
    else:
        config = LlamaConfig(
            vocab_size=len(SPECIALS) + WORDS,
            max_position_embeddings=POSITIONS,
            hidden_size=WIDTH,
            intermediate_size=4,
            num_hidden_layers=LAYERS,
            num_attention_heads=heads,
            num_key_value_heads=heads,
            architectures=["LlamaForCausalLM"],
            **special,
        )
    torch.manual_seed(TRAIN_SEED)
    model = AutoModelForCausalLM.from_config(config, attn_implementation="eager")
    with torch.no_grad():
        for block in blocks(model):
            out = block.mlp.c_proj if family == "gpt2" else block.mlp.down_proj
            for param in out.parameters():
                param.zero_()
            for param in block.mlp.parameters():
                param.requires_grad_(False)
    return model


def blocks(model: PreTrainedModel) -> list[torch.nn.Module]:
    base = model.base_model
    return list(base.h if model.config.model_type == "gpt2" else base.layers)


def output_projection(model: PreTrainedModel, layer: int) -> torch.nn.Module:
    """W_O of `layer`: its input holds the heads side by side."""
    block = blocks(model)[layer]
    return block.attn.c_proj if model.config.model_type == "gpt2" else block.self_attn.o_proj


# ---------------------------------------------------------------- data


def training_batch(generator: random.Random) -> tuple[torch.Tensor, torch.Tensor]:
    """(BATCH, 1 + SEQUENCE) ids of in-context bigrams: per sequence, a few trigger words,
    each with its own output word; the rest random. Wherever a trigger occurs, the next
    word is its output; otherwise a trigger with probability TRIGGER_RATE, else a uniform
    non-trigger word. The words before each occurrence are random, so only the current
    word says what comes next: after a trigger's second occurrence its output is known
    from the word that followed its first, which a previous-token head feeding an
    induction head predicts and a match on several earlier words does not. Also returns
    (BATCH, SEQUENCE) booleans: which targets (positions 1..) are a trigger's output."""
    rows, outputs = [], []
    for _ in range(BATCH):
        count = generator.randint(*TRIGGERS)
        vocabulary = list(range(WORDS))
        generator.shuffle(vocabulary)
        triggers, others = vocabulary[:count], vocabulary[count:]
        output = {t: generator.choice(others) for t in triggers}
        row: list[int] = []
        while len(row) < SEQUENCE:
            if row and row[-1] in output:
                row.append(output[row[-1]])
            elif generator.random() < TRIGGER_RATE:
                row.append(generator.choice(triggers))
            else:
                row.append(generator.choice(others))
        rows.append([SPECIALS.index("<bos>"), *(w + len(SPECIALS) for w in row)])
        outputs.append([False, *(w in output for w in row[:-1])])
    return torch.tensor(rows), torch.tensor(outputs)


def probe_inputs(length: int = PROBE_LENGTH, examples: int = PROBE_EXAMPLES, seed: int = PROBE_SEED) -> torch.Tensor:
    """(examples, 1 + 2 * length) ids: <bos>, `length` distinct random words, the same again."""
    generator = torch.Generator().manual_seed(seed)
    rows = []
    for _ in range(examples):
        half = torch.randperm(WORDS, generator=generator)[:length] + len(SPECIALS)
        rows.append(torch.cat([torch.tensor([SPECIALS.index("<bos>")]), half, half]))
    return torch.stack(rows)


# ---------------------------------------------------------------- training


def train(
    model: PreTrainedModel, steps: int, learning_rate: float = LEARNING_RATE, output_weight: float = OUTPUT_WEIGHT
) -> float:
    """Train in place; return the seconds it took."""
    generator = random.Random(TRAIN_SEED)
    trainable = [p for p in model.parameters() if p.requires_grad]
    optimiser = torch.optim.AdamW(trainable, lr=learning_rate, weight_decay=0.01)
    warmup = 100
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimiser,
        lambda s: min(1.0, (s + 1) / warmup) * 0.5 * (1 + math.cos(math.pi * min(1.0, s / steps))),
    )
    probe = probe_inputs()
    started = time.perf_counter()
    model.train()
    for step in range(1, steps + 1):
        ids, outputs = training_batch(generator)
        each = F.cross_entropy(model(input_ids=ids).logits[:, :-1].transpose(1, 2), ids[:, 1:], reduction="none")
        weights = 1 + (output_weight - 1) * outputs.float()
        loss = (each * weights).sum() / weights.sum()
        optimiser.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(trainable, 1.0)
        optimiser.step()
        schedule.step()
        if step % 250 == 0 or step == steps:
            model.eval()
            first, repeat = half_losses(model, probe)
            model.train()
            print(
                f"step {step:5d}  train loss {loss.item():.3f}  probe: first half {first:.3f}, repeat {repeat:.3f}"
                f"  ({time.perf_counter() - started:.0f} s)",
                flush=True,
            )
    model.eval()
    return time.perf_counter() - started


# ---------------------------------------------------------------- verification


def token_losses(model: PreTrainedModel, ids: torch.Tensor) -> torch.Tensor:
    """(examples, positions − 1): cross-entropy of the token at position p + 1 given 0..p."""
    with torch.no_grad():
        logits = model(input_ids=ids).logits
    return F.cross_entropy(logits[:, :-1].transpose(1, 2), ids[:, 1:], reduction="none")


def half_losses(model: PreTrainedModel, ids: torch.Tensor, m: int = PROBE_LENGTH) -> tuple[float, float]:
    """Mean loss on the probe's first half (targets 1..m) and its repeat (targets m+2..2m)."""
    losses = token_losses(model, ids)  # column p: the target at position p + 1
    return losses[:, 0:m].mean().item(), losses[:, m + 1 : 2 * m].mean().item()


def role_scores(model: PreTrainedModel, ids: torch.Tensor, m: int = PROBE_LENGTH) -> dict[str, torch.Tensor]:
    """(layers, heads) previous-token, induction and duplicate-token scores from eager maps."""
    with torch.no_grad():
        maps = torch.stack(model(input_ids=ids, output_attentions=True).attentions)  # (L, B, H, n, n)
    rows = torch.arange(1, 2 * m + 1)
    k = torch.arange(1, m + 1)
    return {
        "previous_token": maps[..., rows, rows - 1].mean(dim=(1, 3)),
        "induction": maps[..., m + k, k + 1].mean(dim=(1, 3)),
        "duplicate": maps[..., m + k, k].mean(dim=(1, 3)),
    }


@contextmanager
def disabled(model: PreTrainedModel, layer: int, head: int) -> Iterator[None]:
    """Head (layer, head) adds nothing: its slice of the input of W_O (attn.c_proj) is zero."""
    size = WIDTH // model.config.num_attention_heads

    def zero(_module: torch.nn.Module, args: tuple[torch.Tensor, ...]) -> tuple[torch.Tensor, ...]:
        merged = args[0].clone()
        merged[..., head * size : (head + 1) * size] = 0
        return (merged, *args[1:])

    handle = output_projection(model, layer).register_forward_pre_hook(zero)
    try:
        yield
    finally:
        handle.remove()


def verify(model: PreTrainedModel) -> tuple[dict, list[str]]:
    """The known answer measured on the probe, and the reasons it is not an induction circuit
    (empty when it is)."""
    ids = probe_inputs()
    scores = role_scores(model, ids)
    induction = scores["induction"]
    layer, head = divmod(int(induction.argmax()), induction.shape[1])
    previous = int(scores["previous_token"][0].argmax())
    first, repeat = half_losses(model, ids)
    changes = {}
    for name, (l, h) in {"induction_head": (layer, head), "previous_token_head": (0, previous)}.items():
        with disabled(model, l, h):
            f, r = half_losses(model, ids)
        changes[name] = {"first_half": round(f - first, 4), "repeat": round(r - repeat, 4)}
    answer = {
        "induction_head": [layer, head],
        "previous_token_head": [0, previous],
        "probe": {
            "half_length": PROBE_LENGTH,
            "examples": PROBE_EXAMPLES,
            "seed": PROBE_SEED,
            "words": "t0..t99 (ids 4..103), distinct within a half, torch.randperm per example",
        },
        "scores": {name: [[round(v, 4) for v in row] for row in s.tolist()] for name, s in scores.items()},
        "loss": {"first_half": round(first, 4), "repeat": round(repeat, 4)},
        "loss_change_when_disabled": changes,
    }
    failures = []
    if layer != 1 or induction[layer, head] <= 0.5:
        failures.append(f"no layer-1 induction head above 0.5 (best: layer {layer} head {head}, {induction.max():.2f})")
    if induction[0].max() > 0.3:
        failures.append(f"a layer-0 head scores {induction[0].max():.2f} on induction: a fixed-offset shortcut")
    if scores["previous_token"][0, previous] <= 0.5:
        failures.append(f"no layer-0 previous-token head above 0.5 (best {scores['previous_token'][0].max():.2f})")
    if repeat >= 1.0 or first <= 3.5:
        failures.append(f"loss on the repeat {repeat:.2f} (needs < 1) against the first half {first:.2f} (needs > 3.5)")
    ind = changes["induction_head"]
    if ind["repeat"] <= 1.0 or abs(ind["first_half"]) >= 0.2:
        failures.append(
            f"disabling the induction head moves the repeat's loss by {ind['repeat']:+.2f}, the first half's by {ind['first_half']:+.2f}"
        )
    if changes["previous_token_head"]["repeat"] <= 1.0:
        failures.append(
            f"disabling the previous-token head moves the repeat's loss only {changes['previous_token_head']['repeat']:+.2f}"
        )
    return answer, failures


def table(answer: dict) -> str:
    """The per-head scores and the losses, as printed and as tools/README.md holds them."""
    lines = ["| head | previous-token | induction | duplicate |", "|---|---|---|---|"]
    for l in range(LAYERS):
        for h in range(len(answer["scores"]["induction"][l])):
            cells = [answer["scores"][s][l][h] for s in ("previous_token", "induction", "duplicate")]
            marks = " (induction)" if [l, h] == answer["induction_head"] else ""
            marks += " (previous-token)" if [l, h] == answer["previous_token_head"] else ""
            lines.append(f"| L{l}H{h}{marks} | " + " | ".join(f"{c:.3f}" for c in cells) + " |")
    loss = answer["loss"]
    lines.append("")
    lines.append(f"loss (nats): first half {loss['first_half']:.3f}, repeat {loss['repeat']:.3f}")
    for name, change in answer["loss_change_when_disabled"].items():
        lines.append(f"{name} disabled: first half {change['first_half']:+.3f}, repeat {change['repeat']:+.3f}")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(
        description="Train a two-layer attention-only decoder on in-context bigrams and check that an induction circuit formed."
    )
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="model folder to write")
    parser.add_argument("--steps", type=int, default=STEPS, help=f"training steps (default {STEPS})")
    parser.add_argument(
        "--family", choices=("gpt2", "llama"), default="gpt2", help="gpt2: learned positions; llama: RoPE"
    )
    parser.add_argument(
        "--learning-rate", type=float, default=LEARNING_RATE, help=f"peak learning rate (default {LEARNING_RATE})"
    )
    parser.add_argument(
        "--output-weight",
        type=float,
        default=OUTPUT_WEIGHT,
        help=f"loss weight of a trigger's output against other words' 1 (default {OUTPUT_WEIGHT})",
    )
    parser.add_argument("--heads", type=int, default=HEADS, help=f"heads per layer (default {HEADS})")
    args = parser.parse_args()
    torch.use_deterministic_algorithms(True)
    # One thread: the same reduction order, so the same weights, on any machine; and on a
    # shared CPU, tiny matrices run several times faster on one thread than on two.
    torch.set_num_threads(1)
    model = make_model(args.family, args.heads)
    seconds = train(model, args.steps, args.learning_rate, args.output_weight)
    # Write and verify in a temporary folder beside --out; only a verified model replaces it.
    args.out.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{args.out.name}-", dir=args.out.parent))
    staging.chmod(0o755)  # mkdtemp makes it private; the model folder is for everyone to read
    try:
        model.save_pretrained(staging)
        make_tokenizer().save_pretrained(staging)
        # Verify what was saved, reloaded, not the object in memory.
        saved = AutoModelForCausalLM.from_pretrained(staging, attn_implementation="eager").eval()
        answer, failures = verify(saved)
        answer["training"] = {
            "family": args.family,
            "steps": args.steps,
            "learning_rate": args.learning_rate,
            "output_weight": args.output_weight,
        }
        (staging / "known_answer.json").write_text(json.dumps(answer, indent=2) + "\n", encoding="utf-8")
        print(table(answer))
        print(f"trained {args.steps} steps in {seconds:.1f} s")
        if failures:
            print("no induction circuit, nothing saved: " + "; ".join(failures), file=sys.stderr)
            sys.exit(1)
        if args.out.exists():
            shutil.rmtree(args.out)
        staging.rename(args.out)
        print(f"saved to {args.out}")
    finally:
        shutil.rmtree(staging, ignore_errors=True)


if __name__ == "__main__":
    main()
