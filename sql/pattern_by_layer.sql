-- name: pattern_by_layer
-- title: Share of each attention pattern type per model, task and layer
-- params: model, task, classifier
-- One row per statistics run, layer and pattern type: the number of (example, head) maps of
-- the layer with that type and their share of the layer's maps. classifier as in
-- pattern_frequency ('stored', the default, or 'cnn'); model is a model name; NULL = all.
WITH labelled AS (
    SELECT run_id, layer, pattern FROM head_stats
    WHERE coalesce($classifier, 'stored') = 'stored' AND pattern IS NOT NULL
    UNION ALL
    SELECT run_id, layer, cnn_pattern FROM pattern_thumbnails
    WHERE $classifier = 'cnn' AND cnn_pattern IS NOT NULL
), counted AS (
    SELECT m.name AS model, r.task, r.split, r.run_id, l.layer, l.pattern, count(*) AS maps
    FROM labelled AS l
    JOIN runs AS r USING (run_id)
    JOIN models AS m USING (model_id)
    WHERE r.kind = 'statistics'
      AND ($model IS NULL OR m.name = $model)
      AND ($task IS NULL OR r.task = $task)
    GROUP BY ALL
), layer_list AS (
    SELECT DISTINCT model, task, split, run_id, layer FROM counted
)
SELECT
    g.model,
    g.task,
    g.split,
    g.run_id,
    g.layer,
    t.name                                                              AS pattern,
    coalesce(c.maps, 0)                                                 AS maps,
    coalesce(c.maps, 0) / sum(coalesce(c.maps, 0)) OVER (PARTITION BY g.run_id, g.layer) AS share
FROM layer_list AS g
CROSS JOIN pattern_types AS t
LEFT JOIN counted AS c ON c.run_id = g.run_id AND c.layer = g.layer AND c.pattern = t.pattern
ORDER BY g.model, g.task, g.split, g.run_id, g.layer, t.pattern;
