"""Dataset loaders: the real GLUE files (when present), every error path, local files, the
bundled sample corpus, Hugging Face datasets saved locally, and TaskData.sample."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import datasets
import polars as pl
import pytest

from attnwh.errors import DataError
from attnwh.ingest.sources import files as data
from attnwh.ingest.sources import hub
from attnwh.ingest.sources.examples import Example, TaskData
from attnwh.ingest.sources.files import (
    GLUE_TASKS,
    glue_task,
    infer_label_names,
    load_file,
    load_glue,
    load_sample,
)
from attnwh.ingest.sources.hub import load_hub

GLUE_DIR = Path(__file__).resolve().parents[2] / "shared" / "data" / "glue"


def write(path: Path, text: str, encoding: str = "utf-8") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding=encoding)
    return path


# ---------------------------------------------------------------------------------------
# The real GLUE files (skipped where the shared data is absent)
# ---------------------------------------------------------------------------------------


def real_glue(folder: str, split: str) -> Path:
    path = GLUE_DIR / folder / f"{split}.tsv"
    if not path.is_file():
        pytest.skip(f"shared GLUE file absent: {path}")
    return path


_cache: dict[tuple[str, str], TaskData] = {}


def glue(task: str, split: str) -> TaskData:
    """Each real split is read once per session (SST-2 train has 67k rows)."""
    real_glue(glue_task(task).folder, split)
    if (task, split) not in _cache:
        _cache[(task, split)] = load_glue(GLUE_DIR, task, split)
    return _cache[(task, split)]


@pytest.mark.parametrize(
    ("task", "split", "size"),
    [
        ("sst2", "dev", 872),
        ("sst2", "train", 67349),
        ("mrpc", "dev", 408),
        ("mrpc", "train", 3668),
        ("rte", "dev", 277),
        ("rte", "train", 2490),
        ("cola", "dev", 1043),
        ("cola", "train", 8551),
        ("stsb", "dev", 1500),
        ("stsb", "train", 5749),
        ("qnli", "dev", 5463),
    ],
)
def test_real_glue_sizes(task: str, split: str, size: int) -> None:
    loaded = glue(task, split)
    assert len(loaded.examples) == size
    assert [e.position for e in loaded.examples] == list(range(size))
    assert loaded.dataset == "glue" and loaded.task == task and loaded.split == split
    assert all(e.text_a and e.text_a == e.text_a.strip() for e in loaded.examples)
    if loaded.labels is not None:
        assert {e.label for e in loaded.examples} <= set(loaded.labels)


@pytest.mark.parametrize(
    ("task", "counts"),
    [
        ("sst2", {"0": 428, "1": 444}),
        ("mrpc", {"1": 279, "0": 129}),
        ("rte", {"entailment": 146, "not_entailment": 131}),
        ("cola", {"1": 721, "0": 322}),
        ("qnli", {"entailment": 2702, "not_entailment": 2761}),
    ],
)
def test_real_glue_dev_label_counts(task: str, counts: dict[str, int]) -> None:
    loaded = glue(task, "dev")
    assert Counter(e.label for e in loaded.examples) == counts
    assert set(loaded.labels or ()) == set(counts)


def test_real_mrpc_has_no_bom_or_header_and_keeps_bare_quotes() -> None:
    first = glue("mrpc", "dev").examples[0]
    assert not first.text_a.startswith("\ufeff")
    assert "#1 String" not in first.text_a and first.label in ("0", "1")
    raw = real_glue("MRPC", "dev").read_text(encoding="utf-8-sig").splitlines()[1].split("\t")
    assert (first.text_a, first.text_b) == (raw[3], raw[4])
    assert first.text_b.startswith('"') and first.text_b.count('"') == 1  # an unbalanced quote


def test_real_cola_first_row_is_data() -> None:
    raw = real_glue("CoLA", "dev").read_text(encoding="utf-8").splitlines()[0].split("\t")
    first = glue("cola", "dev").examples[0]
    assert (first.text_a, first.label, first.guid) == (raw[3], raw[1], None)


def test_real_sst2_strips_trailing_space() -> None:
    loaded = glue("sst2", "train")
    raw = real_glue("SST-2", "train").read_text(encoding="utf-8").splitlines()[1].split("\t")
    assert raw[0].endswith(" ") and loaded.examples[0].text_a == raw[0].strip()


def test_real_qnli_quotes_survive() -> None:
    """QNLI has 606 lines with a bare `"`; with csv quoting on, rows would merge."""
    lines = real_glue("QNLI", "dev").read_text(encoding="utf-8").splitlines()[1:]
    raw = {line.split("\t")[0]: line.split("\t") for line in lines if '"' in line}
    loaded = {e.guid: e for e in glue("qnli", "dev").examples if e.guid in raw}
    assert len(loaded) == len(raw) > 0
    assert all((e.text_a, e.text_b) == (raw[g][1].strip(), raw[g][2].strip()) for g, e in loaded.items())


def test_real_stsb_is_regression_with_guids() -> None:
    loaded = glue("stsb", "dev")
    assert loaded.labels is None and loaded.is_pair
    assert all(0.0 <= float(e.label) <= 5.0 for e in loaded.examples)
    assert loaded.examples[0].guid == "0"


def test_real_glue_accepts_task_folder_and_aliases() -> None:
    real_glue("RTE", "dev")
    for name in ("RTE", "rte", "Rte"):
        assert load_glue(GLUE_DIR / "RTE", name, "validation").examples == glue("rte", "dev").examples


# ---------------------------------------------------------------------------------------
# GLUE layouts and error paths on temporary files
# ---------------------------------------------------------------------------------------


@pytest.fixture
def fake_glue(tmp_path: Path) -> Path:
    root = tmp_path / "glue"
    write(root / "SST-2" / "dev.tsv", "sentence\tlabel\nit 's \"great . \t1\n\nbad \t0\n")
    write(root / "MRPC" / "dev.tsv", '\ufeffQuality\t#1 ID\t#2 ID\t#1 String\t#2 String\n1\t11\t12\tA s.\t"B s.\n')
    write(root / "CoLA" / "dev.tsv", "gj04\t1\t\tFirst row.\ngj04\t0\t*\tSecond row .\n")
    write(
        root / "QQP" / "dev.tsv",
        "id\tqid1\tqid2\tquestion1\tquestion2\tis_duplicate\n402555\t536040\t536041\tHow do I?\tHow can I?\t1\n",
    )
    mnli_header = (
        "index\tpromptID\tpairID\tgenre\tsentence1_binary_parse\tsentence2_binary_parse"
        "\tsentence1_parse\tsentence2_parse\tsentence1\tsentence2\tlabel1\tgold_label\n"
    )
    parses = "\t(" * 4  # the four parse columns
    write(root / "MNLI" / "dev_matched.tsv", mnli_header + f"7\t1\t1e\tfic{parses}\tP m.\tH m.\tneutral\tneutral\n")
    write(
        root / "MNLI" / "dev_mismatched.tsv",
        mnli_header + f"8\t1\t1e\tfic{parses}\tP x.\tH x.\tentailment\tentailment\n",
    )
    write(root / "WNLI" / "train.tsv", "index\tsentence1\tsentence2\tlabel\n3\tA.\tB.\t1\n")
    write(root / "QNLI" / "dev.tsv", "index\tquestion\tsentence\tlabel\n5\tWhy?\tBecause.\tentailment\n")
    write(
        root / "STS-B" / "dev.tsv",
        "index\tgenre\tfilename\tyear\told_index\tsource1\tsource2\tsentence1\tsentence2\tscore\n"
        "0\tg\tf\t2012\t0\tnone\tnone\tA.\tB.\t3.800\n",
    )
    return root


def test_glue_layouts(fake_glue: Path) -> None:
    sst = load_glue(fake_glue, "SST-2", "dev")
    assert [(e.position, e.text_a, e.label) for e in sst.examples] == [
        (0, "it 's \"great .", "1"),
        (1, "bad", "0"),
    ]  # bare quote intact, blank line skipped
    mrpc = load_glue(fake_glue, "mrpc", "dev").examples[0]
    assert (mrpc.text_a, mrpc.text_b, mrpc.label, mrpc.guid) == ("A s.", '"B s.', "1", None)
    cola = load_glue(fake_glue, "cola", "dev")
    assert [e.text_a for e in cola.examples] == ["First row.", "Second row ."]
    qqp = load_glue(fake_glue, "QQP", "dev").examples[0]
    assert (qqp.guid, qqp.text_a, qqp.text_b, qqp.label) == ("402555", "How do I?", "How can I?", "1")
    mnli = load_glue(fake_glue, "mnli", "dev")
    assert mnli.split == "dev_matched" and mnli.examples[0].guid == "7"
    assert (mnli.examples[0].text_a, mnli.examples[0].label) == ("P m.", "neutral")
    assert mnli.labels == ("entailment", "neutral", "contradiction")
    assert load_glue(fake_glue, "mnli", "dev_mismatched").examples[0].label == "entailment"
    assert load_glue(fake_glue, "wnli", "train").examples[0].guid == "3"
    assert load_glue(fake_glue, "qnli", "dev").examples[0].text_b == "Because."
    assert load_glue(fake_glue, "sts-b", "dev").examples[0].label == "3.800"


@pytest.mark.parametrize("name", ["SST-2", "sst-2", "sst2", "Sst_2", "CoLA", "STS-B", "sts_b"])
def test_glue_task_aliases(name: str) -> None:
    assert glue_task(name).name in GLUE_TASKS


def test_glue_tasks_table() -> None:
    assert set(GLUE_TASKS) == {"sst2", "mrpc", "rte", "cola", "stsb", "qnli", "qqp", "mnli", "wnli"}
    assert GLUE_TASKS["stsb"].spec.labels is None
    assert GLUE_TASKS["cola"].spec.columns == ("source", "label", "original_label", "sentence")
    assert GLUE_TASKS["mnli"].splits == ("train", "dev_matched", "dev_mismatched")


def _error(call, *args, **kwargs) -> str:
    with pytest.raises(DataError) as info:
        call(*args, **kwargs)
    message = str(info.value)
    assert "\n" not in message
    return message


def test_glue_unknown_task_lists_valid(fake_glue: Path) -> None:
    message = _error(load_glue, fake_glue, "imdb", "dev")
    assert "imdb" in message and "sst2" in message and "wnli" in message


def test_glue_unknown_split(fake_glue: Path) -> None:
    message = _error(load_glue, fake_glue, "sst2", "test")
    assert "sst2" in message and "'test'" in message and "train" in message


def test_glue_missing_folder_and_file(fake_glue: Path, tmp_path: Path) -> None:
    assert "RTE" in _error(load_glue, fake_glue, "rte", "dev")
    assert "nowhere" in _error(load_glue, tmp_path / "nowhere", "rte", "dev")
    message = _error(load_glue, fake_glue, "sst2", "train")
    assert "SST-2" in message and "train.tsv" in message


def test_glue_empty_file(fake_glue: Path) -> None:
    write(fake_glue / "RTE" / "dev.tsv", "")
    assert "RTE/dev.tsv" in _error(load_glue, fake_glue, "rte", "dev")
    write(fake_glue / "RTE" / "dev.tsv", "index\tsentence1\tsentence2\tlabel\n")
    assert "no data rows" in _error(load_glue, fake_glue, "rte", "dev")


def test_glue_wrong_column_count_names_line(fake_glue: Path) -> None:
    write(
        fake_glue / "RTE" / "dev.tsv",
        "index\tsentence1\tsentence2\tlabel\n0\tA.\tB.\tentailment\n1\tA. B.\tentailment\n",
    )
    message = _error(load_glue, fake_glue, "rte", "dev")
    assert "RTE/dev.tsv line 3" in message and "expected 4 columns, found 3" in message


def test_glue_label_outside_set(fake_glue: Path) -> None:
    write(fake_glue / "RTE" / "dev.tsv", "index\tsentence1\tsentence2\tlabel\n0\tA.\tB.\tneutral\n")
    message = _error(load_glue, fake_glue, "rte", "dev")
    assert "RTE/dev.tsv line 2" in message and "'neutral'" in message and "not_entailment" in message
    write(fake_glue / "STS-B" / "dev.tsv", (fake_glue / "STS-B" / "dev.tsv").read_text().replace("3.800", "7.5"))
    assert "'7.5'" in _error(load_glue, fake_glue, "stsb", "dev")


def test_glue_missing_column_and_bad_encoding(fake_glue: Path) -> None:
    write(fake_glue / "RTE" / "dev.tsv", "index\tpremise\tsentence2\tlabel\n0\tA.\tB.\tentailment\n")
    message = _error(load_glue, fake_glue, "rte", "dev")
    assert "'sentence1'" in message and "'premise'" in message
    (fake_glue / "RTE" / "dev.tsv").write_bytes(b"index\tsentence1\tsentence2\tlabel\n0\t\xff\tB\t1\n")
    assert "UTF-8" in _error(load_glue, fake_glue, "rte", "dev")


# ---------------------------------------------------------------------------------------
# The bundled sample corpus
# ---------------------------------------------------------------------------------------


@pytest.fixture
def sample_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "sample"
    write(root / "sentiment" / "train.tsv", 'sentence\tlabel\na "fine" film \t1\ndull\t0\n')
    write(root / "sentiment" / "dev.tsv", "sentence\tlabel\nok\t1\n")
    write(
        root / "entailment" / "dev.tsv",
        "index\tsentence1\tsentence2\tlabel\n0\tA cat sat.\tAn animal sat.\tentailment\n"
        "1\tA cat sat.\tA dog ran.\tnot_entailment\n",
    )
    monkeypatch.setattr(data, "sample_root", lambda: root)
    return root


def test_sample_tasks(sample_dir: Path) -> None:
    sentiment = load_sample("Sentiment", "train")
    assert sentiment.dataset == "sample" and sentiment.labels == ("0", "1")
    assert [(e.text_a, e.label) for e in sentiment.examples] == [('a "fine" film', "1"), ("dull", "0")]
    entail = load_sample("entailment", "validation")
    assert entail.split == "dev" and entail.is_pair and entail.examples[1].guid == "1"
    assert entail.labels == ("entailment", "not_entailment")


def test_sample_errors(sample_dir: Path) -> None:
    assert "sentiment" in _error(load_sample, "paraphrase", "dev")
    assert "train" in _error(load_sample, "sentiment", "test")
    assert "entailment/train.tsv" in _error(load_sample, "entailment", "train")
    write(sample_dir / "sentiment" / "dev.tsv", "sentence\tlabel\nok\tpositive\n")
    assert "'positive'" in _error(load_sample, "sentiment", "dev")


@pytest.mark.parametrize("task", ["sentiment", "entailment"])
@pytest.mark.parametrize("split", ["train", "dev"])
def test_bundled_sample_when_shipped(task: str, split: str) -> None:
    if not (data.sample_root() / task / f"{split}.tsv").is_file():
        pytest.skip("bundled sample corpus not written yet")
    loaded = load_sample(task, split)
    assert loaded.examples and {e.label for e in loaded.examples} <= set(loaded.labels or ())


# ---------------------------------------------------------------------------------------
# Local files
# ---------------------------------------------------------------------------------------

ROWS = [
    {"text": "A cat sat.", "hyp": "An animal sat.", "label": "yes"},
    {"text": 'He said "hi, there', "hyp": "Someone spoke.", "label": "no"},
    {"text": "Dogs bark.", "hyp": "Cats meow.", "label": "no"},
]


def make_file(tmp_path: Path, kind: str, rows: list[dict] = ROWS) -> Path:
    path = tmp_path / f"pairs.{kind}"
    if kind == "tsv":
        write(path, "text\thyp\tlabel\n" + "".join(f"{r['text']}\t{r['hyp']}\t{r['label']}\n" for r in rows))
    elif kind == "csv":
        pl.DataFrame(rows).write_csv(path)  # quotes the field holding `"` and `,`
    elif kind == "jsonl":
        write(path, "".join(json.dumps(r) + "\n" for r in rows))
    else:
        pl.DataFrame(rows).write_parquet(path)
    return path


@pytest.mark.parametrize("kind", ["csv", "tsv", "jsonl", "parquet"])
def test_load_file_formats(tmp_path: Path, kind: str) -> None:
    path = make_file(tmp_path, kind)
    full = load_file(path, "text", "hyp", "label")
    assert (full.dataset, full.task, full.split, full.source) == (path.name, "pairs", "all", str(path))
    assert [(e.position, e.text_a, e.text_b, e.label) for e in full.examples] == [
        (i, r["text"], r["hyp"], r["label"]) for i, r in enumerate(ROWS)
    ]
    assert full.labels == ("no", "yes") and full.is_pair
    bare = load_file(path, "text", task="nli", split="dev")
    assert (bare.task, bare.split, bare.labels, bare.is_pair) == ("nli", "dev", None, False)
    assert all(e.label is None and e.text_b is None for e in bare.examples)


def test_load_file_json_array_and_typed_labels(tmp_path: Path) -> None:
    path = write(tmp_path / "a.json", json.dumps([{"t": "x", "y": 10}, {"t": "y", "y": 2}]))
    loaded = load_file(path, "t", label_column="y")
    assert loaded.labels == ("2", "10") and loaded.examples[0].label == "10"


def test_label_name_rule() -> None:
    assert infer_label_names(["b", "a", "b"]) == ("a", "b")
    assert infer_label_names(["10", "2", "1"]) == ("1", "2", "10")
    assert infer_label_names(["0.0", "1.0"]) == ("0.0", "1.0")  # few float values: classes
    assert infer_label_names([f"{i / 7:.3f}" for i in range(20)]) is None  # regression
    assert infer_label_names([str(i) for i in range(20)]) is not None  # many ints: classes


def test_load_file_float_labels_are_regression(tmp_path: Path) -> None:
    path = tmp_path / "scores.parquet"
    pl.DataFrame({"s": [f"s{i}" for i in range(12)], "y": [i / 3 for i in range(12)]}).write_parquet(path)
    loaded = load_file(path, "s", label_column="y")
    assert loaded.labels is None and loaded.examples[1].label == str(1 / 3)


def test_load_file_missing_and_unknown(tmp_path: Path) -> None:
    assert "nope.csv" in _error(load_file, tmp_path / "nope.csv", "text")
    path = write(tmp_path / "data.xlsx", "x")
    message = _error(load_file, path, "text")
    assert "data.xlsx" in message and ".xlsx" in message and ".parquet" in message


@pytest.mark.parametrize("kind", ["csv", "tsv", "jsonl", "parquet"])
def test_load_file_missing_column_lists_columns(tmp_path: Path, kind: str) -> None:
    path = make_file(tmp_path, kind)
    message = _error(load_file, path, "text", label_column="gold")
    assert path.name in message and "'gold'" in message and "'hyp'" in message and "'label'" in message


@pytest.mark.parametrize("kind", ["csv", "tsv", "jsonl", "parquet"])
def test_load_file_empty(tmp_path: Path, kind: str) -> None:
    if kind == "parquet":
        path = tmp_path / "empty.parquet"
        pl.DataFrame({"text": []}, schema={"text": pl.String}).write_parquet(path)
    else:
        path = write(tmp_path / f"empty.{kind}", "")
    assert "empty." in _error(load_file, path, "text")


@pytest.mark.parametrize("kind", ["csv", "tsv", "jsonl", "parquet"])
def test_load_file_empty_text_names_row(tmp_path: Path, kind: str) -> None:
    rows = [dict(r) for r in ROWS]
    rows[2]["hyp"] = "  "
    path = make_file(tmp_path, kind, rows)
    message = _error(load_file, path, "text", "hyp")
    assert path.name in message and "'hyp'" in message
    assert {"csv": "line 4", "tsv": "line 4", "jsonl": "line 3", "parquet": "row 2"}[kind] in message
    load_file(path, "text")  # the empty pair column is not read when not asked for


def test_load_file_null_text_and_label(tmp_path: Path) -> None:
    path = write(tmp_path / "n.jsonl", '{"t": "a", "y": 1}\n{"t": null, "y": 0}\n')
    assert "line 2" in _error(load_file, path, "t")
    path = write(tmp_path / "m.jsonl", '{"t": "a", "y": 1}\n{"t": "b"}\n')
    assert "line 2" in _error(load_file, path, "t", label_column="y")
    path = write(tmp_path / "bad.jsonl", '{"t": "a"}\n{"t": \n')
    assert "bad.jsonl line 2" in _error(load_file, path, "t")


def test_load_file_bad_rows(tmp_path: Path) -> None:
    path = write(tmp_path / "ragged.tsv", "text\tlabel\na\t1\nb\n")
    assert "ragged.tsv line 3" in _error(load_file, path, "text")
    path = write(tmp_path / "broken.parquet", "not parquet")
    assert "broken.parquet" in _error(load_file, path, "text")


# ---------------------------------------------------------------------------------------
# Hugging Face datasets (local only: no Hub access in tests)
# ---------------------------------------------------------------------------------------


@pytest.fixture
def hf_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "hf-cache")
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True)
    import huggingface_hub.constants

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    return tmp_path


@pytest.fixture
def saved_dict(hf_cache: Path) -> Path:
    features = datasets.Features(
        {
            "premise": datasets.Value("string"),
            "hypothesis": datasets.Value("string"),
            "label": datasets.ClassLabel(names=["entailment", "neutral", "contradiction"]),
            "idx": datasets.Value("int32"),
        }
    )
    rows = {"premise": ["A.", "B.", "C."], "hypothesis": ["a.", "b.", "c."], "label": [2, 0, -1], "idx": [10, 11, 12]}
    path = hf_cache / "saved"
    datasets.DatasetDict(
        {
            "train": datasets.Dataset.from_dict(rows, features=features),
            "validation": datasets.Dataset.from_dict({k: v[:2] for k, v in rows.items()}, features=features),
        }
    ).save_to_disk(str(path))
    return path


def test_hub_saved_dict_with_classlabel(saved_dict: Path) -> None:
    loaded = load_hub(
        str(saved_dict), None, "dev", text_column="premise", pair_column="hypothesis", label_column="label"
    )
    assert loaded.split == "validation" and loaded.task == "saved"
    assert loaded.labels == ("entailment", "neutral", "contradiction")
    assert [(e.text_a, e.text_b, e.label) for e in loaded.examples] == [
        ("A.", "a.", "contradiction"),
        ("B.", "b.", "entailment"),
    ]
    assert loaded.source == f"{saved_dict}:validation"
    train = load_hub(str(saved_dict), None, "train", task="nli", text_column="premise", label_column="label")
    assert train.task == "nli" and train.examples[2].label is None  # -1: unlabelled
    message = _error(load_hub, str(saved_dict), None, "test", text_column="premise")
    assert "'test'" in message and "train, validation" in message


def test_hub_saved_single_dataset_and_plain_labels(hf_cache: Path) -> None:
    path = hf_cache / "one"
    datasets.Dataset.from_dict({"t": ["x", "y", "z"], "y": [1, 0, 1]}).save_to_disk(str(path))
    loaded = load_hub(str(path), None, "train", text_column="t", label_column="y")
    assert loaded.labels == ("0", "1") and [e.label for e in loaded.examples] == ["1", "0", "1"]


def test_hub_local_folder_and_file(hf_cache: Path) -> None:
    folder = hf_cache / "folder"
    write(folder / "train.csv", "text,label\na,pos\nb,neg\n")
    write(folder / "dev.csv", 'text,label\n"c, d",pos\n')
    dev = load_hub(str(folder), None, "dev", text_column="text", label_column="label")
    assert dev.split == "validation" and dev.examples[0].text_a == "c, d"
    one = load_hub(str(folder / "train.csv"), None, "train", text_column="text")
    assert one.task == "train" and [e.text_a for e in one.examples] == ["a", "b"]


def test_hub_errors(hf_cache: Path, saved_dict: Path) -> None:
    message = _error(load_hub, "no-such-user/no-such-dataset", None, "train", text_column="t")
    assert "no-such-user/no-such-dataset" in message
    assert "mrpc" in _error(load_hub, "nyu-mll/glue", "imdb", "dev")
    assert "cola" in _error(load_hub, "glue", None, "dev")
    assert "text_column" in _error(load_hub, "imdb", None, "train")
    message = _error(load_hub, str(saved_dict), None, "train", text_column="sentence")
    assert "'sentence'" in message and "'premise'" in message


def test_hub_glue_knows_columns(hf_cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """nyu-mll/glue needs no column names; the Hub call itself is faked with a local dataset."""
    features = datasets.Features(
        {
            "sentence": datasets.Value("string"),
            "label": datasets.ClassLabel(names=["negative", "positive"]),
            "idx": datasets.Value("int32"),
        }
    )
    fake = datasets.Dataset.from_dict(
        {"sentence": ["good .", "bad ."], "label": [1, 0], "idx": [4, 5]}, features=features
    )
    calls = []

    def open_split(name, config, split, where):
        calls.append((name, config, split))
        return fake, "validation"

    monkeypatch.setattr(hub, "_open_hub_split", open_split)
    loaded = load_hub("nyu-mll/glue", "SST-2", "dev")
    assert calls == [("nyu-mll/glue", "sst2", "dev")]
    assert (loaded.task, loaded.split, loaded.labels) == ("sst2", "validation", ("negative", "positive"))
    assert [(e.guid, e.label) for e in loaded.examples] == [("4", "positive"), ("5", "negative")]
    assert loaded.source == "nyu-mll/glue/sst2:validation"


# ---------------------------------------------------------------------------------------
# TaskData.sample
# ---------------------------------------------------------------------------------------


def _task(n: int) -> TaskData:
    examples = tuple(Example(i, None, f"t{i}", None, str(i % 2)) for i in range(n))
    return TaskData("x", "x", "dev", examples, ("0", "1"), "memory")


def test_sample_is_seeded_ordered_and_bounded() -> None:
    task = _task(50)
    first, again = task.sample(10, seed=3), task.sample(10, seed=3)
    assert first == again and len(first.examples) == 10
    positions = [e.position for e in first.examples]
    assert positions == sorted(positions) and len(set(positions)) == 10
    assert task.sample(10, seed=4).examples != first.examples
    assert task.sample(50, seed=0) is task and task.sample(500, seed=0) is task
    assert task.sample(None, seed=0) is task
