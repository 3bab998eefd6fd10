-- name: dependency_heads
-- title: The best head per model, relation and direction for dependency relations, next to the best fixed-offset baseline
-- params: model, relation, run
-- One row per relations run, dependency relation and direction (Clark et al. 2019 Table 2):
-- the head whose most-attended word is most often the dependency's head (dep_to_head) or
-- dependent (head_to_dep), its accuracy, and that direction's best-offset baseline;
-- dependencies: how many the direction saw. On a decoder a direction sees only the
-- dependencies whose target precedes the attending word (the two directions' counts add up to
-- the relation's), and a direction that saw none of a relation has no row. model is a model
-- name as stored; relation a deprel without subtype (nsubj, det, ...); run a run_id; NULL = all.
WITH best AS (
    SELECT
        m.name        AS model,
        r.dataset,
        r.run_id,
        h.relation,
        h.direction,
        h.layer,
        h.head,
        h.accuracy,
        h.total
    FROM dependency_heads AS h
    JOIN runs AS r USING (run_id)
    JOIN models AS m USING (model_id)
    WHERE r.kind = 'relations'
      AND ($model IS NULL OR m.name = $model)
      AND ($relation IS NULL OR h.relation = $relation)
      AND ($run IS NULL OR h.run_id = $run)
      AND h.total > 0
    QUALIFY row_number() OVER (
        PARTITION BY h.run_id, h.relation, h.direction ORDER BY h.accuracy DESC, h.layer, h.head
    ) = 1
)
SELECT
    best.model,
    best.dataset,
    best.run_id,
    best.relation,
    best.direction,
    best.layer,
    best.head,
    round(best.accuracy, 4)                AS accuracy,
    b.best_offset                          AS baseline_offset,
    round(b.accuracy, 4)                   AS baseline_accuracy,
    round(best.accuracy - b.accuracy, 4)   AS gain,
    best.total                             AS dependencies
FROM best
JOIN dependency_baselines AS b USING (run_id, relation, direction)
ORDER BY best.model, best.dataset, best.run_id, dependencies DESC, best.relation, best.direction;
