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
