-- name: head_summary
-- title: Every attention statistic per model, task, layer and head, averaged over examples
-- params: model, task
SELECT
    m.name                         AS model,
    r.task,
    r.split,
    r.run_id,
    s.layer,
    s.head,
    avg(s.to_cls)                  AS to_cls,
    avg(s.to_sep)                  AS to_sep,
    avg(s.to_punct)                AS to_punct,
    avg(s.to_self)                 AS to_self,
    avg(s.to_prev)                 AS to_prev,
    avg(s.to_next)                 AS to_next,
    avg(s.entropy)                 AS entropy,
    avg(s.max_weight)              AS max_weight,
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
ORDER BY model, r.task, r.split, r.run_id, s.layer, s.head;
