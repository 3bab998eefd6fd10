-- name: sink_heads_of_run
-- title: The sink heads of an ablation run's model on the run's own examples, from a statistics run of the same weights
-- params: run, eps
-- What `attnwh ingest ablation` disables together as its 'sinks' combination (Gu et al.
-- 2025; docs/metrics.md#attention-sinks). run is the ablation run's run_id. The statistics
-- come from a statistics run (runs.kind = 'statistics') of a model with the same weights
-- (models.weights_hash) whose run_examples hold every example of the ablation run; of
-- several, one read through the ablation run's own prompt (runs.prompt: a prompted sweep's
-- sinks are those of the prompts' maps, `attnwh ingest --prompt`; a run without a prompt
-- prefers one without), then the one with the ablation run's max_length (truncation changes
-- the maps), then a complete one, then the latest. Per head of that model: the mean to_cls, to_sep and to_punct
-- over exactly the ablation run's examples (the statistics run may hold more: samples are
-- nested), the sink score (the largest of the three) and its kind (ties: [CLS], then [SEP]),
-- and sink = sink score > eps (default 0.3): the head is a sink head for some token kind.
-- No rows when no statistics run holds every example: `attnwh ingest` on them adds one.
-- The view ablation_sink_scores holds the scores; sink_vs_ablation reads it too.
SELECT
    s.ablation_run,
    s.statistics_run,
    s.examples,
    s.layer,
    s.head,
    s.to_cls,
    s.to_sep,
    s.to_punct,
    s.sink_score,
    s.sink_kind,
    t.eps,
    s.sink_score > t.eps AS sink
FROM ablation_sink_scores AS s
CROSS JOIN (SELECT coalesce(CAST($eps AS DOUBLE), 0.3) AS eps) AS t
WHERE s.ablation_run = $run
ORDER BY s.layer, s.head;
