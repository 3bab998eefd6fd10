-- name: ablation_combinations
-- title: Scores with several heads disabled together: every individually helpful head, and the top-k curve
-- params: model, task, mode, metric
-- One row per ablation run, combination and metric. kind 'helpful': every head whose own
-- disabling raised the run's main metric, disabled together (k = their count); kind 'top_k':
-- the k heads whose own disabling helped most (by delta on the main metric, ties by p),
-- disabled together, k = 1, 2, ... (a curve). The heads were chosen on the same examples, so
-- p_value is optimistic and not adjusted. Parameters as in ablation_effect; NULL = all.
SELECT
    m.name                       AS model,
    r.task,
    r.split,
    r.run_id,
    c.mode,
    c.kind,
    c.k,
    c.disabled,
    a.metric,
    a.baseline,
    a.value,
    a.delta,
    a.ci_low,
    a.ci_high,
    a.p_value,
    a.n_examples                 AS examples
FROM ablations AS a
JOIN ablation_configs AS c USING (run_id, config_id)
JOIN runs AS r USING (run_id)
JOIN models AS m USING (model_id)
WHERE c.kind IN ('helpful', 'top_k')
  AND ($model IS NULL OR m.name = $model)
  AND ($task IS NULL OR r.task = $task)
  AND ($mode IS NULL OR c.mode = $mode)
  AND ($metric IS NULL OR a.metric = $metric)
ORDER BY model, r.task, r.split, r.run_id, a.metric, c.kind, c.k;
