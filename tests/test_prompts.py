"""GLUE tasks as prompts for a causal LM: templates, label words, shots, and the label words'
logits read at the last real token, checked against each example run alone under eager."""

from __future__ import annotations

import csv
import json
import string
from collections import Counter
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

from attnwh.errors import DataError, ModelError
from attnwh.ingest.measures.prompting import (
    PromptedClassifier,
    label_logits,
    label_token_ids,
    last_positions,
    leading_special_ids,
)
from attnwh.ingest.sources.examples import Example, TaskData
from attnwh.ingest.sources.files import load_sample, sample_root
from attnwh.ingest.sources.glue import GLUE_TASKS, load_glue
from attnwh.ingest.sources.prompts import (
    SEPARATOR,
    TEMPLATES,
    draw_shots,
    make_prompt,
    prompt_template,
)
from tiny_models import CORPUS

GLUE_DIR = Path(__file__).resolve().parents[2] / "shared" / "data" / "glue"


# ---------------------------------------------------------------------------------------
# Tiny causal LMs and their tokenizers
# ---------------------------------------------------------------------------------------


def _training_lines() -> list[str]:
    """The corpus, the sample data and every template's text with each label word, so the
    label words become single tokens as they are for real tokenizers."""
    lines = list(CORPUS)
    for task in ("sentiment", "entailment"):
        data = load_sample(task, "dev")
        lines += [e.text_a for e in data.examples] + [e.text_b for e in data.examples if e.text_b]
    for template in TEMPLATES.values():
        lines += [template.text + word for word in template.words] * 200
    return lines


def _gpt2_tokenizer() -> PreTrainedTokenizerFast:
    """Byte-level BPE as GPT-2's: no BOS added, one <|endoftext|> for everything, no pad token."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(
        _training_lines(),
        trainers.BpeTrainer(
            vocab_size=1500, special_tokens=["<|endoftext|>"], initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
        ),
    )
    return PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<|endoftext|>", eos_token="<|endoftext|>")


def _llama_tokenizer() -> PreTrainedTokenizerFast:
    """Metaspace (▁) BPE as Llama 2's, with <s> added before every text."""
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Metaspace()
    tok.decoder = decoders.Metaspace()
    tok.train_from_iterator(
        _training_lines(),
        trainers.BpeTrainer(
            vocab_size=1500, special_tokens=["<unk>", "<s>", "</s>"], initial_alphabet=list(string.printable)
        ),
    )
    bos = tok.token_to_id("<s>")
    tok.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", bos)])
    return PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", unk_token="<unk>")


def _build(cls, config, attention: str):
    """The model of `config` under `attention` (sdpa or eager), the same weights for the same seed."""
    config._attn_implementation = attention
    torch.manual_seed(0)
    return cls(config).eval()


def _gpt2(tokenizer: PreTrainedTokenizerFast, attention: str) -> GPT2LMHeadModel:
    config = GPT2Config(
        n_embd=32,
        n_layer=2,
        n_head=4,
        vocab_size=len(tokenizer),
        n_positions=512,
        initializer_range=0.2,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
    )
    return _build(GPT2LMHeadModel, config, attention)


def _llama(tokenizer: PreTrainedTokenizerFast, attention: str) -> LlamaForCausalLM:
    config = LlamaConfig(
        hidden_size=32,
        intermediate_size=37,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,  # grouped-query attention, 2 query heads per key/value head
        vocab_size=len(tokenizer),
        max_position_embeddings=512,
        initializer_range=0.2,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
    )
    return _build(LlamaForCausalLM, config, attention)


@pytest.fixture(scope="module")
def lms():
    """family -> (tokenizer, model under sdpa, the same weights under eager)."""
    out = {}
    for family, make_tok, make_lm in (("gpt2", _gpt2_tokenizer, _gpt2), ("llama", _llama_tokenizer, _llama)):
        tokenizer = make_tok()
        fast, eager = make_lm(tokenizer, "sdpa"), make_lm(tokenizer, "eager")
        assert all(torch.equal(a, b) for a, b in zip(fast.state_dict().values(), eager.state_dict().values()))
        out[family] = (tokenizer, fast, eager)
    return out


