-- name: helpful_heads
-- title: Heads and layers whose disabling raises the task score significantly (adjusted p < 0.05)
-- params: model, task, mode
-- The paper's "disabling some heads improves accuracy", kept only where the improvement
-- survives a paired test and the Benjamini–Hochberg correction across the run's heads and
-- layers. One row per ablation run, configuration (a head, or a whole layer with head NULL)
-- and metric, best first. An empty result means no improvement beyond the noise of the
-- examples.
SELECT
    m.name                       AS model,
    r.task,
    r.split,
    r.run_id,
    c.mode,
    c.kind,
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
    a.n_examples                 AS examples
FROM ablations AS a
JOIN ablation_configs AS c USING (run_id, config_id)
JOIN runs AS r USING (run_id)
JOIN models AS m USING (model_id)
WHERE c.kind IN ('head', 'layer')
  AND a.delta > 0
  AND a.p_adjusted < 0.05
  AND ($model IS NULL OR m.name = $model)
  AND ($task IS NULL OR r.task = $task)
  AND ($mode IS NULL OR c.mode = $mode)
ORDER BY model, r.task, r.split, r.run_id, a.metric, a.delta DESC, a.p_adjusted, c.layer, c.head;
