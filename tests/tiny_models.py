"""Tiny random-weight encoders and decoders of each supported family, saved as model directories.

Each family gets its own tokenizer trained in milliseconds on a few sentences, with the
family's own special tokens (RoBERTa's <s>/</s>, ALBERT's metaspace pieces), so tests catch
any code that assumes BERT's ids.
"""

from __future__ import annotations

import inspect
import json
from pathlib import Path
from typing import Any

import torch
from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers
from transformers import (
    AlbertConfig,
    AutoModel,
    AutoModelForSequenceClassification,
    AutoTokenizer,
    BertConfig,
    BloomConfig,
    DebertaV2Config,
    DebertaV2Tokenizer,
    DistilBertConfig,
    ElectraConfig,
    Gemma2Config,
    Gemma3TextConfig,
    GPT2Config,
    LlamaConfig,
    MistralConfig,
    ModernBertConfig,
    MPNetConfig,
    MPNetTokenizer,
    Olmo2Config,
    Phi3Config,
    PreTrainedTokenizerFast,
    Qwen2Config,
    Qwen3Config,
    RobertaConfig,
)

CORPUS = [
    "The quick brown fox jumps over the lazy dog.",
    "A film, a book, and a song: which one did you like?",
    "Nobody expected the small robot to win the race!",
    "She said that the weather would turn cold, but it stayed warm.",
    "Two people walk along the river; the dog follows them.",
    "Is this the station where the night train stops?",
    "Cheap tickets (only five dollars) sold out in minutes.",
    "The museum opened a new wing for modern painting.",
] * 4

FAMILIES = ("bert", "roberta", "distilbert", "electra", "albert", "modernbert", "deberta-v2", "mpnet")


# The WordPiece pieces of the corpus, as `trainers.WordPieceTrainer(vocab_size=200)` learned them
# once (the special tokens go first). Stored rather than learned at each call: the trainer breaks
# ties between equally frequent pieces differently from run to run, so the vocabulary, and with
# it every tiny model's token ids and outputs, would change between test runs.
_PIECES = Path(__file__).parent / "fixtures" / "wordpiece_pieces.txt"


# Likewise the Unigram pieces and scores of the tiny ALBERT and DeBERTa tokenizers (the trainer
# gives the same pieces each time, but in another order and with scores that differ by up to 1e-4).
_UNIGRAMS = Path(__file__).parent / "fixtures" / "unigram_pieces.json"


def _unigram_vocab(family: str) -> list[tuple[str, float]]:
    return [(piece, score) for piece, score in json.loads(_UNIGRAMS.read_text(encoding="utf-8"))[family]]


def _wordpiece_vocab(specials: list[str]) -> dict[str, int]:
    pieces = [*specials, *_PIECES.read_text(encoding="utf-8").split()]
    return {piece: i for i, piece in enumerate(pieces)}


def _bert_tokenizer() -> PreTrainedTokenizerFast:
    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    tok = Tokenizer(models.WordPiece(_wordpiece_vocab(specials), unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    cls, sep = tok.token_to_id("[CLS]"), tok.token_to_id("[SEP]")
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1", special_tokens=[("[CLS]", cls), ("[SEP]", sep)]
    )
    tok.decoder = decoders.WordPiece()
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        unk_token="[UNK]",
        pad_token="[PAD]",
        cls_token="[CLS]",
        sep_token="[SEP]",
        mask_token="[MASK]",
        model_max_length=64,
        model_input_names=["input_ids", "token_type_ids", "attention_mask"],
    )


def _roberta_tokenizer() -> PreTrainedTokenizerFast:
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    specials = ["<s>", "<pad>", "</s>", "<unk>", "<mask>"]
    tok.train_from_iterator(
        CORPUS,
        trainers.BpeTrainer(
            vocab_size=400, special_tokens=specials, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
        ),
    )
    tok.post_processor = processors.RobertaProcessing(
        ("</s>", tok.token_to_id("</s>")), ("<s>", tok.token_to_id("<s>"))
    )
    tok.decoder = decoders.ByteLevel()
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token="<s>",
        eos_token="</s>",
        cls_token="<s>",
        sep_token="</s>",
        pad_token="<pad>",
        unk_token="<unk>",
        mask_token="<mask>",
        model_max_length=60,
    )


