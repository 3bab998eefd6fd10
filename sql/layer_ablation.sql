-- name: layer_ablation
-- title: The effect of disabling all heads of a layer on the task score, per model, task and mode
-- params: model, task, mode, metric
-- One row per ablation run, layer and metric (Kovaleva et al. Table 3: +3.2 points on RTE
-- for layer 1): the score with every head of the layer disabled, the paired delta against
-- the baseline with its 95 % bootstrap interval, p and Benjamini–Hochberg adjusted p (the
-- correction runs over the run's heads and layers together). Parameters as in
-- ablation_effect; NULL = all.
SELECT
    m.name                       AS model,
    r.task,
    r.split,
    r.run_id,
    c.mode,
    c.layer,
    a.metric,
    a.baseline,
    a.value,
    a.delta,
    a.ci_low,
    a.ci_high,
    a.p_value,
    a.p_adjusted,
    a.p_adjusted < 0.05          AS significant,
    a.n_examples                 AS examples
FROM ablations AS a
JOIN ablation_configs AS c USING (run_id, config_id)
JOIN runs AS r USING (run_id)
JOIN models AS m USING (model_id)
WHERE c.kind = 'layer'
  AND ($model IS NULL OR m.name = $model)
  AND ($task IS NULL OR r.task = $task)
  AND ($mode IS NULL OR c.mode = $mode)
  AND ($metric IS NULL OR a.metric = $metric)
ORDER BY model, r.task, r.split, r.run_id, a.metric, c.layer;
