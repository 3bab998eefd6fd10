-- name: helpful_heads
-- title: Heads and layers whose disabling raises the task score significantly (adjusted p < 0.05)
-- params: model, task, mode
-- The paper's "disabling some heads improves accuracy", kept only where the improvement
-- survives a paired test and the Benjamini–Hochberg correction across the run's heads and
-- layers. One row per ablation run, configuration (a head, or a whole layer with head NULL)
-- and metric, best first. An empty result means no improvement beyond the noise of the
-- examples.
SELECT
    model, task, split, run_id, mode, kind, layer, head, metric,
    baseline, value, delta, ci_low, ci_high, p_value, p_adjusted, examples
FROM ablation_results
WHERE kind IN ('head', 'layer')
  AND delta > 0
  AND significant
  AND ($model IS NULL OR model = $model)
  AND ($task IS NULL OR task = $task)
  AND ($mode IS NULL OR mode = $mode)
ORDER BY model, task, split, run_id, metric, delta DESC, p_adjusted, layer, head;
