-- name: ablation_combinations
-- title: Scores with several heads disabled together: every individually helpful head, and the top-k curve
-- params: model, task, mode, metric
-- One row per ablation run, combination and metric. kind 'helpful': every head whose own
-- disabling raised the run's main metric, disabled together (k = their count); kind 'top_k':
-- the k heads whose own disabling helped most (by delta on the main metric, ties by p),
-- disabled together, k = 1, 2, ... (a curve). The heads were chosen on the same examples, so
-- p_value is optimistic and not adjusted. n_helpful = the run's heads whose own disabling
-- raised this metric (delta > 0): the sweep ranks every head, so a top_k row with k >
-- n_helpful also disables heads that did not help alone, and with n_helpful = 0 none helped
-- and the curve is of heads in sweep order. Parameters as in ablation_effect; NULL = all.
WITH helpful AS (
    SELECT run_id, metric, count(*) FILTER (WHERE delta > 0) AS n_helpful
    FROM ablation_results
    WHERE kind = 'head'
    GROUP BY run_id, metric
)
SELECT
    a.model, a.task, a.split, a.run_id, a.mode, a.kind, a.k, a.disabled, a.metric,
    a.baseline, a.value, a.delta, a.ci_low, a.ci_high, a.p_value, a.examples,
    coalesce(h.n_helpful, 0) AS n_helpful
FROM ablation_results AS a
LEFT JOIN helpful AS h USING (run_id, metric)
WHERE a.kind IN ('helpful', 'top_k')
  AND ($model IS NULL OR a.model = $model)
  AND ($task IS NULL OR a.task = $task)
  AND ($mode IS NULL OR a.mode = $mode)
  AND ($metric IS NULL OR a.metric = $metric)
ORDER BY a.model, a.task, a.split, a.run_id, a.metric, a.kind, a.k;
