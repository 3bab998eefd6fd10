-- name: sink_heads
-- title: Attention sinks per layer and token kind: heads whose mean attention to it exceeds eps (default 0.3), and their share
-- params: model, task, eps
-- Gu et al. (2025): a head is a sink head for a token kind ([CLS], [SEP], punctuation) when
-- its attention to that kind, averaged over query rows (docs/metrics.md) and over the run's
-- examples (head_means), exceeds eps; sink_share is Sink^eps of the layer, the share of its
-- heads that are. Beside the shares by attention weight, the largest value-norm-weighted
-- share among the sink heads says how much of that attention carries anything (Kobayashi).
WITH threshold AS (SELECT coalesce(CAST($eps AS DOUBLE), 0.3) AS eps),
means AS (
    -- causal: a decoder's run, whose sink candidate is its first token and which has no [SEP].
    SELECT h.*, coalesce(m.causal, false) AS causal
    FROM head_means AS h
    JOIN runs AS r USING (run_id)
    JOIN models AS m USING (model_id)
),
shares AS (
    SELECT model, task, split, run_id, layer, head,
           CASE WHEN causal THEN 'first token' ELSE '[CLS]' END AS token, to_cls AS share, norm_to_cls AS norm_share
    FROM means
    UNION ALL
    SELECT model, task, split, run_id, layer, head, '[SEP]', to_sep, norm_to_sep FROM means WHERE NOT causal
    UNION ALL
    SELECT model, task, split, run_id, layer, head, 'punctuation', to_punct, norm_to_punct FROM means
)
SELECT
    s.model,
    s.task,
    s.split,
    s.run_id,
    s.layer,
    s.token,
    t.eps,
    count(*)                                                             AS heads,
    count(*) FILTER (WHERE s.share > t.eps)                              AS sink_heads,
    count(*) FILTER (WHERE s.share > t.eps) / count(*)                   AS sink_share,
    string_agg(s.head::VARCHAR, ',' ORDER BY s.head) FILTER (WHERE s.share > t.eps) AS which_heads,
    max(s.share)                                                         AS max_share,
    max(s.norm_share) FILTER (WHERE s.share > t.eps)                     AS max_norm_share_of_sinks
FROM shares AS s
CROSS JOIN threshold AS t
WHERE ($model IS NULL OR s.model = $model)
  AND ($task IS NULL OR s.task = $task)
GROUP BY ALL
ORDER BY s.model, s.task, s.run_id, s.layer, s.token;
