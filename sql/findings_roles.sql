-- name: findings_roles
-- title: Findings per head-roles run and role: its three top heads, and how many heads pass the role's threshold
-- params: model
-- One row per head-roles run (runs.kind = 'roles') and role it defines (the report's
-- "Findings" list; docs/metrics.md#head-roles): induction, previous_token and duplicate on
-- induction probes (Olsson et al. 2022), retrieval on needle probes (Wu et al. 2025). Per
-- head, the score's mean over the run's probes; top holds the three highest heads as
-- {layer, head, value} (ties to the lower layer, then head), heads counts the run's heads.
-- threshold is where the role has one, and above the heads whose mean exceeds it: retrieval
-- heads are those with a retrieval score above 0.1 (Wu et al. 2025); the other roles have no
-- threshold in their papers (NULL). model is a model name as stored; NULL = all.
WITH means AS (
    SELECT model, probe, run_id, layer, head, probes, previous_token, induction, duplicate, retrieval
    FROM head_role_means
    WHERE $model IS NULL OR model = $model
),
scores AS (
    UNPIVOT means ON induction, previous_token, duplicate, retrieval INTO NAME role VALUE value
),
thresholds(role, threshold) AS (
    VALUES ('induction', NULL::DOUBLE), ('previous_token', NULL), ('duplicate', NULL), ('retrieval', 0.1)
)
SELECT
    s.model,
    s.probe,
    s.run_id,
    s.role,
    max(s.probes)                                                        AS probes,
    count(*)                                                             AS heads,
    list({'layer': s.layer, 'head': s.head, 'value': CAST(s.value AS DOUBLE)}
         ORDER BY s.value DESC, s.layer, s.head)[1:3]                    AS top,
    t.threshold,
    CASE WHEN t.threshold IS NOT NULL THEN count(*) FILTER (WHERE s.value > t.threshold) END AS above
FROM scores AS s
JOIN thresholds AS t USING (role)
-- Each role on the probes it is read on: the previous-token score of needles is left out.
WHERE s.probe = 'induction' OR s.role = 'retrieval'
GROUP BY s.model, s.probe, s.run_id, s.role, t.threshold
ORDER BY s.model, s.run_id, array_position(['induction', 'previous_token', 'duplicate', 'retrieval'], s.role);
