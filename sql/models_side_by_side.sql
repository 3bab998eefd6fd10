-- name: models_side_by_side
-- title: Models compared by relative depth, layer or key/value group: first-token and sink share, massive activations, head roles, whole context
-- params: model, task, by, bins, eps, budget
-- Several models read on the same text and probes, compared where their layers or their
-- key/value groups differ (docs/warehouse.md#models-side-by-side). One row per model, run,
-- measure and unit of `by`:
--   by = 'depth' (default): bins of relative depth, layer / num_layers, cut into `bins`
--        (default 5) equal intervals, so a 30-layer and an 18-layer model meet at the same
--        fifth of their depth; bin b holds the layers with floor(layer · bins / num_layers) = b;
--        bins = 1 gives one row per model and run, the whole model;
--   by = 'layer': each layer, its depth layer / num_layers;
--   by = 'group': each layer and key/value group (head_groups), the unit a KV cache is kept
--        for under grouped-query attention (each head its own group on a model without it);
--        massive activations, read per layer, have no group.
-- The measures (value is over `units`, the rows of the grain below):
--   first_token     statistics runs: mean attention to the first token ([CLS] on an encoder)
--                   per head (head_means.to_cls), averaged over the unit's heads;
--   sink_share      the share of the unit's heads whose mean first-token share exceeds eps
--                   (default 0.3; Gu et al. 2025's Sink^eps);
--   massive         statistics runs scanned for massive activations: the share of (example,
--                   layer) pairs with an entry |h| > 100 and > 1000 × the layer output's median
--                   |h| (Sun et al. 2024; as the query massive_activations by default);
--   induction_max   head-roles runs on induction probes: the largest mean induction score among
--                   the unit's heads (Olsson et al. 2022);
--   previous_token_max  the same run's largest mean previous-token score;
--   retrieval_share head-roles runs on needle probes: the share of the unit's heads whose mean
--                   retrieval score exceeds 0.1 (Wu et al. 2025's retrieval heads);
--   kept_whole      restriction runs: the share of the unit's key/value groups that keep the
--                   whole context in the run's plan at a loss budget of `budget` nats per token
--                   (default 0.05): groups ranked past the largest k whose measured Δ ≤ budget.
-- depth_from and depth_to bound the unit's relative depth [from, to); first_layer and
-- last_layer are the layers it holds. model and task select runs (NULL = all).
WITH settings AS (
    SELECT
        coalesce(CAST($by AS VARCHAR), 'depth')        AS grain,
        coalesce(CAST($bins AS INTEGER), 5)            AS bins,
        coalesce(CAST($eps AS DOUBLE), 0.3)            AS eps,
        coalesce(CAST($budget AS DOUBLE), 0.05)        AS budget
),
checked AS (
    SELECT *,
           CASE WHEN grain NOT IN ('depth', 'layer', 'group') THEN error('by must be depth, layer or group')
                WHEN bins < 1 THEN error('bins must be 1 or more')
                WHEN budget < 0 THEN error('budget must be 0 or more nats per token') END AS refused
    FROM settings
),
scope AS (
    SELECT r.run_id, r.kind, r.task, m.model_id, m.name AS model, m.num_layers, m.num_heads,
           coalesce(m.num_key_value_heads, m.num_heads) AS num_key_value_heads
    FROM runs AS r
    JOIN models AS m USING (model_id)
    WHERE ($model IS NULL OR m.name = $model)
      AND ($task IS NULL OR r.task = $task)
),
head_first_token AS (
    SELECT s.run_id, s.layer, s.head, avg(s.to_cls) AS first_token
    FROM head_stats AS s
    WHERE s.run_id IN (SELECT run_id FROM scope)
    GROUP BY ALL
),
head_role_scores AS (
    SELECT h.run_id, h.layer, h.head,
           avg(h.induction) AS induction, avg(h.previous_token) AS previous_token, avg(h.retrieval) AS retrieval
    FROM head_roles AS h
    WHERE h.run_id IN (SELECT run_id FROM scope)
    GROUP BY ALL
),
example_layers AS (
    SELECT a.run_id, a.example_id, a.layer,
           bool_or(a.magnitude > 100 AND a.magnitude > 1000 * a.median) AS massive
    FROM massive_activations AS a
    WHERE a.run_id IN (SELECT run_id FROM scope)
    GROUP BY ALL
),
chosen AS (
    -- The largest k of each restriction run's plan whose measured Δ is within the budget.
    SELECT p.run_id, max(p.k) AS k
    FROM restriction_plan AS p, checked AS c
    WHERE p.run_id IN (SELECT run_id FROM scope) AND p.delta <= c.budget
    GROUP BY p.run_id
),
units AS (
    -- One row per unit of a measure: a head, an (example, layer) pair or a key/value group;
    -- x is the unit's value, which the grain averages (or, for *_max, takes the largest of).
    SELECT run_id, layer, head, NULL::SMALLINT AS kv_group, 'first_token' AS measure, first_token AS x
    FROM head_first_token
    UNION ALL
    SELECT run_id, layer, head, NULL, 'sink_share', (first_token > c.eps)::DOUBLE
    FROM head_first_token, checked AS c
    UNION ALL
    SELECT run_id, layer, NULL, NULL, 'massive', massive::DOUBLE
    FROM example_layers
    UNION ALL
    SELECT run_id, layer, head, NULL, 'induction_max', induction
    FROM head_role_scores WHERE induction IS NOT NULL
    UNION ALL
    SELECT run_id, layer, head, NULL, 'previous_token_max', previous_token
    FROM head_role_scores WHERE induction IS NOT NULL
    UNION ALL
    SELECT run_id, layer, head, NULL, 'retrieval_share', (retrieval > 0.1)::DOUBLE
    FROM head_role_scores WHERE retrieval IS NOT NULL
    UNION ALL
    SELECT g.run_id, g.layer, NULL, g.kv_group, 'kept_whole', (g.rank > coalesce(k.k, 0))::DOUBLE
    FROM restriction_groups AS g
    LEFT JOIN chosen AS k USING (run_id)
    WHERE g.run_id IN (SELECT run_id FROM scope)
),
placed AS (
    SELECT s.model, s.model_id, s.kind, s.task, s.num_layers, s.num_heads, s.num_key_value_heads,
           u.run_id, u.measure, u.layer, coalesce(u.kv_group, hg.kv_group, u.head) AS kv_group, u.x,
           c.grain, c.bins, c.eps, c.budget, c.refused
    FROM units AS u
    JOIN scope AS s USING (run_id)
    LEFT JOIN head_groups AS hg ON hg.model_id = s.model_id AND hg.head = u.head
    CROSS JOIN checked AS c
),
keyed AS (
    SELECT *,
           CASE WHEN grain = 'depth' THEN floor(layer * bins / num_layers)::INTEGER END AS depth_bin,
           CASE WHEN grain = 'group' THEN kv_group END                               AS group_key,
           CASE WHEN grain = 'depth' THEN NULL ELSE layer END                        AS layer_key
    FROM placed
)
SELECT
    model,
    kind,
    task,
    run_id,
    num_layers,
    num_heads,
    num_key_value_heads,
    measure,
    depth_bin,
    layer_key                                                            AS layer,
    group_key                                                            AS kv_group,
    CASE WHEN depth_bin IS NULL THEN layer_key / num_layers ELSE depth_bin / bins END          AS depth_from,
    CASE WHEN depth_bin IS NULL THEN (layer_key + 1) / num_layers ELSE (depth_bin + 1) / bins END AS depth_to,
    min(layer)                                                           AS first_layer,
    max(layer)                                                           AS last_layer,
    CASE WHEN ends_with(measure, '_max') THEN max(x) ELSE avg(x) END    AS value,
    count(*)                                                             AS units,
    eps,
    budget
FROM keyed
WHERE refused IS NULL  -- evaluates the settings' check (error() above) on every row
GROUP BY model, kind, task, run_id, num_layers, num_heads, num_key_value_heads, measure, depth_bin, layer_key,
    group_key, bins, eps, budget
ORDER BY model, run_id,
         array_position(['first_token', 'sink_share', 'massive', 'induction_max', 'previous_token_max',
                         'retrieval_share', 'kept_whole'], measure),
         depth_bin, layer, kv_group;
