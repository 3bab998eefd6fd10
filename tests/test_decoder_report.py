"""The report, `attnwh show`, example maps and the Python API on a warehouse holding a decoder's
run (a tiny Llama with grouped-query attention, on the bundled prose sample cut into token
windows) beside an encoder's (a tiny BERT on sentence pairs).

The maps are checked against HF's eager `output_attentions` on the token ids the run stored,
computed independently here; the report's charts are read from their Vega-Lite specs and, in
real headless Chromium, from what is drawn.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import duckdb
import numpy as np
import pytest
import torch
from transformers import AutoModel, AutoTokenizer

from attnwh.api import Warehouse
from attnwh.errors import UsageError
from attnwh.ingest.runs.maps import example_maps
from attnwh.ingest.sources.files import load_sample
from helpers import cli_main, ingest_args, run, write_pairs
from test_report_browser import browser, open_offline  # noqa: F401
from tiny_models import make_tiny_decoder

MAX_LENGTH = 24
DECODER_RUN, ENCODER_RUN = 1, 2


@pytest.fixture(scope="module")
def decoder(tmp_path_factory) -> Path:
    return make_tiny_decoder("llama", tmp_path_factory.mktemp("dec") / "llama", 2, 4)  # 2 key/value heads


@pytest.fixture(scope="module")
def warehouse(tmp_path_factory, tiny_model_dir, decoder) -> Path:
    """Run 1: the decoder on 6 prose windows of 24 tokens; run 2: BERT on 6 sentence pairs."""
    tmp = tmp_path_factory.mktemp("decoder-wh")
    db = tmp / "w.duckdb"
    cli_main("ingest", "--model", str(decoder), "--task", "prose", "--limit", "6", "--max-length", str(MAX_LENGTH),
         "--db", str(db))  # fmt: skip
    cli_main(*ingest_args(tiny_model_dir("bert"), write_pairs(tmp / "pairs.tsv", 6), db))
    return db


def _examples(db: Path, run_id: int) -> list[tuple[int, str, list[int]]]:
    with duckdb.connect(str(db), read_only=True) as con:
        return con.execute(
            "SELECT x.example_id, e.guid, x.token_ids FROM run_examples AS x JOIN examples AS e USING (example_id) "
            "WHERE x.run_id = ? ORDER BY x.example_id",
            [run_id],
        ).fetchall()


# ---------------------------------------------------------------- maps of exactly the ids read


def test_example_maps_are_eager_attentions_of_the_ids_the_run_read(warehouse, decoder, tmp_path):
    """The stored ids are those the ingest cut from the text (BOS included); example_maps
    gives the eager model's output_attentions on them within 1e-5, zero above the diagonal,
    even once the example's text says something else (the ids are used, not the text)."""
    tokenizer = AutoTokenizer.from_pretrained(decoder)
    cut = {e.guid: list(e.token_ids or ()) for e in load_sample("prose", "dev").cut(tokenizer, MAX_LENGTH).examples}
    rows = _examples(warehouse, DECODER_RUN)
    assert len(rows) == 6
    for _, guid, ids in rows:
        assert ids == cut[guid][:MAX_LENGTH] and ids[0] == tokenizer.bos_token_id
    # A copy whose texts no longer tokenize to the stored ids: what show recomputes must not move.
    db = tmp_path / "w.duckdb"
    shutil.copy(warehouse, db)
    with duckdb.connect(str(db)) as con:
        con.execute("UPDATE examples SET text_a = 'Something else entirely.' WHERE task = 'prose'")
    eager = AutoModel.from_pretrained(decoder, attn_implementation="eager").eval()
    worst = 0.0
    for example_id, _, ids in rows[:3]:
        found = example_maps(db, DECODER_RUN, example_id)
        assert found.causal and found.num_key_value_heads == 2
        assert found.tokens == tokenizer.convert_ids_to_tokens(ids)
        with torch.no_grad():
            out = eager(input_ids=torch.tensor([ids]), output_attentions=True)
        expected = np.stack([a[0].double().numpy() for a in out.attentions])
        assert found.maps["weights"].shape == expected.shape == (2, 4, len(ids), len(ids))
        worst = max(worst, float(np.abs(found.maps["weights"] - expected).max()))
        assert not np.triu(found.maps["weights"], k=1).any()  # row i sees keys 0..i only
        assert set(found.maps) == {"weights", "norm"}  # pre-LN: no LayerNorm lenses
    print(f"\nexample_maps against eager output_attentions: largest difference {worst:.1e}")
    assert worst < 1e-5


