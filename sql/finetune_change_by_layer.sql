-- name: finetune_change_by_layer
-- title: How much attention changed from a base to a tuned model, per model pair, task and layer (cosine of the maps)
-- params: base, tuned, task
-- One row per compare run and layer (Kovaleva et al. Fig. 5): the cosine similarity of the
-- base and tuned model's attention maps on the same example, cropped to the real tokens,
-- summarised over the run's examples and the layer's heads. 1 = unchanged; lower = changed
-- more. base and tuned are model names as stored (hub name or path); NULL = all.
SELECT
    c.base,
    c.tuned,
    c.task,
    c.split,
    c.run_id,
    c.layer,
    avg(c.cosine)                  AS mean_cosine,
    stddev_samp(c.cosine)          AS stddev_cosine,
    min(c.cosine)                  AS min_cosine,
    max(c.cosine)                  AS max_cosine,
    count(DISTINCT c.example_id)   AS examples
FROM attention_change_named AS c
WHERE ($base IS NULL OR c.base = $base)
  AND ($tuned IS NULL OR c.tuned = $tuned)
  AND ($task IS NULL OR c.task = $task)
GROUP BY ALL
ORDER BY base, tuned, c.task, c.split, c.run_id, c.layer;
