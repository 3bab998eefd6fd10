-- name: head_roles_top
-- title: The top heads of each role score per head-roles run: layer, head, key/value group, mean score and rank
-- params: model, top
-- docs/metrics.md#head-roles; the report's "Head roles" table. One row per head-roles run
-- (runs.kind = 'roles'; probe = runs.task, induction or needle), score and head among the run's
-- top (default 5) by that score's mean over the run's probes, as the query head_roles ranks
-- them (1 = highest; ties share a rank and may give more than top rows): score is one of
-- previous_token, induction, duplicate, retrieval, sink, local_mass, only those the run's probe
-- kind defines (induction and duplicate on induction probes, retrieval on needles). kv_group is
-- the key/value group the head reads under grouped-query attention (head_groups). model is a
-- model name as stored; NULL = all.
WITH means AS (
    SELECT *
    FROM head_role_means
    WHERE $model IS NULL OR model = $model
),
scores AS (
    UNPIVOT means
    ON previous_token, induction, duplicate, retrieval, sink, local_mass
    INTO NAME score VALUE value  -- UNPIVOT drops the NULL means: scores the probe does not define
),
ranked AS (
    SELECT *, rank() OVER (PARTITION BY run_id, score ORDER BY value DESC) AS rank
    FROM scores
)
SELECT model, probe, run_id, score, rank, layer, head, kv_group, CAST(value AS DOUBLE) AS value, probes
FROM ranked
WHERE rank <= coalesce(CAST($top AS INTEGER), 5)
ORDER BY model, run_id,
         array_position(['induction', 'previous_token', 'duplicate', 'retrieval', 'sink', 'local_mass'], score),
         rank, layer, head;