# ---------------------------------------------------------------- the report


def _data(spec: dict) -> list[dict]:
    return [row for rows in spec.get("datasets", {}).values() for row in rows]


def test_report_draws_decoders_apart_with_the_first_token_and_no_sep(warehouse):
    built = Warehouse(warehouse).build_report()
    charts = {c.id: c for c in built.charts()}
    sinks = _data(charts["chart-attention-sinks"].spec())
    tokens = {r["run_id"]: {row["token"] for row in sinks if row["run_id"] == r["run_id"]} for r in sinks}
    assert tokens == {DECODER_RUN: {"first token", "punctuation"}, ENCODER_RUN: {"[CLS]", "[SEP]", "punctuation"}}
    # The heatmaps: the encoder's six columns, then the decoder's grid of four, none of [SEP].
    heads = charts["chart-special-tokens-heads"].spec()
    encoder_grid, decoder_grid = heads["vconcat"]
    assert len(encoder_grid["hconcat"]) == 6 and len(decoder_grid["hconcat"]) == 4
    assert "no [SEP]" in decoder_grid["title"]["text"]
    titles = [column["title"]["text"] for column in decoder_grid["hconcat"]]
    assert [t[0] for t in titles] == ["first token", "first token", "punctuation", "punctuation"]
    for chart_id in ("chart-special-tokens-layers", "chart-context-mixing"):
        text = json.dumps(charts[chart_id].spec())
        rows = _data(charts[chart_id].spec())
        decoder_rows = [r for r in rows if r.get("run_id") == DECODER_RUN]
        assert decoder_rows and all(r["target"] in ("first token", "punctuation") for r in decoder_rows), chart_id
        assert all(r.get("value", r.get("share")) is not None for r in rows), chart_id  # no NULL drawn
        assert '"vconcat"' in text, chart_id
    # Pattern types of the decoder: a note in the section and in the findings.
    caption = charts["chart-pattern-types"].caption
    assert caption.startswith(f"Run {DECODER_RUN} is a decoder's") and "not validated" in caption
    notes = [f.text for f in built.findings.all() if "decoder" in f.text]
    assert len(notes) == 1 and "not validated" in notes[0]


def test_a_decoders_massive_activation_on_its_first_token_is_named_so(warehouse, tmp_path):
    """massive_activations stores the token in [CLS]'s place as '[CLS]' for every model; the
    query names it 'first token' on a decoder's run only, and the chart's letter is F."""
    from attnwh.reports.charts import massive_cells

    db = tmp_path / "w.duckdb"
    shutil.copy(warehouse, db)
    with duckdb.connect(str(db)) as con:
        for run_id in (DECODER_RUN, ENCODER_RUN):
            example_id = con.execute("SELECT min(example_id) FROM run_examples WHERE run_id = ?", [run_id]).fetchone()[
                0
            ]
            con.execute(
                "INSERT INTO massive_activations VALUES (?, ?, 1, 1, 5000.0, 3, 0, '[CLS]', 1.0)", [run_id, example_id]
            )
    frame = Warehouse(db).query("massive_activations")
    assert dict(frame.select("run_id", "token_kind").rows()) == {DECODER_RUN: "first token", ENCODER_RUN: "[CLS]"}
    assert dict(massive_cells(frame).select("run_id", "letter").rows()) == {DECODER_RUN: "F", ENCODER_RUN: "C"}


def test_the_special_tokens_title_names_what_the_covered_runs_have(warehouse):
    """[CLS] and [SEP] are named only where an encoder's run is covered; a decoder's first
    token only where a decoder's is: on the page, in its contents and in the head panel."""
    wh = Warehouse(warehouse)
    expected = {
        None: "Attention to [CLS], [SEP], the first token and punctuation",
        "prose": "Attention to the first token and punctuation",
        "pairs": "Attention to [CLS], [SEP] and punctuation",
    }
    for task, title in expected.items():
        built = wh.build_report(task=task)
        titles = {s.section.id: s.section.title for s in built.sections}
        assert titles["special-tokens"] == title, task
        assert built.head_panel is None or built.head_panel["sections"]["special-tokens"] == title