# ---------------------------------------------------------------------------------------
# Data: the bundled sample, GLUE where it is here, a few hand-made rows for the rest
# ---------------------------------------------------------------------------------------

_MADE = {
    "qqp": [("How do I learn Python?", "What is the best way to learn Python?", "1")],
    "mnli": [
        ("A man plays a guitar on stage.", "A man is performing music.", "entailment"),
        ("A man plays a guitar on stage.", "The man is famous.", "neutral"),
        ("A man plays a guitar on stage.", "The man is asleep at home.", "contradiction"),
    ],
    "wnli": [("The trophy would not fit in the case because it was too big.", "The trophy was too big.", "1")],
    "qnli": [("Where is the Eiffel Tower?", "The Eiffel Tower stands in Paris.", "entailment")],
}


def _examples_of(task: str) -> TaskData:
    """Dev examples of `task`: from the GLUE folder where it is here, else a few made here."""
    spec = GLUE_TASKS[task]
    if (GLUE_DIR / spec.folder).is_dir():
        return load_glue(GLUE_DIR, task, "dev")
    rows = _MADE[task]
    examples = tuple(Example(i, None, a, b, label) for i, (a, b, label) in enumerate(rows))
    return TaskData("made", task, "dev", examples, spec.spec.labels, "test")


def _split(task: TaskData, text: str, n: int) -> TaskData:
    return replace(task, split=text, examples=task.examples[:n])


# ---------------------------------------------------------------------------------------
# Templates
# ---------------------------------------------------------------------------------------


def test_every_glue_classification_task_has_a_template_with_its_classes():
    classification = {name for name, task in GLUE_TASKS.items() if task.spec.labels is not None}
    assert set(TEMPLATES) == classification
    for name, template in TEMPLATES.items():
        assert template.labels == GLUE_TASKS[name].spec.labels
        assert len(template.words) == len(template.labels) == len(set(template.words))
        assert all(word.startswith(" ") and word.strip().isalpha() for word in template.words)
    with pytest.raises(DataError, match="regression"):
        prompt_template("STS-B")
    with pytest.raises(DataError, match="no prompt template for task 'boolq'"):
        prompt_template("boolq")


@pytest.mark.parametrize("task", sorted(TEMPLATES) + ["sentiment", "entailment"])
def test_the_template_renders_every_example_of_the_task(task):
    data = load_sample(task, "dev") if task in ("sentiment", "entailment") else _examples_of(task)
    template = prompt_template(task)
    assert len(data.examples) > 0
    for example in data.examples:
        text = template.render(example)
        assert text.endswith(template.cue) and text.count(template.cue) == 1
        assert example.text_a in text
        if template.is_pair:
            assert example.text_b in text and text.index(example.text_a) < text.rindex(example.text_b)
        for label, word in enumerate(template.words):
            assert template.render(example, label) == text + word


def test_a_pair_template_refuses_a_single_sentence():
    with pytest.raises(DataError, match="needs sentence pairs"):
        prompt_template("rte").render(Example(0, None, "Only one.", None, "entailment"))


def test_the_hub_names_of_the_classes_work_and_a_wrong_number_is_refused():
    rows = (Example(0, None, "Good.", None, "positive"), Example(1, None, "Bad.", None, "negative"))
    hub = TaskData("glue", "sst2", "validation", rows, ("negative", "positive"), "glue/sst2:validation")
    assert make_prompt(hub).template.task == "sst2"
    three = replace(hub, labels=("negative", "neutral", "positive"))
    with pytest.raises(DataError, match="3 classes"):
        make_prompt(three)


