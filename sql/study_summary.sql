-- name: study_summary
-- title: Per fine-tuned model, task and metric: its score, the layer that changed most, the head whose disabling helped most
-- params: model, task, metric, mode, finetune_run, compare_run, ablation_run
-- What `attnwh study` prints per task, one row per fine-tuned model, task and metric (and per
-- combination of its fine-tuning, compare and ablation runs): score = the fine-tuning run's
-- score on its evaluation split; changed_layer = the layer with the lowest mean cosine between
-- base and tuned maps in the compare run (as in finetune_change_by_layer; ties: the lower
-- layer); ablation_examples = the examples the ablation run scored; helpful_* = the head whose
-- disabling raised the score most in the ablation run (largest delta, then lowest adjusted p,
-- then the lower layer and head), NULL when no head's disabling raised it; sink_heads, sinks_delta, sinks_p_value = the ablation run's sinks
-- combination (every sink head of the tuned model disabled together: how many, the delta and
-- its unadjusted p), NULL when the run has none. A part whose run is missing is NULL. model is
-- the tuned model's name as stored; mode uniform or zero; finetune_run, compare_run and
-- ablation_run are run_ids; NULL = all.
WITH finetune_scores AS (
    SELECT r.run_id, r.model_id, r.task, s.metric, s.value, s.n_examples
    FROM scores AS s
    JOIN runs AS r USING (run_id)
    WHERE r.kind = 'finetune'
      AND ($finetune_run IS NULL OR r.run_id = $finetune_run)
      AND ($metric IS NULL OR s.metric = $metric)
),
layer_change AS (
    SELECT r.run_id, r.model_id, r.task, c.layer, avg(c.cosine) AS mean_cosine
    FROM attention_change AS c
    JOIN runs AS r USING (run_id)
    WHERE r.kind = 'compare'
      AND ($compare_run IS NULL OR r.run_id = $compare_run)
    GROUP BY ALL
),
most_changed AS (
    SELECT run_id, model_id, task, layer, mean_cosine
    FROM layer_change
    QUALIFY row_number() OVER (PARTITION BY run_id ORDER BY mean_cosine, layer) = 1
),
ablation_heads AS (
    SELECT a.run_id, r.model_id, r.task, c.mode, a.metric, c.layer, c.head, a.delta, a.p_adjusted, a.n_examples
    FROM ablations AS a
    JOIN ablation_configs AS c USING (run_id, config_id)
    JOIN runs AS r USING (run_id)
    WHERE c.kind = 'head'
      AND ($ablation_run IS NULL OR a.run_id = $ablation_run)
      AND ($mode IS NULL OR c.mode = $mode)
      AND ($metric IS NULL OR a.metric = $metric)
),
sinks AS (
    SELECT a.run_id, a.metric, c.n_disabled, a.delta, a.p_value
    FROM ablations AS a
    JOIN ablation_configs AS c USING (run_id, config_id)
    WHERE c.kind = 'sinks'
      AND ($ablation_run IS NULL OR a.run_id = $ablation_run)
),
most_helpful AS (
    SELECT *
    FROM ablation_heads
    QUALIFY row_number() OVER (
        PARTITION BY run_id, metric ORDER BY delta DESC, coalesce(p_adjusted, 1), layer, head
    ) = 1
),
keys AS (
    SELECT model_id, task, metric FROM finetune_scores
    UNION
    SELECT model_id, task, metric FROM most_helpful
    UNION  -- a comparison without scores or ablations still has a row
    SELECT model_id, task, $metric FROM most_changed AS c
    WHERE NOT EXISTS (SELECT 1 FROM finetune_scores AS f WHERE f.model_id = c.model_id AND f.task = c.task)
      AND NOT EXISTS (SELECT 1 FROM most_helpful AS h WHERE h.model_id = c.model_id AND h.task = c.task)
)
SELECT
    m.name              AS model,
    k.task,
    k.metric,
    f.run_id            AS finetune_run,
    f.value             AS score,
    f.n_examples        AS score_examples,
    ch.run_id           AS compare_run,
    ch.layer            AS changed_layer,
    ch.mean_cosine,
    h.run_id            AS ablation_run,
    h.mode,
    h.n_examples        AS ablation_examples,
    CASE WHEN h.delta > 0 THEN h.layer END      AS helpful_layer,
    CASE WHEN h.delta > 0 THEN h.head END       AS helpful_head,
    CASE WHEN h.delta > 0 THEN h.delta END      AS helpful_delta,
    CASE WHEN h.delta > 0 THEN h.p_adjusted END AS helpful_p_adjusted,
    s.n_disabled        AS sink_heads,
    s.delta             AS sinks_delta,
    s.p_value           AS sinks_p_value
FROM keys AS k
JOIN models AS m USING (model_id)
LEFT JOIN finetune_scores AS f ON f.model_id = k.model_id AND f.task = k.task AND f.metric = k.metric
LEFT JOIN most_changed AS ch ON ch.model_id = k.model_id AND ch.task = k.task
LEFT JOIN most_helpful AS h ON h.model_id = k.model_id AND h.task = k.task AND h.metric = k.metric
LEFT JOIN sinks AS s ON s.run_id = h.run_id AND s.metric = h.metric
WHERE ($model IS NULL OR m.name = $model)
  AND ($task IS NULL OR k.task = $task)
ORDER BY model, k.task, k.metric, finetune_run, compare_run, ablation_run;
