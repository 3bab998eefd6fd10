-- name: report_scope
-- title: How many statistics runs, models and tasks a report covers
-- params: model, task
-- One row: the statistics runs that hold head statistics (whatever their status), their
-- distinct models and their distinct tasks: the report's opening line; no runs means nothing
-- to report. model is a model name as stored; NULL = all.
SELECT
    count(DISTINCT r.run_id)    AS runs,
    count(DISTINCT r.model_id)  AS models,
    count(DISTINCT r.task)      AS tasks
FROM runs AS r
JOIN models AS m USING (model_id)
WHERE r.kind = 'statistics'
  AND ($model IS NULL OR m.name = $model)
  AND ($task IS NULL OR r.task = $task)
  AND EXISTS (SELECT 1 FROM head_stats AS s WHERE s.run_id = r.run_id);
