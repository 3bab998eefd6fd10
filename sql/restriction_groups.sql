-- name: restriction_groups
-- title: Each key/value group restricted alone to sinks + a window: the loss change, its test and the KV memory it frees
-- params: model, run
-- One row per restriction run, layer and key/value group (`attnwh ingest restriction`,
-- docs/whole-context.md), least harmed first (rank 1): the group alone keeps only the first
-- S tokens and the last W up to each query (every query head of the group; DuoAttention,
-- Xiao et al. 2024), its attention renormalised over them. delta = loss − the unrestricted
-- loss (nats per token) with its 95 % paired bootstrap interval over sequences; p_value: a
-- two-sided paired sign-flip permutation test of delta over sequences; p_adjusted:
-- Benjamini–Hochberg across the run's groups. kv_bytes_saved: the group's cache beyond its
-- sinks and window for one sequence of kv_context tokens. With needle probes (needles > 0):
-- needle_accuracy, the share of their answer tokens still predicted greedily with the group
-- restricted (needle_accuracy_unrestricted without), and needle_delta, the answer tokens'
-- loss change; NULL otherwise. NULL = all.
SELECT
    m.name                        AS model,
    g.run_id,
    g.rank,
    g.layer,
    g.kv_group,
    g.loss,
    g.delta,
    g.ci_low,
    g.ci_high,
    g.p_value,
    g.p_adjusted,
    g.p_adjusted < 0.05           AS significant,
    g.kv_bytes_saved,
    g.needle_accuracy,
    g.needle_delta,
    s.needle_accuracy             AS needle_accuracy_unrestricted,
    s.needles,
    s.kv_context,
    s.sinks,
    s."window"
FROM restriction_groups AS g
JOIN restriction_runs AS s USING (run_id)
JOIN runs AS r USING (run_id)
JOIN models AS m USING (model_id)
WHERE ($model IS NULL OR m.name = $model)
  AND ($run IS NULL OR g.run_id = CAST($run AS INTEGER))
ORDER BY g.run_id, g.rank;
