-- name: ablation_effect
-- title: The effect of disabling each head on the task score, per model, task and mode, with interval, p and adjusted p
-- params: model, task, mode, metric
-- One row per ablation run, head and metric (Kovaleva et al. Fig. 6, with the significance
-- the paper did not test): the score with the head disabled, its paired delta against the
-- baseline on the same examples (> 0: disabling helped), the 95 % bootstrap interval of the
-- delta, the paired test's p-value and its Benjamini–Hochberg adjustment across the run's
-- heads and layers. significant = adjusted p < 0.05; importance = the head's gradient
-- importance, when the run measured it. model is a model name as stored; mode uniform or
-- zero; metric accuracy, f1, mcc, pearson or spearman; NULL = all.
SELECT
    m.name                       AS model,
    r.task,
    r.split,
    r.run_id,
    c.mode,
    c.layer,
    c.head,
    a.metric,
    a.baseline,
    a.value,
    a.delta,
    a.ci_low,
    a.ci_high,
    a.p_value,
    a.p_adjusted,
    a.p_adjusted < 0.05          AS significant,
    a.test,
    i.importance,
    a.n_examples                 AS examples
FROM ablations AS a
JOIN ablation_configs AS c USING (run_id, config_id)
JOIN runs AS r USING (run_id)
JOIN models AS m USING (model_id)
LEFT JOIN head_importance AS i ON i.run_id = a.run_id AND i.layer = c.layer AND i.head = c.head
WHERE c.kind = 'head'
  AND ($model IS NULL OR m.name = $model)
  AND ($task IS NULL OR r.task = $task)
  AND ($mode IS NULL OR c.mode = $mode)
  AND ($metric IS NULL OR a.metric = $metric)
ORDER BY model, r.task, r.split, r.run_id, a.metric, c.layer, c.head;