# ---------------------------------------------------------------------------------------
# Label words
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("family", ["gpt2", "llama"])
def test_every_label_word_is_one_token_after_its_cue(lms, family):
    tokenizer = lms[family][0]
    for template in TEMPLATES.values():
        ids = label_token_ids(tokenizer, template)
        pieces = tokenizer.convert_ids_to_tokens(list(ids))
        # Each word's one piece carries the word and its leading space (Ġ byte-level, ▁ Metaspace).
        assert [p[1:] for p in pieces] == [w.strip() for w in template.words]
        assert {p[0] for p in pieces} <= {"Ġ", "▁"}


@pytest.mark.parametrize("family", ["gpt2", "llama"])
def test_a_label_word_of_several_tokens_is_refused_in_one_line(lms, family):
    tokenizer = lms[family][0]
    with pytest.raises(ModelError) as caught:
        label_token_ids(tokenizer, prompt_template("sst2", [" negative", " xylophonically"]))
    message = str(caught.value)
    assert "\n" not in message and "' xylophonically'" in message and "not one" in message
    with pytest.raises(DataError, match="2 classes"):
        prompt_template("sst2", [" bad"])
    with pytest.raises(DataError, match="must differ"):
        prompt_template("sst2", [" yes", " yes"])


# ---------------------------------------------------------------------------------------
# Shots
# ---------------------------------------------------------------------------------------


def test_shots_are_deterministic_balanced_and_from_the_train_split():
    train, dev = load_sample("sentiment", "train"), load_sample("sentiment", "dev")
    template = prompt_template("sst2")
    for k in (1, 2, 3, 5, 8):
        first = draw_shots(train, template, k, seed=7, exclude=dev.examples)
        assert first == draw_shots(train, template, k, seed=7, exclude=dev.examples)
        counts = Counter(label for _, label in first)
        assert sum(counts.values()) == k and max(counts.values()) - min(counts.get(c, 0) for c in (0, 1)) <= 1
        assert all(example in train.examples and train.labels[label] == example.label for example, label in first)
    drawn = {tuple(e.position for e, _ in draw_shots(train, template, 4, seed)) for seed in range(5)}
    assert len(drawn) > 1  # the seed matters
    three = _examples_of("mnli")
    counts = Counter(label for _, label in draw_shots(three, prompt_template("mnli"), 2, seed=0))
    assert sorted(counts.values()) == [1, 1]


def test_an_evaluated_example_is_never_among_its_shots():
    """Shots drawn from the very split being evaluated: the pool leaves every evaluated example
    out, by its texts; too few left is a DataError, not a leak."""
    dev = load_sample("entailment", "dev")
    evaluated = _split(dev, "dev", len(dev.examples) - 6)
    template = prompt_template("rte")
    shots = draw_shots(dev, template, 4, seed=3, exclude=evaluated.examples)
    texts = {(e.text_a, e.text_b) for e in evaluated.examples}
    assert len(shots) == 4 and not any((e.text_a, e.text_b) in texts for e, _ in shots)
    prompt = make_prompt(evaluated, shots=4, train=dev, seed=3)
    assert prompt.shots == shots
    for example in evaluated.examples:
        question = template.render(example)
        assert prompt.render(example).endswith(question) and question not in prompt.prefix
    with pytest.raises(DataError, match="outside the evaluated examples"):
        draw_shots(dev, template, 20, seed=3, exclude=evaluated.examples)
    with pytest.raises(DataError, match="need a train split"):
        make_prompt(evaluated, shots=2)


def test_the_description_records_the_template_words_and_shots():
    train, dev = load_sample("sentiment", "train"), load_sample("sentiment", "dev")
    prompt = make_prompt(dev, shots=2, train=train, seed=5)
    described = json.loads(json.dumps(prompt.describe()))
    assert described["template"] == "Review: {text_a}\nSentiment:"
    assert described["label_words"] == [" negative", " positive"] and described["labels"] == ["0", "1"]
    assert described["shots"] == 2 and described["seed"] == 5 and described["shot_source"] == train.source
    assert [s["position"] for s in described["shot_examples"]] == [e.position for e, _ in prompt.shots]
    assert prompt.prefix.endswith(SEPARATOR) and prompt.prefix.count(SEPARATOR) == 2
    assert make_prompt(dev).describe()["shots"] == 0 and make_prompt(dev).prefix == ""


