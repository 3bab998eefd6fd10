-- name: special_tokens_by_head
-- title: Mean attention to [CLS], [SEP] and punctuation per run, layer and head, by weight and by value norm
-- params: model, task
-- One row per statistics run, layer and head (the heatmaps of Kovaleva et al. Fig. 6 and
-- Clark et al. Fig. 2); each value is the mean over the run's examples. Runs stay apart
-- (run_id) so two runs of one model on one task are never averaged together.
SELECT
    r.run_id,
    m.name                         AS model,
    r.task,
    r.split,
    s.layer,
    s.head,
    avg(s.to_cls)                  AS to_cls,
    avg(s.to_sep)                  AS to_sep,
    avg(s.to_punct)                AS to_punct,
    avg(s.norm_to_cls)             AS norm_to_cls,
    avg(s.norm_to_sep)             AS norm_to_sep,
    avg(s.norm_to_punct)           AS norm_to_punct,
    count(*)                       AS examples
FROM head_stats AS s
JOIN runs AS r USING (run_id)
JOIN models AS m USING (model_id)
WHERE ($model IS NULL OR m.name = $model)
  AND ($task IS NULL OR r.task = $task)
GROUP BY ALL
ORDER BY r.run_id, s.layer, s.head;
