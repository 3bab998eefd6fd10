-- name: layer_ablation
-- title: The effect of disabling all heads of a layer on the task score, per model, task and mode
-- params: model, task, mode, metric
-- One row per ablation run, layer and metric (Kovaleva et al. 2019 Fig. 9, disabling one
-- layer, all its heads, at a time; the paper reports +3.2 points on RTE with its first layer
-- disabled, layer 0 here): the score with every head of the layer disabled, the paired delta
-- against the baseline (disabled minus baseline) with its 95 % bootstrap interval, p and
-- Benjamini–Hochberg adjusted p (the correction runs over the run's heads and layers
-- together). Parameters as in ablation_effect; NULL = all.
SELECT
    model, task, split, run_id, mode, layer, metric,
    baseline, value, delta, ci_low, ci_high, p_value, p_adjusted, significant, examples
FROM ablation_results
WHERE kind = 'layer'
  AND ($model IS NULL OR model = $model)
  AND ($task IS NULL OR task = $task)
  AND ($mode IS NULL OR mode = $mode)
  AND ($metric IS NULL OR metric = $metric)
ORDER BY model, task, split, run_id, metric, layer;