def _albert_tokenizer() -> PreTrainedTokenizerFast:
    vocab = _unigram_vocab("albert")  # <pad>, <unk>, [CLS], [SEP], [MASK], then the pieces
    tok = Tokenizer(models.Unigram(vocab, unk_id=1))
    tok.normalizer = normalizers.Lowercase()
    tok.pre_tokenizer = pre_tokenizers.Metaspace()
    cls, sep = tok.token_to_id("[CLS]"), tok.token_to_id("[SEP]")
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1", special_tokens=[("[CLS]", cls), ("[SEP]", sep)]
    )
    tok.decoder = decoders.Metaspace()
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        unk_token="<unk>",
        pad_token="<pad>",
        cls_token="[CLS]",
        sep_token="[SEP]",
        mask_token="[MASK]",
        model_max_length=64,
        model_input_names=["input_ids", "token_type_ids", "attention_mask"],
    )


def _modernbert_tokenizer() -> PreTrainedTokenizerFast:
    """Byte-level BPE like ModernBERT's, its special tokens after the learned pieces (the real
    ones sit at 50280-50284); [CLS] A [SEP] B [SEP], no token type ids."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=420, initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(CORPUS, trainer)
    tok.add_special_tokens(["[UNK]", "[CLS]", "[SEP]", "[PAD]", "[MASK]"])
    cls, sep = tok.token_to_id("[CLS]"), tok.token_to_id("[SEP]")
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS]:0 $A:0 [SEP]:0",
        pair="[CLS]:0 $A:0 [SEP]:0 $B:1 [SEP]:1",
        special_tokens=[("[CLS]", cls), ("[SEP]", sep)],
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        unk_token="[UNK]",
        cls_token="[CLS]",
        sep_token="[SEP]",
        pad_token="[PAD]",
        mask_token="[MASK]",
        model_max_length=64,
        model_input_names=["input_ids", "attention_mask"],
    )


def _deberta_tokenizer() -> DebertaV2Tokenizer:
    """A Unigram (SentencePiece-style, ▁) tokenizer with DeBERTa-v3's ids: [PAD] 0, [CLS] 1,
    [SEP] 2, [UNK] 3."""
    # Learned by the Unigram trainer (NFC, Metaspace ▁ prepended) with those special tokens first.
    return DebertaV2Tokenizer(vocab=_unigram_vocab("deberta-v2"), do_lower_case=False, model_max_length=64)


def _mpnet_tokenizer() -> MPNetTokenizer:
    """WordPiece in MPNet's layout: <s> A </s></s> B </s>; <pad> is id 1 (MPNet's position
    ids count from it)."""
    specials = ["<s>", "<pad>", "</s>", "[UNK]", "<mask>"]
    return MPNetTokenizer(vocab=_wordpiece_vocab(specials), do_lower_case=True, model_max_length=62)


TOKENIZERS = {
    "roberta": _roberta_tokenizer,
    "albert": _albert_tokenizer,
    "modernbert": _modernbert_tokenizer,
    "deberta-v2": _deberta_tokenizer,
    "mpnet": _mpnet_tokenizer,
}
# Scaled up so the random maps are peaked and the statistics differ clearly between heads.
QUERY_KEY = ("query.weight", "key.weight", "q_lin.weight", "k_lin.weight", "Wqkv.weight", "query_proj.weight")
QUERY_KEY += ("key_proj.weight", "attn.q.weight", "attn.k.weight")


def make_tiny(
    family: str,
    out: Path,
    classifier: bool = False,
    layers: int = 2,
    heads: int = 4,
    seed: int = 0,
    positions: int = 64,
) -> Path:
    """Save a seeded random-weight model of `family` with its tokenizer into `out`;
    `positions`: the longest input it takes (tokens)."""
    tokenizer = TOKENIZERS.get(family, _bert_tokenizer)()
    if positions != 64:
        tokenizer.model_max_length = positions - 2
    vocab = len(tokenizer)
    common = dict(vocab_size=vocab, pad_token_id=tokenizer.pad_token_id)
    if family == "bert":
        config = BertConfig(
            hidden_size=32,
            num_hidden_layers=layers,
            num_attention_heads=heads,
            intermediate_size=37,
            max_position_embeddings=positions,
            **common,
        )
    elif family == "electra":
        config = ElectraConfig(
            embedding_size=24,
            hidden_size=32,
            num_hidden_layers=layers,
            num_attention_heads=heads,
            intermediate_size=37,
            max_position_embeddings=positions,
            **common,
        )
    elif family == "roberta":
        config = RobertaConfig(
            hidden_size=32,
            num_hidden_layers=layers,
            num_attention_heads=heads,
            intermediate_size=37,
            max_position_embeddings=positions,
            type_vocab_size=1,
            bos_token_id=tokenizer.cls_token_id,
            eos_token_id=tokenizer.sep_token_id,
            **common,
        )
    elif family == "distilbert":
        config = DistilBertConfig(
            dim=32, n_layers=layers, n_heads=heads, hidden_dim=37, max_position_embeddings=positions, **common
        )
    elif family == "albert":
        config = AlbertConfig(
            embedding_size=16,
            hidden_size=32,
            num_hidden_layers=layers,
            num_attention_heads=heads,
            intermediate_size=37,
            max_position_embeddings=positions,
            **common,
        )
    elif family == "modernbert":
        config = ModernBertConfig(
            hidden_size=32,
            num_hidden_layers=layers,
            num_attention_heads=heads,
            intermediate_size=37,
            max_position_embeddings=positions,
            local_attention=4,  # local layers see |i - j| <= 2
            global_attn_every_n_layers=2,  # layers 0, 2, … global; 1, 3, … local
            cls_token_id=tokenizer.cls_token_id,
            sep_token_id=tokenizer.sep_token_id,
            bos_token_id=tokenizer.cls_token_id,
            eos_token_id=tokenizer.sep_token_id,
            **common,
        )
    elif family == "deberta-v2":  # DeBERTa-v3 style: relative attention, shared keys, log buckets
        config = DebertaV2Config(
            hidden_size=32,
            num_hidden_layers=layers,
            num_attention_heads=heads,
            intermediate_size=37,
            max_position_embeddings=positions,
            type_vocab_size=0,
            relative_attention=True,
            pos_att_type=["p2c", "c2p"],
            position_biased_input=False,
            position_buckets=16,
            max_relative_positions=-1,
            share_att_key=True,
            norm_rel_ebd="layer_norm",
            **common,
        )
    elif family == "mpnet":
        config = MPNetConfig(
            hidden_size=32,
            num_hidden_layers=layers,
            num_attention_heads=heads,
            intermediate_size=37,
            max_position_embeddings=positions,
            bos_token_id=tokenizer.cls_token_id,
            eos_token_id=tokenizer.sep_token_id,
            **common,
        )
    else:
        raise ValueError(family)
    if classifier:
        config.num_labels = 2
    torch.manual_seed(seed)
    auto = AutoModelForSequenceClassification if classifier else AutoModel
    model = auto.from_config(config)
    # Random init keeps attention near uniform; larger query/key weights give peaked maps, so
    # the statistics differ clearly between heads and examples.
    with torch.no_grad():
        for name, param in model.named_parameters():
            if any(name.endswith(k) for k in QUERY_KEY):
                param.mul_(12.0)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out


def make_unreadable_decoder(out: Path) -> Path:
    """A tiny decoder attnwh refuses: BLOOM, whose attention (ALiBi) is computed in its own
    module, not through transformers' attention interface."""
    tokenizer = _decoder_tokenizer("llama")
    config = BloomConfig(
        vocab_size=len(tokenizer),
        hidden_size=32,
        n_layer=1,
        n_head=2,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    torch.manual_seed(0)
    AutoModel.from_config(config).save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out


def make_sharp_classifier(family: str, out: Path, layers: int = 2, heads: int = 4, seed: int = 0) -> Path:
    """A tiny classifier whose logits depend visibly on every head: a freshly initialised
    head gives logits near 0.004 that barely move and predict one class for every input;
    scaled, they spread over both classes and a disabled head moves them far beyond the
    tolerances of the ablation tests."""
    make_tiny(family, out, classifier=True, layers=layers, heads=heads, seed=seed)
    model = AutoModelForSequenceClassification.from_pretrained(out).eval()
    tokenizer = AutoTokenizer.from_pretrained(out)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "classifier" in name or "pooler" in name:
                param.mul_(30.0)
        # Centre the decision on sentence pairs like the tests' (the median margin becomes 0),
        # so that disabling heads flips some predictions.
        sentences = list(dict.fromkeys(CORPUS))
        pairs = [(a, sentences[(3 * i + 1) % len(sentences)]) for i, a in enumerate(sentences)]
        batch = tokenizer(
            [a for a, _ in pairs],
            [b for _, b in pairs],
            padding=True,
            truncation=True,
            max_length=48,
            return_tensors="pt",
        )
        if "token_type_ids" not in inspect.signature(model.forward).parameters:  # DistilBERT, ModernBERT
            batch.pop("token_type_ids", None)
        logits = model(**batch).logits
        last_bias = [p for name, p in model.named_parameters() if name.endswith("bias")][-1]
        last_bias[1] -= (logits[:, 1] - logits[:, 0]).median()
    model.save_pretrained(out)
    return out


# ---------------------------------------------------------------- decoders (causal LMs)

DECODER_FAMILIES = ("gpt2", "llama", "qwen2", "qwen3", "mistral", "gemma2", "gemma3_text", "phi3", "olmo2")
# Families whose tokenizer adds a BOS token (Llama's, Mistral's, Gemma's, Phi-3's); GPT-2's,
# Qwen's and OLMo2's add none, so their first real token is a word.
BOS_FAMILIES = frozenset({"llama", "mistral", "gemma2", "gemma3_text", "phi3"})
DECODER_WINDOW = 5  # keys a sliding-window layer's row sees: shorter than the test inputs
GEMMA2_SOFTCAP = 20.0  # the tiny maps' logits reach well past it: soft-capping changes them


# The byte-level BPE pieces and merges of the corpus, as `trainers.BpeTrainer(vocab_size=400)`
# learned them once: stored for the same reason as the WordPiece pieces above.
_DECODER_BPE = Path(__file__).parent / "fixtures" / "decoder_bpe.json"


def _decoder_tokenizer(family: str) -> PreTrainedTokenizerFast:
    """Byte-level BPE learned on the corpus, with the family's special tokens; a BOS
    post-processor for :data:`BOS_FAMILIES`. GPT-2-like ones have no padding token (attnwh
    pads with EOS), the others one of their own; none makes token type ids."""
    learned = json.loads(_DECODER_BPE.read_text(encoding="utf-8"))
    tok = Tokenizer(models.BPE(learned["vocab"], [tuple(m) for m in learned["merges"]]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    if family in BOS_FAMILIES:
        bos, eos, pad = ("<bos>", "<eos>", "<pad>") if family.startswith("gemma") else ("<s>", "</s>", "<unk>")
        specials = [pad, bos, eos] if family.startswith("gemma") else ["<unk>", bos, eos]
    else:
        bos, eos = "<|endoftext|>", "<|endoftext|>"
        pad = None if family in ("gpt2", "olmo2") else "<|pad|>"
        specials = [eos] + ([pad] if pad else [])
    tok.add_special_tokens(specials)  # after the learned pieces, as GPT-2's <|endoftext|> is
    if family in BOS_FAMILIES:
        tok.post_processor = processors.TemplateProcessing(
            single=f"{bos} $A", pair=f"{bos} $A $B", special_tokens=[(bos, tok.token_to_id(bos))]
        )
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token=bos,
        eos_token=eos,
        pad_token=pad,
        unk_token="<unk>" if family in BOS_FAMILIES and not family.startswith("gemma") else None,
        model_max_length=64,
        model_input_names=["input_ids", "attention_mask"],
    )


def decoder_config(
    family: str, vocab: int, special: dict[str, int | None], layers: int, heads: int, positions: int = 64
) -> Any:
    """A tiny config of a decoder family, with grouped-query attention (2 or 4 query heads per
    key/value head), sliding windows of :data:`DECODER_WINDOW` keys (Mistral on every layer,
    Gemma on layer 0 of 2, global layer 1) and Gemma 2's soft-capping switched on."""
    common: dict[str, Any] = dict(
        vocab_size=vocab,
        hidden_size=32,
        intermediate_size=37,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        max_position_embeddings=positions,
        **special,
    )
    if family == "gpt2":
        return GPT2Config(n_embd=32, n_layer=layers, n_head=heads, n_positions=positions, vocab_size=vocab, **special)
    if family == "llama":
        return LlamaConfig(num_key_value_heads=heads // 2, **common)
    if family == "qwen2":
        return Qwen2Config(num_key_value_heads=heads // 4 or 1, **common)
    if family == "qwen3":
        return Qwen3Config(num_key_value_heads=heads // 2, head_dim=32 // heads, **common)
    if family == "mistral":
        return MistralConfig(num_key_value_heads=heads // 2, sliding_window=DECODER_WINDOW, **common)
    if family == "gemma2":
        return Gemma2Config(
            num_key_value_heads=heads // 2,
            head_dim=32 // heads,
            sliding_window=DECODER_WINDOW,
            layer_types=["sliding_attention" if i % 2 == 0 else "full_attention" for i in range(layers)],
            attn_logit_softcapping=GEMMA2_SOFTCAP,
            query_pre_attn_scalar=32 // heads,
            **common,
        )
    if family == "gemma3_text":
        return Gemma3TextConfig(
            num_key_value_heads=heads // 4 or 1,
            head_dim=32 // heads,
            sliding_window=DECODER_WINDOW,
            layer_types=["sliding_attention" if i % 2 == 0 else "full_attention" for i in range(layers)],
            query_pre_attn_scalar=32 // heads,
            **common,
        )
    if family == "phi3":
        return Phi3Config(num_key_value_heads=heads, **common)
    if family == "olmo2":
        return Olmo2Config(num_key_value_heads=heads // 2, **common)
    raise ValueError(family)


def make_tiny_decoder(
    family: str, out: Path, layers: int = 2, heads: int = 4, seed: int = 0, positions: int = 64
) -> Path:
    """Save a seeded random-weight base model of decoder `family` with its tokenizer into `out`;
    `positions`: the longest input it takes (tokens)."""
    tokenizer = _decoder_tokenizer(family)
    tokenizer.model_max_length = positions
    special = {
        "bos_token_id": tokenizer.bos_token_id,
        "eos_token_id": tokenizer.eos_token_id,
        "pad_token_id": tokenizer.pad_token_id,
    }
    config = decoder_config(family, len(tokenizer), special, layers, heads, positions)
    torch.manual_seed(seed)
    model = AutoModel.from_config(config)
    # Peaked maps, as for the encoders: larger query/key weights, or larger query/key norm
    # scales where a norm follows the projections (Qwen3, Gemma 3: 1 + w; OLMo2).
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name.endswith(("q_proj.weight", "k_proj.weight", "c_attn.weight", "qkv_proj.weight")):
                param.mul_(12.0)
            elif name.endswith(("q_norm.weight", "k_norm.weight")):
                param.copy_((1 + param) * 4 - 1 if family == "gemma3_text" else param * 4)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out
