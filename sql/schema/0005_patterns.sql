-- Attention pattern types (issue: pattern types per head; Kovaleva et al. 2019 Fig. 1).
-- Every head_stats row gets the features the rules read and the type they gave
-- (attnwh.ingest.patterns), a seeded sample of examples per run keeps 32 x 32 thumbnails of
-- every head's map, hand labels can be imported, and trained CNNs are kept with their
-- held-out scores.

-- The five types; head_stats.pattern and the other *pattern columns hold these codes.
CREATE TABLE pattern_types (
    pattern       SMALLINT PRIMARY KEY,
    name          VARCHAR NOT NULL UNIQUE
);
INSERT INTO pattern_types VALUES
    (0, 'heterogeneous'), (1, 'vertical'), (2, 'diagonal'), (3, 'vertical+diagonal'), (4, 'block');

-- Features of the map cropped to the real tokens; "band" = cells with |i - j| <= 1. Column
-- features leave the band out; the band counts keys that are neither special nor punctuation.
-- Rows written before this migration have NULLs.
ALTER TABLE head_stats ADD COLUMN col_cls REAL;    -- mass on the [CLS] column, off the band
ALTER TABLE head_stats ADD COLUMN col_sep REAL;    -- on all [SEP] columns, off the band
ALTER TABLE head_stats ADD COLUMN col_punct REAL;  -- on all punctuation columns, off the band
ALTER TABLE head_stats ADD COLUMN col_other REAL;  -- on the heaviest other single column, off the band
ALTER TABLE head_stats ADD COLUMN band REAL;       -- A[i,i-1] + A[i,i] + A[i,i+1] on ordinary keys
ALTER TABLE head_stats ADD COLUMN block REAL;      -- pairs: smaller segment's within-segment mass; 0 for single sentences
ALTER TABLE head_stats ADD COLUMN pattern SMALLINT; -- pattern_types code given by the rules

-- Per run × example (a seeded sample) × layer × head: the cropped n × n map resized to
-- 32 × 32 by adaptive average pooling (row-major, 1024 values), written in the same
-- transaction as the example's statistics. cnn_pattern is filled by
-- `attnwh patterns reclassify --classifier cnn` (cnn_model: which pattern_models row).
CREATE TABLE pattern_thumbnails (
    run_id        INTEGER NOT NULL,
    example_id    BIGINT NOT NULL,
    layer         SMALLINT NOT NULL,
    head          SMALLINT NOT NULL,
    n_tokens      INTEGER NOT NULL,
    thumbnail     FLOAT[] NOT NULL,
    cnn_pattern   SMALLINT,
    cnn_model     INTEGER,
    PRIMARY KEY (run_id, example_id, layer, head)
);

-- Hand labels (`attnwh patterns import-labels`): one type per map.
CREATE TABLE pattern_labels (
    run_id        INTEGER NOT NULL,
    example_id    BIGINT NOT NULL,
    layer         SMALLINT NOT NULL,
    head          SMALLINT NOT NULL,
    pattern       SMALLINT NOT NULL,
    source        VARCHAR,            -- the CSV file the label came from
    imported_at   TIMESTAMP NOT NULL DEFAULT current_timestamp,
    PRIMARY KEY (run_id, example_id, layer, head)
);

-- CNNs trained on thumbnails and labels (`attnwh patterns train`), with the held-out macro
-- F1 of the CNN and of the rules against the labels on the same held-out maps.
CREATE SEQUENCE pattern_model_ids START 1;
CREATE TABLE pattern_models (
    model_id      INTEGER PRIMARY KEY DEFAULT nextval('pattern_model_ids'),
    created_at    TIMESTAMP NOT NULL DEFAULT current_timestamp,
    seed          INTEGER NOT NULL,
    epochs        INTEGER NOT NULL,
    n_train       INTEGER NOT NULL,
    n_test        INTEGER NOT NULL,
    f1_cnn        DOUBLE NOT NULL,   -- macro F1 over the types present in the held-out labels
    f1_rules      DOUBLE NOT NULL,
    settings      JSON NOT NULL,
    weights       BLOB NOT NULL      -- torch.save of the state dict
);

-- Maps that have a pattern type, with the type's name.
CREATE VIEW head_patterns AS
SELECT s.run_id, s.example_id, s.layer, s.head, s.pattern, t.name AS pattern_name,
       s.col_cls, s.col_sep, s.col_punct, s.col_other, s.band, s.block
FROM head_stats AS s
JOIN pattern_types AS t USING (pattern);
