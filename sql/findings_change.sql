-- name: findings_change
-- title: Findings per compare run: the layer whose attention changed most through fine-tuning, and the least
-- params: model, task
-- One row per compare run (`attnwh ingest compare`; the report's "Findings" list): the
-- layer with the lowest mean cosine between the base and the tuned model's maps (mean over
-- the run's examples and the layer's heads, as in finetune_change_by_layer; ties: the lower
-- layer) and the one with the highest (ties: the lower layer), how many layers there are
-- (last_layer: the highest, 0-based) and over how many examples. The paper found the last
-- two layers change most. model is the tuned model's name as stored (the compare run's
-- model, as for the report's other runs); NULL = all.
WITH layers AS (
    SELECT
        c.base,
        c.tuned,
        c.task,
        c.split,
        c.run_id,
        c.layer,
        avg(c.cosine)                AS mean_cosine,
        count(DISTINCT c.example_id) AS examples
    FROM attention_change_named AS c
    WHERE ($model IS NULL OR c.tuned = $model)
      AND ($task IS NULL OR c.task = $task)
    GROUP BY ALL
)
SELECT
    base, tuned, task, split, run_id,
    count(*)                                             AS layers,
    max(layer)                                           AS last_layer,
    max(examples)                                        AS examples,
    arg_min(layer, (mean_cosine, layer))                 AS changed_layer,
    min(mean_cosine)                                     AS changed_cosine,
    arg_max(layer, (mean_cosine, -layer))                AS steady_layer,
    max(mean_cosine)                                     AS steady_cosine
FROM layers
GROUP BY base, tuned, task, split, run_id
ORDER BY tuned, task, split, run_id;
