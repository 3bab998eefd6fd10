-- Relations runs (`attnwh ingest relations`) on decoders (causal language models), where a
-- word sees only earlier words (docs/metrics.md#relations-on-decoders). Each direction of a
-- dependency is then measured only where its target precedes the attending word: the two
-- directions of one relation have their own totals and their own fixed-offset baseline.
--
-- dependency_heads: on a decoder `total` counts the dependencies that direction could see
-- (dep_to_head: head before the dependent; head_to_dep: dependent before the head), and
-- `accuracy` is NULL, not 0, where it saw none. Encoder runs are unchanged.
ALTER TABLE dependency_heads ALTER COLUMN accuracy DROP NOT NULL;

-- dependency_baselines: one row per relation and direction (it was one per relation, the
-- dep_to_head guess). best_offset is the target's offset from the attending word (dep_to_head:
-- head - dependent; head_to_dep: dependent - head). On an encoder both directions see every
-- dependency, so the head_to_dep row of a stored run is its dep_to_head row mirrored: the same
-- counts, the offset negated (the tie rule, nearest then head left of the dependent, picks
-- exactly that offset).
CREATE TABLE dependency_baselines_by_direction (
    run_id        INTEGER NOT NULL,
    relation      VARCHAR NOT NULL,
    direction     VARCHAR NOT NULL,   -- dep_to_head | head_to_dep
    best_offset   SMALLINT,           -- NULL where the direction saw no dependency
    correct       INTEGER NOT NULL,
    total         INTEGER NOT NULL,
    accuracy      DOUBLE,             -- NULL where total = 0
    PRIMARY KEY (run_id, relation, direction)
);
INSERT INTO dependency_baselines_by_direction
SELECT run_id, relation, 'dep_to_head', best_offset, correct, total, accuracy FROM dependency_baselines;
INSERT INTO dependency_baselines_by_direction
SELECT run_id, relation, 'head_to_dep', -best_offset, correct, total, accuracy FROM dependency_baselines;
DROP TABLE dependency_baselines;
ALTER TABLE dependency_baselines_by_direction RENAME TO dependency_baselines;

COMMENT ON TABLE dependency_baselines IS 'Per relations run, relation and direction: the best fixed-offset guess of the target word (the head for dep_to_head, the dependent for head_to_dep) and its accuracy (docs/metrics.md#offset-baseline).';
COMMENT ON COLUMN dependency_baselines.run_id IS 'The relations run (runs.run_id).';
COMMENT ON COLUMN dependency_baselines.relation IS 'Universal Dependencies relation without subtype.';
COMMENT ON COLUMN dependency_baselines.direction IS 'dep_to_head: guessing the head from the dependent; head_to_dep: the dependent from the head (as dependency_heads.direction).';
COMMENT ON COLUMN dependency_baselines.best_offset IS 'The offset k in -5..5 (not 0) of the target from the attending word that is most often right; negative = to the left. On a decoder only -5..-1 (a row sees no later word); NULL where the direction saw no dependency.';
COMMENT ON COLUMN dependency_baselines.correct IS 'Dependencies the offset guess got right.';
COMMENT ON COLUMN dependency_baselines.total IS 'Dependencies of this relation the direction saw: all of them on an encoder; on a decoder those whose target precedes the attending word.';
COMMENT ON COLUMN dependency_baselines.accuracy IS 'correct / total (0..1); NULL where total = 0.';

COMMENT ON COLUMN dependency_heads.total IS 'Dependencies of this relation the direction saw: all of them on an encoder; on a decoder those whose target precedes the attending word (dep_to_head: head before the dependent; head_to_dep: dependent before the head), so the two directions'' totals add up to the relation''s dependencies.';
COMMENT ON COLUMN dependency_heads.accuracy IS 'correct / total (0..1); NULL where total = 0 (a decoder''s direction that saw no dependency of the relation).';
COMMENT ON COLUMN frame_heads.n_annotations IS 'Annotations in this direction''s mean: all measured ones on an encoder; on a decoder those with a link pair whose attended word comes first (every one for either).';
