-- name: runs
-- title: Every run in the warehouse with its model, data, size, settings and status
-- params: model, task
SELECT
    r.run_id,
    r.kind,
    m.name          AS model,
    m.family,
    r.dataset,
    r.task,
    r.split,
    r.n_examples,
    r.n_truncated,
    r.max_length,
    r.example_limit,
    r.seed,
    r.device,
    r.dtype,
    r.status,
    r.started_at,
    r.finished_at,
    round(r.seconds, 2) AS seconds
FROM runs AS r
JOIN models AS m USING (model_id)
WHERE ($model IS NULL OR m.name = $model)
  AND ($task IS NULL OR r.task = $task)
ORDER BY r.run_id;
