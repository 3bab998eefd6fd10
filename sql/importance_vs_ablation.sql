-- name: importance_vs_ablation
-- title: Does gradient importance find the heads whose disabling hurts? Spearman correlation per run and metric
-- params: model, task, mode
-- One row per ablation run and metric: the Spearman rank correlation, across the model's
-- heads, between gradient importance (Michel et al.: mean |dL/d gate|) and the score drop
-- when the head is disabled (baseline - value); near 1 = the cheap estimate ranks heads as
-- the sweep does; NULL when all heads tie. Ties get their average rank. Also: how many of
-- the 10 most important heads are among the 10 whose disabling hurts most.
WITH paired AS (
    SELECT v.model, v.task, v.split, v.run_id, v.mode, v.metric, v.layer, v.head, i.importance, -v.delta AS drop
    FROM ablation_results AS v
    JOIN head_importance AS i ON i.run_id = v.run_id AND i.layer = v.layer AND i.head = v.head
    WHERE v.kind = 'head'
      AND ($model IS NULL OR v.model = $model)
      AND ($task IS NULL OR v.task = $task)
      AND ($mode IS NULL OR v.mode = $mode)
),
ranked AS (
    SELECT
        *,
        rank() OVER (PARTITION BY run_id, metric ORDER BY importance)
            + (count(*) OVER (PARTITION BY run_id, metric, importance) - 1) / 2.0   AS importance_rank,
        rank() OVER (PARTITION BY run_id, metric ORDER BY drop)
            + (count(*) OVER (PARTITION BY run_id, metric, drop) - 1) / 2.0         AS drop_rank,
        row_number() OVER (PARTITION BY run_id, metric ORDER BY importance DESC, layer, head) AS importance_top,
        row_number() OVER (PARTITION BY run_id, metric ORDER BY drop DESC, layer, head)       AS drop_top
    FROM paired
)
SELECT
    model,
    task,
    split,
    run_id,
    mode,
    metric,
    -- Undefined (NULL, not NaN) when every head had the same effect or the same importance.
    CASE WHEN isnan(corr(importance_rank, drop_rank)) THEN NULL
         ELSE corr(importance_rank, drop_rank) END                   AS spearman,
    count(*)                                                         AS heads,
    count(*) FILTER (WHERE importance_top <= 10 AND drop_top <= 10)  AS top10_overlap
FROM ranked
GROUP BY ALL
ORDER BY model, task, split, run_id, metric;
