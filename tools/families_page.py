"""Write docs/families.md from the census (tests/test_census.py): every family transformers maps
to a causal language model, built tiny from its own config class, and whether attnwh reads it
exactly, refuses it (and why) or the tiny model could not be built.

    python tools/families_page.py            # runs the census (a few minutes on 2 cores)

The census test checks the page against what it finds, so rerun this when transformers changes.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import transformers
from transformers.models.auto.modeling_auto import MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING_NAMES

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "families.md"

INTRO = """# Which language models attnwh reads

attnwh reads a causal language model by what its attention is, not by its name: any family
transformers maps to a causal language model whose softmax attention goes through
transformers' attention interface. When a model loads, one probe input runs through attnwh's
attention function and through the family's own eager attention, and the model is read only
where the two give the same maps, one per query head, every row summing to 1 (or to 1 less a
learned sink's share), causal, with every softmax attention layer observed. Anything else is
refused in one line that names the module and what differs, before anything is written
([decoders](decoders.md#any-language-model)).

The table is the census the tests run on every family of the installed transformers
(`tests/test_census.py`): each built tiny from its own config class (widths, layers and experts
shrunk; sliding windows, chunks, sinks and hybrid layers left on), a right-padded batch of three
inputs read by attnwh and every stored statistic compared with a reference recomputed one input
at a time from the family's eager attention, within 1e-5. *read* means exactly that; *refused*
gives attnwh's one line; *not built* means transformers itself could not build or run the tiny
model from the shrunk config (not a verdict on the real model).

Every analysis runs on a family that is read, with two exceptions. A hybrid (some layers not
softmax attention) refuses the analyses that need every layer in one line: value zeroing,
relations and the sweep of a fine-tuned classifier. `attnwh finetune` trains the family's
`…ForSequenceClassification` class: where transformers has none (the last column), it refuses
in one line before any weights load.

"""

OUTRO = """
## On a real model

With access to the Hugging Face hub (or the model in its cache), any model of a family read
above is read the same way, at any size: the check at load runs on the real weights.

```sh
attnwh ingest --model openai/gpt-oss-20b --task prose --max-length 2048     # learned sinks
attnwh ingest --model Qwen/Qwen3-30B-A3B --task prose                      # mixture of experts
attnwh ingest --model Qwen/Qwen3-Next-80B-A3B-Instruct --task prose        # hybrid: 1 layer in 4 read
attnwh ingest roles --model deepseek-ai/DeepSeek-V2-Lite                    # latent attention
```

`attnwh sql "SELECT * FROM model_layers WHERE model_id = 1"` lists every layer of a model as
the check found it: which are read, their kind, window, chunk, rotary positions, output gate
and learned sink.
"""


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "census.json"
        env = {**os.environ, "ATTNWH_CENSUS_OUT": str(out), "HF_HUB_OFFLINE": "1"}
        subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(ROOT / "tests" / "test_census.py")],
            cwd=ROOT,
            env=env,
            check=False,
        )
        if not out.exists():
            raise SystemExit("the census did not finish: no outcomes written")
        outcomes: dict[str, str] = json.loads(out.read_text(encoding="utf-8"))
    counts = {kind: sum(o.startswith(kind) for o in outcomes.values()) for kind in ("read", "refused", "not built")}
    built = counts["read"] + counts["refused"]
    lines = [
        INTRO,
        f"transformers {transformers.__version__}: {len(outcomes)} families; {built} built tiny and ran, of which "
        f"attnwh reads **{counts['read']}** exactly and refuses {counts['refused']}; {counts['not built']} "
        "could not be built tiny.\n",
        "| family | outcome | what the census found | `attnwh finetune` |",
        "| --- | --- | --- | --- |",
    ]
    for family, outcome in sorted(outcomes.items()):
        kind, _, detail = outcome.partition(": ")
        classifier = MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING_NAMES.get(family)
        tuned = f"`{classifier}`" if classifier else "no classifier class"
        lines.append(f"| `{family}` | {kind} | {detail.replace('|', '/')} | {tuned} |")
    PAGE.write_text("\n".join(lines) + "\n" + OUTRO, encoding="utf-8")
    print(f"{PAGE.relative_to(ROOT)}: {counts}")


if __name__ == "__main__":
    main()
