-- name: head_summary
-- title: Every attention statistic per model, task, layer and head, averaged over examples
-- params: model, task
-- One row per statistics run, layer and head: the columns of the view head_means (migration
-- 0008), which defines the means, so this query and ad hoc SQL on the view agree. model is a
-- model name as stored; NULL = all.
SELECT
    model,
    task,
    split,
    run_id,
    layer,
    head,
    to_cls,
    to_sep,
    to_punct,
    to_self,
    to_prev,
    to_next,
    entropy,
    max_weight,
    norm_to_cls,
    norm_to_sep,
    norm_to_punct,
    examples
FROM head_means
WHERE ($model IS NULL OR model = $model)
  AND ($task IS NULL OR task = $task)
ORDER BY model, task, split, run_id, layer, head;
