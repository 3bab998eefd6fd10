-- name: ablation_combinations
-- title: Scores with several heads disabled together: every individually helpful head, and the top-k curve
-- params: model, task, mode, metric
-- One row per ablation run, combination and metric. kind 'helpful': every head whose own
-- disabling raised the run's main metric, disabled together (k = their count); kind 'top_k':
-- the k heads whose own disabling helped most (by delta on the main metric, ties by p),
-- disabled together, k = 1, 2, ... (a curve). The heads were chosen on the same examples, so
-- p_value is optimistic and not adjusted. Parameters as in ablation_effect; NULL = all.
SELECT
    model, task, split, run_id, mode, kind, k, disabled, metric,
    baseline, value, delta, ci_low, ci_high, p_value, examples
FROM ablation_results
WHERE kind IN ('helpful', 'top_k')
  AND ($model IS NULL OR model = $model)
  AND ($task IS NULL OR task = $task)
  AND ($mode IS NULL OR mode = $mode)
  AND ($metric IS NULL OR metric = $metric)
ORDER BY model, task, split, run_id, metric, kind, k;
