-- name: massive_activations
-- title: Massive activations (Sun et al. 2024) per layer, dimension and token kind: entries > min_magnitude (100) and > ratio (1000) × the median |h|
-- params: model, task, min_magnitude, ratio
-- An entry of a layer's output hidden states is massive when its magnitude exceeds
-- min_magnitude and ratio × the median magnitude of that layer's output for the example
-- (docs/metrics.md#massive-activations). Only the top_k largest entries of each example and
-- layer are stored (8 by default), so `massive` is a lower bound where an example has more.
-- The shares are of the run's scanned examples (those with massive_activations rows):
-- example_share counts the examples with a massive entry in this layer and dimension on a
-- token of this kind, dim_example_share those with one on any token, so the kinds of a
-- dimension can overlap and dim_example_share is the dimension's share whatever the kind.
-- A decoder's first token (BOS, or its first real token) is stored as '[CLS]', the kind in
-- its place; the query names it 'first token' for a decoder's run (models.causal).
WITH threshold AS (
    SELECT
        coalesce(CAST($min_magnitude AS DOUBLE), 100)  AS min_magnitude,
        coalesce(CAST($ratio AS DOUBLE), 1000)         AS ratio
),
scanned AS (
    SELECT run_id, count(DISTINCT example_id) AS examples
    FROM massive_activations
    GROUP BY run_id
),
massive AS (
    SELECT a.*
    FROM massive_activations AS a
    CROSS JOIN threshold AS t
    WHERE a.magnitude > t.min_magnitude AND a.magnitude > t.ratio * a.median
),
per_dim AS (
    SELECT run_id, layer, dim, count(DISTINCT example_id) AS dim_examples
    FROM massive
    GROUP BY run_id, layer, dim
)
SELECT
    m.name                                                       AS model,
    r.task,
    r.split,
    a.run_id,
    a.layer,
    a.dim,
    CASE WHEN coalesce(m.causal, false) AND a.token_kind = '[CLS]' THEN 'first token' ELSE a.token_kind END
                                                                 AS token_kind,
    t.min_magnitude,
    t.ratio,
    count(*)                                                     AS massive,
    count(DISTINCT a.example_id)                                 AS examples,
    s.examples                                                   AS run_examples,
    count(DISTINCT a.example_id) / s.examples                    AS example_share,
    d.dim_examples / s.examples                                  AS dim_example_share,
    avg(a.magnitude)                                             AS mean_magnitude,
    max(a.magnitude)                                             AS max_magnitude,
    avg(a.median)                                                AS mean_median,
    avg(a.magnitude / nullif(a.median, 0))                       AS mean_ratio
FROM massive AS a
JOIN runs AS r ON r.run_id = a.run_id
JOIN models AS m ON m.model_id = r.model_id
JOIN scanned AS s ON s.run_id = a.run_id
JOIN per_dim AS d ON d.run_id = a.run_id AND d.layer = a.layer AND d.dim = a.dim
CROSS JOIN threshold AS t
WHERE ($model IS NULL OR m.name = $model)
  AND ($task IS NULL OR r.task = $task)
GROUP BY m.name, m.causal, r.task, r.split, a.run_id, a.layer, a.dim, a.token_kind, t.min_magnitude, t.ratio,
    s.examples, d.dim_examples
ORDER BY model, r.task, a.run_id, a.layer, massive DESC, a.dim, a.token_kind;
