-- Real attention maps for labelling by eye (`attnwh patterns label`): for the examples of a
-- statistics run's thumbnail sample that have at most 64 real tokens, every head's map cropped
-- to the real tokens, and the tokens themselves, so that a labelling page can draw the map a
-- person judges (not only its 32 x 32 thumbnail) with its tokens on the axes. Written in the
-- same transaction as the example's statistics; runs ingested before this migration have none
-- (their pages fall back to the thumbnails).

CREATE TABLE pattern_maps (
    run_id        INTEGER NOT NULL,
    example_id    BIGINT NOT NULL,
    layer         SMALLINT NOT NULL,
    head          SMALLINT NOT NULL,
    n_tokens      INTEGER NOT NULL,
    attention     FLOAT[] NOT NULL,   -- n_tokens x n_tokens, row-major: row = query, column = key
    PRIMARY KEY (run_id, example_id, layer, head)
);

CREATE TABLE example_tokens (
    run_id        INTEGER NOT NULL,
    example_id    BIGINT NOT NULL,
    tokens        VARCHAR[] NOT NULL, -- the real tokens as the tokenizer wrote them, specials included
    PRIMARY KEY (run_id, example_id)
);

COMMENT ON TABLE pattern_maps IS 'Per statistics run, thumbnail-sample example with at most 64 real tokens, layer and head: the attention map cropped to the real tokens, for labelling pattern types by eye (attnwh patterns label).';
COMMENT ON COLUMN pattern_maps.run_id IS 'The statistics run (runs.run_id).';
COMMENT ON COLUMN pattern_maps.example_id IS 'The example (examples.example_id).';
COMMENT ON COLUMN pattern_maps.layer IS 'Layer, 0-based.';
COMMENT ON COLUMN pattern_maps.head IS 'Head within the layer, 0-based.';
COMMENT ON COLUMN pattern_maps.n_tokens IS 'Real tokens n of the example, [CLS] and [SEP] included: the map is n × n.';
COMMENT ON COLUMN pattern_maps.attention IS 'The n × n attention weights, row-major: element i·n + j is the weight of query token i on key token j (each row sums to 1).';
COMMENT ON TABLE example_tokens IS 'Per statistics run and example of pattern_maps: the tokens the model saw, for the axes of a labelling page.';
COMMENT ON COLUMN example_tokens.run_id IS 'The statistics run (runs.run_id).';
COMMENT ON COLUMN example_tokens.example_id IS 'The example (examples.example_id).';
COMMENT ON COLUMN example_tokens.tokens IS 'The real tokens in order, as the tokenizer spells them ([CLS] and [SEP] included); position i is row and column i of the maps.';

-- Named threshold sets of the pattern rules fitted to hand labels (`attnwh patterns
-- calibrate`), applied with `attnwh patterns reclassify --thresholds NAME`. The name
-- 'default' stands for the thresholds attnwh ships with and is never stored.
CREATE TABLE pattern_thresholds (
    name            VARCHAR PRIMARY KEY,
    created_at      TIMESTAMP NOT NULL DEFAULT current_timestamp,
    vertical        DOUBLE NOT NULL,
    diagonal        DOUBLE NOT NULL,
    mixed_vertical  DOUBLE NOT NULL,
    mixed_diagonal  DOUBLE NOT NULL,
    block           DOUBLE NOT NULL,
    n_labels        INTEGER NOT NULL,
    folds           INTEGER NOT NULL,
    seed            INTEGER NOT NULL,
    cv_macro_f1     DOUBLE NOT NULL,
    cv_agreement    DOUBLE NOT NULL
);

COMMENT ON TABLE pattern_thresholds IS 'Named threshold sets of the pattern rules, fitted to the hand labels in pattern_labels by attnwh patterns calibrate (macro-F1 under seeded k-fold cross-validation); applied by attnwh patterns reclassify --thresholds NAME.';
COMMENT ON COLUMN pattern_thresholds.name IS 'The set''s name (default is reserved for the shipped thresholds).';
COMMENT ON COLUMN pattern_thresholds.created_at IS 'When the set was fitted.';
COMMENT ON COLUMN pattern_thresholds.vertical IS 'Rule 1: vertical when V = col_cls + col_sep + col_punct + col_other is at least this (and D below mixed_diagonal).';
COMMENT ON COLUMN pattern_thresholds.diagonal IS 'Rule 2: diagonal when D = band is at least this (and V below mixed_vertical).';
COMMENT ON COLUMN pattern_thresholds.mixed_vertical IS 'Rule 4: vertical+diagonal when V is at least this and D at least mixed_diagonal.';
COMMENT ON COLUMN pattern_thresholds.mixed_diagonal IS 'See mixed_vertical.';
COMMENT ON COLUMN pattern_thresholds.block IS 'Rule 3: block when B = block is at least this (pairs; V below vertical, D below diagonal).';
COMMENT ON COLUMN pattern_thresholds.n_labels IS 'Hand-labelled maps the set was fitted to.';
COMMENT ON COLUMN pattern_thresholds.folds IS 'k of the cross-validation that scored the fitting.';
COMMENT ON COLUMN pattern_thresholds.seed IS 'Seed of the folds.';
COMMENT ON COLUMN pattern_thresholds.cv_macro_f1 IS 'Macro-F1 against the labels of held-out predictions, thresholds fitted on the other folds each time.';
COMMENT ON COLUMN pattern_thresholds.cv_agreement IS 'Share of labelled maps whose held-out prediction equals the label.';

