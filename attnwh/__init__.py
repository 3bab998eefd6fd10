"""attnwh: an attention warehouse for transformers (encoders and causal language models).

`attnwh.ingest` runs encoders and decoders and writes per-head attention statistics into DuckDB,
`attnwh.sql` holds the warehouse schema and the named queries, `attnwh.reports` turns a
warehouse into HTML. Only `attnwh.ingest` imports torch, and only when a command needs it.
"""

__version__ = "0.1.0"
