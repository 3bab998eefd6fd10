-- name: special_tokens_by_layer
-- title: Mean attention to [CLS], [SEP] and punctuation per model, task and layer, by weight and by value norm
-- params: model, task
-- One row per statistics run and layer; each value is the mean over the run's examples and
-- the layer's heads. norm_* weigh each attention weight by the norm of the head's transformed
-- value vector (Kobayashi et al. 2020).
SELECT
    m.name                         AS model,
    r.task,
    r.split,
    r.run_id,
    s.layer,
    avg(s.to_cls)                  AS to_cls,
    avg(s.to_sep)                  AS to_sep,
    avg(s.to_punct)                AS to_punct,
    avg(s.norm_to_cls)             AS norm_to_cls,
    avg(s.norm_to_sep)             AS norm_to_sep,
    avg(s.norm_to_punct)           AS norm_to_punct,
    count(DISTINCT s.example_id)   AS examples
FROM head_stats AS s
JOIN runs AS r USING (run_id)
JOIN models AS m USING (model_id)
WHERE ($model IS NULL OR m.name = $model)
  AND ($task IS NULL OR r.task = $task)
GROUP BY ALL
ORDER BY model, r.task, r.split, r.run_id, s.layer;
