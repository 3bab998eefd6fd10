-- name: findings_sinks
-- title: Where attention sinks emerge: per head-roles run, the heads whose mean first-token share exceeds eps (0.3)
-- params: model, eps
-- Gu et al. (2025)'s Sink^eps of a whole model: one row per head-roles run (`attnwh ingest
-- roles`; probe = runs.task: random, text, induction or needle), the share of the model's
-- query heads whose sink score (head_roles.sink, the mean over a probe's rows of the weight
-- on the first token) averaged over the run's probes exceeds eps (default 0.3). tokens: each
-- probe's length (role_probes), min and max. Gu et al. read inputs of 64 tokens, natural text
-- and random tokens (`--probes random,text`). model: a model name as stored; NULL = all.
WITH threshold AS (SELECT coalesce(CAST($eps AS DOUBLE), 0.3) AS eps),
lengths AS (
    SELECT run_id, min(len(token_ids)) AS min_tokens, max(len(token_ids)) AS max_tokens
    FROM role_probes
    GROUP BY run_id
)
SELECT
    h.model,
    h.probe,
    h.run_id,
    t.eps,
    any_value(h.probes)                                   AS probes,
    l.min_tokens,
    l.max_tokens,
    count(*)                                              AS heads,
    count(*) FILTER (WHERE h.sink > t.eps)                AS sink_heads,
    count(*) FILTER (WHERE h.sink > t.eps) / count(*)     AS sink_share,
    avg(h.sink)                                           AS mean_sink
FROM head_role_means AS h
CROSS JOIN threshold AS t
JOIN lengths AS l USING (run_id)
WHERE $model IS NULL OR h.model = $model
GROUP BY h.model, h.probe, h.run_id, t.eps, l.min_tokens, l.max_tokens
ORDER BY h.model, h.run_id;