# ---------------------------------------------------------------- the API and the command


def test_api_reads_a_decoder_warehouse_and_refuses_in_one_line(warehouse, monkeypatch, capsys, tmp_path):
    wh = Warehouse(warehouse)
    kinds = wh.query("run_models").select("run_id", "causal", "sink_token", "num_key_value_heads").rows()
    assert kinds == [(DECODER_RUN, True, "first token", 2), (ENCODER_RUN, False, "[CLS]", 4)]
    means = wh.query("head_summary", task="prose")
    assert means.height == 2 * 4 and means["to_sep"].is_null().all() and means["to_next"].is_null().all()
    example = _examples(warehouse, DECODER_RUN)[0][0]
    page = wh.show(DECODER_RUN, example, layer=1)
    data = json.loads(page.html.split('id="show-data">', 1)[1].split("</script>", 1)[0])
    assert data["causal"] is True and data["groupSize"] == 2 and data["layer"] == 1
    assert "A decoder's map is a triangle" in page.html
    with pytest.raises(UsageError, match=r"no lens 'post_ln' for .*: it is a decoder \(pre-LN\)"):
        wh.show(DECODER_RUN, example, lens="post_ln")
    code, _, err = run(monkeypatch, capsys, "show", "--db", str(warehouse), "--run", str(DECODER_RUN),
                       "--example", str(example), "--lens", "block", "-o", str(tmp_path / "s.html"))  # fmt: skip
    lines = [line for line in err.splitlines() if line.strip()]
    assert code != 0 and len(lines) == 1 and "no lens 'block'" in lines[0] and "Traceback" not in err
    assert not (tmp_path / "s.html").exists()


# ---------------------------------------------------------------- in Chromium


def test_chromium_draws_the_sink_chart_and_a_triangle(browser, warehouse, tmp_path):  # noqa: F811
    """The report (without token maps, for time) draws its sink chart with a first-token column, and the show
    page's large map leaves its top-right cell grey (not part of a causal map), unlike the white
    of a weight of 0 or the blue of a share, while its bottom-left cell is coloured by share."""
    report = tmp_path / "report.html"
    cli_main("report", "--db", str(warehouse), "--out", str(report), "--no-token-maps")
    tab, log = open_offline(browser, report)
    tab.wait_for_selector("#chart-attention-sinks svg, #chart-attention-sinks canvas", timeout=20_000)
    sinks = tab.locator("#chart-attention-sinks").inner_html()
    assert "first token" in sinks and "[SEP]" in sinks  # both kinds of run, each with its own columns
    assert "first token" in tab.locator("#chart-special-tokens-heads").inner_html()
    assert not log["errors"] and not log["requests"], log
    tab.context.close()

    example = _examples(warehouse, DECODER_RUN)[0][0]
    show = Warehouse(warehouse).show(DECODER_RUN, example).save(tmp_path / "show.html")
    tab, log = open_offline(browser, show)
    tab.wait_for_selector("body[data-drawn]")
    canvas = tab.locator("#detail-map")
    assert canvas.get_attribute("data-causal") == "true"
    n, margin, cell = (float(canvas.get_attribute(a)) for a in ("data-tokens", "data-margin", "data-cell"))
    top_right, bottom_left = tab.evaluate(
        """([n, margin, cell]) => {
             const c = document.getElementById('detail-map'), r = window.devicePixelRatio || 1;
             const at = (i, j) => Array.from(c.getContext('2d').getImageData(
                 Math.round((margin + (j + 0.5) * cell) * r), Math.round((margin + (i + 0.5) * cell) * r), 1, 1).data);
             return [at(0, n - 1), at(n - 1, 0)];
           }""",
        [n, margin, cell],
    )
    grey = top_right[0] == top_right[1] == top_right[2]
    assert grey and 190 <= top_right[0] <= 245, top_right  # blank or hatch grey, never white (a weight of 0)
    assert bottom_left[2] > bottom_left[0], bottom_left  # a share: the Blues ramp
    assert not log["errors"] and not log["requests"], log
    tab.context.close()