# ---------------------------------------------------------------------------------------
# Scoring with a model
# ---------------------------------------------------------------------------------------


def _eager_alone(model, tokenizer, ids: list[int], label_ids) -> torch.Tensor:
    """The reference: the example alone, unpadded, through the eager model's full forward."""
    with torch.no_grad():
        out = model(input_ids=torch.tensor([ids]), output_attentions=True)
    assert len(out.attentions) == model.config.num_hidden_layers  # eager really ran
    return out.logits[0, -1, list(label_ids)]


@pytest.mark.parametrize("family", ["gpt2", "llama"])
@pytest.mark.parametrize(("task", "shots"), [("sentiment", 0), ("entailment", 0), ("sentiment", 3), ("entailment", 2)])
def test_batched_right_padded_logits_equal_each_example_alone(lms, family, task, shots):
    tokenizer, fast, eager = lms[family]
    dev = load_sample(task, "dev")
    prompt = make_prompt(dev, shots=shots, train=load_sample(task, "train"), seed=1)
    classifier = PromptedClassifier(fast, tokenizer, prompt)
    encoded = classifier.prompt_ids(dev)
    lead = [tokenizer.bos_token_id] if family == "llama" else []
    assert classifier.prefix_ids[: len(lead)] == lead
    assert (len(classifier.prefix_ids) > len(lead)) == (shots > 0)  # the shots, tokenized once
    assert all(p.ids[: len(classifier.prefix_ids)] == classifier.prefix_ids for p in encoded)
    batch = classifier.batch(encoded[:8])
    assert len({len(p.ids) for p in encoded[:8]}) > 1  # really padded
    assert batch["attention_mask"][:, 0].all()  # right padding: every row starts real
    batched = classifier.logits(batch)
    assert batched.shape == (8, 2)
    for row, p in enumerate(encoded[:8]):
        alone = _eager_alone(eager, tokenizer, p.ids, classifier.label_ids)
        assert torch.allclose(batched[row], alone, atol=1e-5, rtol=0), (row, batched[row], alone)
    assert batched.abs().max() > 1e-2  # logits of real size, so the 1e-5 means something
    # predict() sorts by length and batches by 5: the first 8 examples' logits do not move.
    predictions = classifier.predict(_split(dev, "dev", 24), batch_size=5)
    assert torch.allclose(torch.from_numpy(predictions.logits[:8]), batched, atol=1e-5, rtol=0)


def test_the_gather_reads_each_rows_last_real_token_on_either_padding_side():
    mask_right = torch.tensor([[1, 1, 1, 0], [1, 0, 0, 0], [1, 1, 1, 1]])
    mask_left = mask_right.flip(-1)
    assert last_positions(mask_right).tolist() == [2, 0, 3]
    assert last_positions(mask_left).tolist() == [3, 3, 3]
    logits = torch.arange(3 * 4 * 5, dtype=torch.float32).view(3, 4, 5)
    assert label_logits(logits, mask_right, [4, 1]).tolist() == [[14, 11], [24, 21], [59, 56]]


_ROWS = 80  # the first rows of each file: enough for a share strictly between 0 and 1


def _share(path: Path, label_column: str, label: str) -> float:
    """The share of `label` in the file's first _ROWS rows, counted with the csv module alone."""
    with path.open(encoding="utf-8-sig", newline="") as handle:
        rows = [r for r in csv.DictReader(handle, delimiter="\t", quoting=csv.QUOTE_NONE) if any(r.values())]
    return sum(r[label_column].strip() == label for r in rows[:_ROWS]) / len(rows[:_ROWS])


