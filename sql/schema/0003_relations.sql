-- Dependency relations (issue: which heads track linguistic relations; Clark et al. 2019 §4).
-- One `attnwh ingest relations` run (runs.kind = 'relations', task = 'dependencies') writes
-- per-head accuracies and a per-relation offset baseline, all in one transaction.

-- Per run, relation (deprel without subtype), direction, layer and head: how often the word
-- the dependent attends to most (itself excluded) is its head ('dep_to_head'), or the word the
-- head attends to most is the dependent ('head_to_dep'). Root is not counted.
CREATE TABLE dependency_heads (
    run_id        INTEGER NOT NULL,
    relation      VARCHAR NOT NULL,
    direction     VARCHAR NOT NULL,   -- dep_to_head | head_to_dep
    layer         SMALLINT NOT NULL,
    head          SMALLINT NOT NULL,
    correct       INTEGER NOT NULL,
    total         INTEGER NOT NULL,   -- dependencies of this relation in the run
    accuracy      DOUBLE NOT NULL,
    PRIMARY KEY (run_id, relation, direction, layer, head)
);

-- Per run and relation: the best fixed-offset predictor of the head (the word k positions
-- from the dependent, k in -5..5 except 0) and its accuracy.
CREATE TABLE dependency_baselines (
    run_id        INTEGER NOT NULL,
    relation      VARCHAR NOT NULL,
    best_offset   SMALLINT NOT NULL,
    correct       INTEGER NOT NULL,
    total         INTEGER NOT NULL,
    accuracy      DOUBLE NOT NULL,
    PRIMARY KEY (run_id, relation)
);
