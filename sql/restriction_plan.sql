-- name: restriction_plan
-- title: The restriction curve: KV memory saved against loss increase as the k least harmed key/value groups keep only sinks + a window
-- params: model, run
-- One row per restriction run and k (`attnwh ingest restriction`, docs/whole-context.md): the
-- k key/value groups whose own restriction to S sinks + a window of W harmed the loss least
-- (restriction_groups.rank 1..k), restricted together, their loss measured with exactly that
-- set (nats per token); delta = loss − the unrestricted loss, with its 95 % paired bootstrap
-- interval over sequences and a paired sign-flip permutation p. kv_bytes_saved: the KV-cache bytes one
-- sequence of kv_context tokens no longer needs, Σ_layers |R_l| · (n_l − S − W) · 2 · d_head ·
-- bytes per value (kv_dtype), of kv_bytes for the whole cache (saved_share); the same at the
-- run's own context_length in kv_bytes_saved_run. With needle probes (needles > 0):
-- needle_accuracy, the share of their answer tokens predicted greedily with exactly this set
-- restricted, and needle_delta, the answer tokens' loss change; NULL otherwise. k = 0 is the
-- model as it is. NULL = all.
SELECT
    m.name                                          AS model,
    p.run_id,
    p.k,
    g.n_groups,
    p.groups,
    p.loss,
    p.delta,
    p.ci_low,
    p.ci_high,
    p.p_value,
    p.needle_accuracy,
    p.needle_delta,
    s.needles,
    p.kv_bytes_saved,
    s.kv_bytes,
    p.kv_bytes_saved / s.kv_bytes                   AS saved_share,
    s.kv_context,
    p.kv_bytes_saved_run,
    s.kv_bytes_run,
    s.context_length,
    s.kv_dtype,
    s.sinks,
    s."window",
    s.sequences,
    s.tokens
FROM restriction_plan AS p
JOIN restriction_runs AS s USING (run_id)
JOIN (SELECT run_id, count(*) AS n_groups FROM restriction_groups GROUP BY run_id) AS g USING (run_id)
JOIN runs AS r USING (run_id)
JOIN models AS m USING (model_id)
WHERE ($model IS NULL OR m.name = $model)
  AND ($run IS NULL OR p.run_id = CAST($run AS INTEGER))
ORDER BY p.run_id, p.k;