@pytest.mark.parametrize("family", ["gpt2", "llama"])
def test_a_model_biased_to_one_label_word_predicts_that_class_everywhere(lms, family):
    tokenizer, fast, _ = lms[family]
    cases = [(load_sample("sentiment", "dev"), sample_root() / "sentiment" / "dev.tsv", "label", 1)]
    cases.append((load_sample("entailment", "dev"), sample_root() / "entailment" / "dev.tsv", "label", 0))
    if (GLUE_DIR / "RTE").is_dir():
        cases.append((load_glue(GLUE_DIR, "rte", "dev"), GLUE_DIR / "RTE" / "dev.tsv", "label", 1))
    for whole, path, column, favoured in cases:
        data = _split(whole, whole.split, _ROWS)
        classifier = PromptedClassifier(fast, tokenizer, make_prompt(data))
        head = fast.lm_head
        original = head.bias
        head.bias = torch.nn.Parameter(torch.zeros(head.out_features))
        try:
            with torch.no_grad():
                head.bias[classifier.label_ids[favoured]] = 1e3
            predictions = classifier.predict(data, batch_size=16)
        finally:
            head.bias = original
        assert (predictions.predicted == favoured).all()
        expected = _share(Path(str(path)), column, data.labels[favoured])
        assert 0 < expected < 1 and predictions.accuracy == pytest.approx(expected, abs=1e-12)


def test_a_prompt_too_long_loses_the_start_of_the_example_only(lms):
    tokenizer, fast, _ = lms["llama"]
    dev = load_sample("entailment", "dev")
    prompt = make_prompt(dev, shots=2, train=load_sample("entailment", "train"), seed=0)
    whole = PromptedClassifier(fast, tokenizer, prompt).encode(dev.examples[0])
    cut = len(whole.ids) - 5
    classifier = PromptedClassifier(fast, tokenizer, prompt, max_length=cut)
    short = classifier.encode(dev.examples[0])
    assert short.truncated and not whole.truncated and short.n_tokens_full == len(whole.ids)
    assert len(short.ids) == cut
    assert short.ids[: len(classifier.prefix_ids)] == classifier.prefix_ids  # the shots stay
    assert short.ids[-10:] == whole.ids[-10:]  # so does the cue
    with pytest.raises(DataError, match="use fewer shots"):
        PromptedClassifier(fast, tokenizer, prompt, max_length=len(classifier.prefix_ids) + 2)


def test_a_tokenizer_that_appends_eos_still_ends_the_prompt_at_the_cue(lms):
    """Some tokenizers add </s> after every text: the model must answer after the cue, not
    after an EOS, so trailing specials are left out; the leading <s> stays."""
    tokenizer, fast, _ = lms["llama"]
    backend = Tokenizer.from_str(tokenizer.backend_tokenizer.to_str())
    bos, eos = tokenizer.bos_token_id, tokenizer.eos_token_id
    backend.post_processor = processors.TemplateProcessing(
        single="<s> $A </s>", special_tokens=[("<s>", bos), ("</s>", eos)]
    )
    appending = PreTrainedTokenizerFast(tokenizer_object=backend, bos_token="<s>", eos_token="</s>", unk_token="<unk>")
    assert appending("Answer")["input_ids"][-1] == eos  # it really appends
    assert leading_special_ids(appending) == [bos] and leading_special_ids(_gpt2_tokenizer()) == []
    dev = load_sample("sentiment", "dev")
    ours = PromptedClassifier(fast, appending, make_prompt(dev)).encode(dev.examples[0]).ids
    plain = PromptedClassifier(fast, tokenizer, make_prompt(dev)).encode(dev.examples[0]).ids
    assert ours == plain and ours[0] == bos and eos not in ours


@pytest.mark.parametrize("shots", [0, 3])
def test_the_prompt_ids_spell_the_rendered_prompt(lms, shots):
    """The shots and the example are tokenized apart: together they still spell exactly the
    prompt's text (byte-level BPE decodes losslessly)."""
    tokenizer, fast, _ = lms["gpt2"]
    dev = load_sample("entailment", "dev")
    prompt = make_prompt(dev, shots=shots, train=load_sample("entailment", "train"), seed=2)
    classifier = PromptedClassifier(fast, tokenizer, prompt)
    for example in dev.examples[:20]:
        assert tokenizer.decode(classifier.encode(example).ids) == prompt.render(example)
