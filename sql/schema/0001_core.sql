-- Core warehouse: models, examples, runs, and one row of attention statistics per
-- run x example x layer x head. Relationships are by id (no FOREIGN KEY clauses: DuckDB
-- rewrites some updates of referenced rows as delete + insert and would refuse them).

CREATE SEQUENCE model_ids START 1;

CREATE TABLE models (
    model_id      INTEGER PRIMARY KEY DEFAULT nextval('model_ids'),
    name          VARCHAR NOT NULL,   -- hub name or local path, as given
    revision      VARCHAR,            -- hub commit, when loaded from the hub
    weights_hash  VARCHAR NOT NULL,   -- blake2b of the parameters as loaded
    family        VARCHAR NOT NULL,   -- config.model_type: bert, roberta, ...
    architecture  VARCHAR NOT NULL,   -- the transformers class loaded
    num_layers    INTEGER NOT NULL,
    num_heads     INTEGER NOT NULL,
    hidden_size   INTEGER NOT NULL,
    max_length    INTEGER NOT NULL,   -- longest input the model accepts, in tokens
    added_at      TIMESTAMP NOT NULL DEFAULT current_timestamp,
    UNIQUE (name, weights_hash)
);

-- example_id is a hash of (dataset, task, split, position, texts, label), so the same
-- example gets the same id in every run and every file.
CREATE TABLE examples (
    example_id    BIGINT PRIMARY KEY,
    dataset       VARCHAR NOT NULL,   -- glue, sample, a datasets name, or a file name
    task          VARCHAR NOT NULL,
    split         VARCHAR NOT NULL,
    position      INTEGER NOT NULL,   -- row index within the source split
    guid          VARCHAR,            -- the source's own id, when it has one
    text_a        VARCHAR NOT NULL,
    text_b        VARCHAR,
    label         VARCHAR,            -- as written in the source
    label_id      INTEGER             -- index into the task's label names; NULL for regression
);

CREATE SEQUENCE run_ids START 1;

CREATE TABLE runs (
    run_id        INTEGER PRIMARY KEY DEFAULT nextval('run_ids'),
    kind          VARCHAR NOT NULL,   -- 'statistics'
    run_key       VARCHAR NOT NULL UNIQUE, -- hash of everything that determines the rows; a rerun with the same key resumes
    model_id      INTEGER NOT NULL,
    dataset       VARCHAR NOT NULL,
    task          VARCHAR NOT NULL,
    split         VARCHAR NOT NULL,
    source        VARCHAR NOT NULL,   -- where the examples were read from
    example_limit INTEGER,            -- --limit, NULL for the whole split
    seed          INTEGER NOT NULL,   -- seed of the --limit sample
    max_length    INTEGER NOT NULL,
    n_examples    INTEGER NOT NULL,
    n_truncated   INTEGER NOT NULL,
    device        VARCHAR NOT NULL,
    dtype         VARCHAR NOT NULL,
    batch_size    INTEGER NOT NULL,
    versions      JSON NOT NULL,      -- attnwh, torch, transformers, duckdb, python
    command       VARCHAR,            -- the command line that started the run
    status        VARCHAR NOT NULL,   -- running | interrupted | failed | complete
    started_at    TIMESTAMP NOT NULL,
    finished_at   TIMESTAMP,
    seconds       DOUBLE              -- model time, summed over resumed sessions
);

-- Per run and example: how the tokenizer saw it.
CREATE TABLE run_examples (
    run_id        INTEGER NOT NULL,
    example_id    BIGINT NOT NULL,
    n_tokens      INTEGER NOT NULL,   -- tokens the model saw, specials included
    n_tokens_full INTEGER NOT NULL,   -- tokens before truncation
    truncated     BOOLEAN NOT NULL,
    PRIMARY KEY (run_id, example_id)
);

-- docs/metrics.md#head-statistics; every value is a mean over the example's real query rows.
CREATE TABLE head_stats (
    run_id        INTEGER NOT NULL,
    example_id    BIGINT NOT NULL,
    layer         SMALLINT NOT NULL,  -- 0-based
    head          SMALLINT NOT NULL,  -- 0-based
    to_cls        REAL NOT NULL,
    to_sep        REAL NOT NULL,      -- summed over all [SEP] positions
    to_punct      REAL NOT NULL,
    to_self       REAL NOT NULL,
    to_prev       REAL NOT NULL,
    to_next       REAL NOT NULL,
    entropy       REAL NOT NULL,      -- nats
    max_weight    REAL NOT NULL,
    norm_to_cls   REAL NOT NULL,      -- Kobayashi: weights scaled by ||f_h(x_j)||
    norm_to_sep   REAL NOT NULL,
    norm_to_punct REAL NOT NULL
);
