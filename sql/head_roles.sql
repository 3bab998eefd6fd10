-- name: head_roles
-- title: Each decoder head's role scores, averaged over a head-roles run's probes, with the head's rank by each score
-- params: model, run, probe
-- docs/metrics.md#head-roles. One row per head-roles run (runs.kind = 'roles'; probe:
-- induction or needle, the run's task), layer and query head: the mean over the run's probes
-- of each score of head_roles (NULL where the probe kind does not define it: induction and
-- duplicate on needles, retrieval on induction probes) and the head's rank among the run's
-- heads by that score (1 = highest; ties share a rank). kv_group is the key/value group the
-- head reads under grouped-query attention (head_groups). Rows come ranked by the score the
-- run's probes are for (induction on induction probes, retrieval on needles): "which heads"
-- first; query head_roles_top gives every score's top heads.
WITH means AS (
    SELECT *
    FROM head_role_means
    WHERE ($model IS NULL OR model = $model)
      AND ($run IS NULL OR run_id = CAST($run AS INTEGER))
      AND ($probe IS NULL OR probe = $probe)
)
SELECT
    *,
    rank() OVER (PARTITION BY run_id ORDER BY previous_token DESC) AS previous_token_rank,
    CASE WHEN induction IS NOT NULL THEN rank() OVER (PARTITION BY run_id ORDER BY induction DESC NULLS LAST) END AS induction_rank,
    CASE WHEN duplicate IS NOT NULL THEN rank() OVER (PARTITION BY run_id ORDER BY duplicate DESC NULLS LAST) END AS duplicate_rank,
    CASE WHEN retrieval IS NOT NULL THEN rank() OVER (PARTITION BY run_id ORDER BY retrieval DESC NULLS LAST) END AS retrieval_rank,
    rank() OVER (PARTITION BY run_id ORDER BY sink DESC) AS sink_rank,
    rank() OVER (PARTITION BY run_id ORDER BY local_mass DESC) AS local_mass_rank
FROM means
ORDER BY model, run_id, coalesce(induction_rank, retrieval_rank), layer, head;
