-- name: pattern_frequency
-- title: Share of each attention pattern type per model and task (Kovaleva et al. Fig. 2)
-- params: model, task, classifier
-- One row per statistics run and pattern type: how many of the run's (example, layer, head)
-- maps have that type, and their share of the run's maps. classifier 'rules' (the default)
-- reads head_stats.pattern, every map of the run; 'cnn' reads the labels a trained CNN gave
-- the stored thumbnails (`attnwh patterns reclassify --classifier cnn`), a seeded sample of
-- examples. model is a model name as stored; NULL = all.
WITH labelled AS (
    SELECT run_id, pattern FROM head_stats
    WHERE coalesce($classifier, 'rules') = 'rules' AND pattern IS NOT NULL
    UNION ALL
    SELECT run_id, cnn_pattern FROM pattern_thumbnails
    WHERE $classifier = 'cnn' AND cnn_pattern IS NOT NULL
), counted AS (
    SELECT m.name AS model, r.task, r.split, r.run_id, l.pattern, count(*) AS maps
    FROM labelled AS l
    JOIN runs AS r USING (run_id)
    JOIN models AS m USING (model_id)
    WHERE r.kind = 'statistics'
      AND ($model IS NULL OR m.name = $model)
      AND ($task IS NULL OR r.task = $task)
    GROUP BY ALL
), run_list AS (
    SELECT DISTINCT model, task, split, run_id FROM counted
)
SELECT
    r.model,
    r.task,
    r.split,
    r.run_id,
    t.name                                                              AS pattern,
    coalesce(c.maps, 0)                                                 AS maps,
    coalesce(c.maps, 0) / sum(coalesce(c.maps, 0)) OVER (PARTITION BY r.run_id) AS share
FROM run_list AS r
CROSS JOIN pattern_types AS t
LEFT JOIN counted AS c ON c.run_id = r.run_id AND c.pattern = t.pattern
ORDER BY r.model, r.task, r.split, r.run_id, t.pattern;