-- How near each map is to getting another type from the rules (docs: attnwh.ingest.measures.
-- patterns.margins): written at ingest with the type, rewritten by `attnwh patterns
-- reclassify --classifier rules`; NULL for rows written before this migration.
ALTER TABLE head_stats ADD COLUMN pattern_margin REAL;
COMMENT ON COLUMN head_stats.pattern_margin IS 'How near the map is to another type under the rules that gave pattern: the smallest distance of its scores V, D (and B for pairs) to a threshold they are compared with; near 0 = borderline, large = typical. NULL for rows written before margins were kept.';

-- head_stats_named shows the margin beside the type; replacing the view drops its comments,
-- so they are set again here.
CREATE OR REPLACE VIEW head_stats_named AS
SELECT
    m.name                       AS model,
    m.family,
    r.dataset,
    r.task,
    r.split,
    s.run_id,
    s.example_id,
    s.layer,
    s.head,
    s.to_cls,
    s.to_sep,
    s.to_punct,
    s.to_self,
    s.to_prev,
    s.to_next,
    s.entropy,
    s.max_weight,
    s.norm_to_cls,
    s.norm_to_sep,
    s.norm_to_punct,
    s.col_cls,
    s.col_sep,
    s.col_punct,
    s.col_other,
    s.band,
    s.block,
    t.name                       AS pattern,
    s.pattern_margin
FROM head_stats AS s
JOIN runs AS r ON r.run_id = s.run_id
JOIN models AS m ON m.model_id = r.model_id
LEFT JOIN pattern_types AS t ON t.pattern = s.pattern;
COMMENT ON VIEW head_stats_named IS 'Every head_stats row (one per statistics run, example, layer and head) with its run''s model, family, dataset, task and split, and the pattern type by name: per-example statistics without a join.';
COMMENT ON COLUMN head_stats_named.model IS 'Model name (models.name): hub name or local path.';
COMMENT ON COLUMN head_stats_named.family IS 'Model family (models.family): bert, roberta, ...';
COMMENT ON COLUMN head_stats_named.dataset IS 'Dataset of the run''s examples (runs.dataset).';
COMMENT ON COLUMN head_stats_named.task IS 'Task (runs.task).';
COMMENT ON COLUMN head_stats_named.split IS 'Split (runs.split).';
COMMENT ON COLUMN head_stats_named.run_id IS 'The statistics run (runs.run_id).';
COMMENT ON COLUMN head_stats_named.example_id IS 'The example (examples.example_id).';
COMMENT ON COLUMN head_stats_named.layer IS 'Layer, 0-based.';
COMMENT ON COLUMN head_stats_named.head IS 'Head within the layer, 0-based.';
COMMENT ON COLUMN head_stats_named.to_cls IS 'Mean over query rows of the weight on [CLS] (0..1).';
COMMENT ON COLUMN head_stats_named.to_sep IS 'Mean over query rows of the total weight on all [SEP] positions (0..1).';
COMMENT ON COLUMN head_stats_named.to_punct IS 'Mean over query rows of the total weight on punctuation tokens (0..1).';
COMMENT ON COLUMN head_stats_named.to_self IS 'Mean over query rows of A[i, i], the weight a token gives itself (0..1).';
COMMENT ON COLUMN head_stats_named.to_prev IS 'Mean over query rows of A[i, i-1], the weight on the previous token (0 for the first row).';
COMMENT ON COLUMN head_stats_named.to_next IS 'Mean over query rows of A[i, i+1], the weight on the next token (0 for the last real row).';
COMMENT ON COLUMN head_stats_named.entropy IS 'Mean over query rows of the entropy of the row''s weights, in nats.';
COMMENT ON COLUMN head_stats_named.max_weight IS 'Mean over query rows of the row''s largest weight (0..1).';
COMMENT ON COLUMN head_stats_named.norm_to_cls IS 'Norm-weighted share of the head''s output from [CLS], 0..1 (head_stats.norm_to_cls; Kobayashi et al. 2020).';
COMMENT ON COLUMN head_stats_named.norm_to_sep IS 'Norm-weighted share from all [SEP] positions, 0..1 (head_stats.norm_to_sep).';
COMMENT ON COLUMN head_stats_named.norm_to_punct IS 'Norm-weighted share from punctuation tokens, 0..1 (head_stats.norm_to_punct).';
COMMENT ON COLUMN head_stats_named.col_cls IS 'Pattern feature: weight on the [CLS] column off the band (head_stats.col_cls); NULL for rows written before migration 5.';
COMMENT ON COLUMN head_stats_named.col_sep IS 'Pattern feature: weight on the [SEP] columns off the band (head_stats.col_sep).';
COMMENT ON COLUMN head_stats_named.col_punct IS 'Pattern feature: weight on the punctuation columns off the band (head_stats.col_punct).';
COMMENT ON COLUMN head_stats_named.col_other IS 'Pattern feature: weight on the heaviest other single column off the band (head_stats.col_other).';
COMMENT ON COLUMN head_stats_named.band IS 'Pattern feature: weight on the diagonal band |i - j| <= 1 (head_stats.band).';
COMMENT ON COLUMN head_stats_named.block IS 'Pattern feature: within-segment weight of sentence pairs, 0 for single sentences (head_stats.block).';
COMMENT ON COLUMN head_stats_named.pattern IS 'Pattern type given by the rules, by name: heterogeneous | vertical | diagonal | vertical+diagonal | block; NULL for rows written before migration 5.';
COMMENT ON COLUMN head_stats_named.pattern_margin IS 'How near the map is to another type under the rules (head_stats.pattern_margin): near 0 = borderline.';
