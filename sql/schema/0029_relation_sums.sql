-- Relations runs through the engine (`attnwh ingest relations`): a run's sentences are cut
-- into units, and each unit's running totals (the counts and sums behind dependency_heads,
-- dependency_baselines, feature_attention and frame_heads) are stored with the unit's done
-- marks, so an interrupted run resumes at the next unit, static shards (`--shard I/N`) merge
-- into the run and Ray computes it. Once every unit is stored, the totals are summed in the
-- units' order and the run's tables are written from them, in one transaction that also
-- deletes the run's rows here: they are working state, not results.

CREATE TABLE relation_sums (
    run_id      INTEGER NOT NULL,
    unit        VARCHAR NOT NULL,   -- the unit's name (its batch number, e.g. 000012)
    counts      VARCHAR NOT NULL,   -- dependencies | features | frames | run
    field       VARCHAR NOT NULL,   -- the running total, e.g. correct, sentence_sum, skipped
    key         VARCHAR NOT NULL,   -- its relation or feature; '' for one total per unit
    dtype       VARCHAR NOT NULL,   -- int64 | float64: what the values are summed as
    shape       INTEGER[] NOT NULL, -- e.g. [2, layers, heads]; [] for a number
    numbers     DOUBLE[] NOT NULL,  -- the values, row-major
    PRIMARY KEY (run_id, unit, counts, field, key)
);
COMMENT ON TABLE relation_sums IS 'Per relations run still being computed, unit and running total: the unit''s part of it (attnwh.ingest.runs.relations). Summed into the run''s tables when its last unit is stored, then deleted.';
COMMENT ON COLUMN relation_sums.run_id IS 'The relations run (runs.run_id) being computed.';
COMMENT ON COLUMN relation_sums.unit IS 'The unit of work the totals are of: its batch number (e.g. 000012), the same on every engine.';
COMMENT ON COLUMN relation_sums.counts IS 'Whose totals: dependencies (dependency_heads, dependency_baselines), features (feature_attention), frames (frame_heads), run (sentences skipped, annotations), filters (frame_filters).';
COMMENT ON COLUMN relation_sums.field IS 'The running total, e.g. correct, offsets, sentence_sum, skipped.';
COMMENT ON COLUMN relation_sums.key IS 'The relation or feature the total is of; empty for one total per unit.';
COMMENT ON COLUMN relation_sums.dtype IS 'int64 or float64: what the values are summed as.';
COMMENT ON COLUMN relation_sums.shape IS 'The array''s shape, e.g. [2, layers, heads]; [] for a number.';
COMMENT ON COLUMN relation_sums.numbers IS 'The values, row-major.';
