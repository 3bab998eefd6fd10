-- The default pattern classifier (attnwh.ingest.measures.pattern_model): a small network
-- trained on hand labels of real maps, reading the rules' features and features of how the map
-- looks when drawn scaled to its largest weight (intensity x = A / max A over the real cells).
-- The look features are computed on the device at ingest beside the rules' features, so that
-- `attnwh patterns reclassify` can apply either classifier without the model; NULL for rows
-- written before this migration (reclassify leaves those to the rules).

ALTER TABLE head_stats ADD COLUMN look_col_1 REAL;
ALTER TABLE head_stats ADD COLUMN look_col_2 REAL;
ALTER TABLE head_stats ADD COLUMN look_col_3 REAL;
ALTER TABLE head_stats ADD COLUMN look_col_median REAL;
ALTER TABLE head_stats ADD COLUMN look_col_mean REAL;
ALTER TABLE head_stats ADD COLUMN look_col_cover REAL;
ALTER TABLE head_stats ADD COLUMN look_cols_dark REAL;
ALTER TABLE head_stats ADD COLUMN look_prev REAL;
ALTER TABLE head_stats ADD COLUMN look_self REAL;
ALTER TABLE head_stats ADD COLUMN look_next REAL;
ALTER TABLE head_stats ADD COLUMN look_cls REAL;
ALTER TABLE head_stats ADD COLUMN look_background REAL;
ALTER TABLE head_stats ADD COLUMN look_dark_02 REAL;
ALTER TABLE head_stats ADD COLUMN look_dark_05 REAL;
ALTER TABLE head_stats ADD COLUMN look_dark_10 REAL;
ALTER TABLE head_stats ADD COLUMN look_dark_25 REAL;
ALTER TABLE head_stats ADD COLUMN look_dark_50 REAL;
ALTER TABLE head_stats ADD COLUMN look_within REAL;
ALTER TABLE head_stats ADD COLUMN look_across REAL;

COMMENT ON COLUMN head_stats.look_col_1 IS 'Look feature (x = A / max A): the mean intensity of the darkest column, 0..1; NULL for rows written before migration 13.';
COMMENT ON COLUMN head_stats.look_col_2 IS 'Look feature (x = A / max A): the mean intensity of the second darkest column, 0..1; NULL for rows written before migration 13.';
COMMENT ON COLUMN head_stats.look_col_3 IS 'Look feature (x = A / max A): the mean intensity of the third darkest column, 0..1; NULL for rows written before migration 13.';
COMMENT ON COLUMN head_stats.look_col_median IS 'Look feature (x = A / max A): the median column intensity over the real keys, 0..1; NULL for rows written before migration 13.';
COMMENT ON COLUMN head_stats.look_col_mean IS 'Look feature (x = A / max A): the mean column intensity, 0..1; NULL for rows written before migration 13.';
COMMENT ON COLUMN head_stats.look_col_cover IS 'Look feature (x = A / max A): the share of rows whose cell in the darkest column is at least 0.3, 0..1; NULL for rows written before migration 13.';
COMMENT ON COLUMN head_stats.look_cols_dark IS 'Look feature (x = A / max A): the share of columns whose mean intensity is above 0.2, 0..1; NULL for rows written before migration 13.';
COMMENT ON COLUMN head_stats.look_prev IS 'Look feature (x = A / max A): the mean intensity of A[i, i-1] (the diagonal below), 0..1; NULL for rows written before migration 13.';
COMMENT ON COLUMN head_stats.look_self IS 'Look feature (x = A / max A): the mean intensity of A[i, i] (the main diagonal), 0..1; NULL for rows written before migration 13.';
COMMENT ON COLUMN head_stats.look_next IS 'Look feature (x = A / max A): the mean intensity of A[i, i+1] (the diagonal above), 0..1; NULL for rows written before migration 13.';
COMMENT ON COLUMN head_stats.look_cls IS 'Look feature (x = A / max A): the mean intensity of the [CLS] column, 0..1; NULL for rows written before migration 13.';
COMMENT ON COLUMN head_stats.look_background IS 'Look feature (x = A / max A): the mean intensity off the band |i - j| <= 1, 0..1; NULL for rows written before migration 13.';
COMMENT ON COLUMN head_stats.look_dark_02 IS 'Look feature (x = A / max A): the share of cells above 0.02, 0..1; NULL for rows written before migration 13.';
COMMENT ON COLUMN head_stats.look_dark_05 IS 'Look feature (x = A / max A): the share of cells above 0.05, 0..1; NULL for rows written before migration 13.';
COMMENT ON COLUMN head_stats.look_dark_10 IS 'Look feature (x = A / max A): the share of cells above 0.1, 0..1; NULL for rows written before migration 13.';
COMMENT ON COLUMN head_stats.look_dark_25 IS 'Look feature (x = A / max A): the share of cells above 0.25, 0..1; NULL for rows written before migration 13.';
COMMENT ON COLUMN head_stats.look_dark_50 IS 'Look feature (x = A / max A): the share of cells above 0.5, 0..1; NULL for rows written before migration 13.';
COMMENT ON COLUMN head_stats.look_within IS 'Look feature (x = A / max A), sentence pairs: the mean intensity between ordinary tokens of the same sentence; 0 for single sentences, 0..1; NULL for rows written before migration 13.';
COMMENT ON COLUMN head_stats.look_across IS 'Look feature (x = A / max A), sentence pairs: the mean intensity between ordinary tokens of different sentences; 0 for single sentences, 0..1; NULL for rows written before migration 13.';

COMMENT ON COLUMN head_stats.pattern IS 'Pattern type (pattern_types.pattern): at ingest by the shipped classifier trained on hand labels of real maps (rows written before migration 13: by the rules); attnwh patterns reclassify rewrites it with either. NULL for rows written before migration 5.';
COMMENT ON COLUMN head_stats.pattern_margin IS 'How sure the type is, near 0 = borderline: for the shipped classifier the gap between its two largest type probabilities (0..1), for the rules the smallest distance of the scores V, D (and B for pairs) to a threshold they are compared with. NULL for rows written before margins were kept.';
COMMENT ON COLUMN head_stats_named.pattern IS 'Pattern type by name (head_stats.pattern): heterogeneous | vertical | diagonal | vertical+diagonal | block; NULL for rows written before migration 5.';
COMMENT ON COLUMN head_stats_named.pattern_margin IS 'How sure the type is (head_stats.pattern_margin): near 0 = borderline.';
COMMENT ON COLUMN head_patterns.pattern IS 'Type code as stored in head_stats.pattern (pattern_types.pattern).';
COMMENT ON COLUMN head_patterns_named.pattern IS 'Stored type (head_stats.pattern), by name: heterogeneous | vertical | diagonal | vertical+diagonal | block; NULL if the map has none.';
COMMENT ON VIEW head_patterns IS 'head_stats rows that have a pattern type, with the type''s name and the rules'' features.';
COMMENT ON VIEW head_patterns_named IS 'Every map (statistics run, example, layer, head) that has a stored pattern type, a CNN''s type or a hand label, each type by name, with the run''s model, family, dataset, task and split and the features the rules read.';
