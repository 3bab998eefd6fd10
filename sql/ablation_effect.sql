-- name: ablation_effect
-- title: The effect of disabling each head on the task score, per model, task and mode, with interval, p and adjusted p
-- params: model, task, mode, metric
-- One row per ablation run, head and metric (Kovaleva et al. 2019 Fig. 8, the heatmap of
-- disabling one head at a time, with the significance the paper did not test): the score with
-- the head disabled, its paired delta against the baseline on the same examples (disabled
-- minus baseline; > 0: disabling helped, < 0: it hurt), the 95 % bootstrap interval of the
-- delta, the paired test's p-value and its Benjamini–Hochberg adjustment across the run's
-- heads and layers. significant = adjusted p < 0.05; importance = the head's gradient
-- importance, when the run measured it. model is a model name as stored; mode uniform or zero;
-- metric accuracy, f1, mcc, pearson or spearman; NULL = all.
SELECT
    v.model, v.task, v.split, v.run_id, v.mode, v.layer, v.head, v.metric,
    v.baseline, v.value, v.delta, v.ci_low, v.ci_high, v.p_value, v.p_adjusted, v.significant, v.test,
    i.importance,
    v.examples
FROM ablation_results AS v
LEFT JOIN head_importance AS i ON i.run_id = v.run_id AND i.layer = v.layer AND i.head = v.head
WHERE v.kind = 'head'
  AND ($model IS NULL OR v.model = $model)
  AND ($task IS NULL OR v.task = $task)
  AND ($mode IS NULL OR v.mode = $mode)
  AND ($metric IS NULL OR v.metric = $metric)
ORDER BY v.model, v.task, v.split, v.run_id, v.metric, v.layer, v.head;
