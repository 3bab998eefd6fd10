-- name: sink_heads_of_run
-- title: The sink heads of an ablation run's model on the run's own examples, from a statistics run of the same weights
-- params: run, eps
-- What `attnwh ingest ablation` disables together as its 'sinks' combination (Gu et al.
-- 2025; docs/metrics.md#attention-sinks). run is the ablation run's run_id. The statistics
-- come from a statistics run (runs.kind = 'statistics') of a model with the same weights
-- (models.weights_hash) whose run_examples hold every example of the ablation run; of
-- several, the one with the ablation run's max_length (truncation changes the maps), then a
-- complete one, then the latest. Per head of that model: the mean to_cls, to_sep and to_punct
-- over exactly the ablation run's examples (the statistics run may hold more: samples are
-- nested), the sink score (the largest of the three) and its kind (ties: [CLS], then [SEP]),
-- and sink = sink score > eps (default 0.3): the head is a sink head for some token kind.
-- No rows when no statistics run holds every example: `attnwh ingest` on them adds one.
-- sink_vs_ablation picks the statistics run by the same rule.
WITH settings AS (
    SELECT coalesce(CAST($eps AS DOUBLE), 0.3) AS eps
),
ablation AS (
    SELECT r.run_id, r.max_length, m.weights_hash
    FROM runs AS r
    JOIN models AS m USING (model_id)
    WHERE r.kind = 'ablation' AND r.run_id = $run
),
wanted AS (
    SELECT example_id FROM run_examples WHERE run_id = $run
),
candidates AS (
    SELECT s.run_id, s.status, s.max_length
    FROM ablation AS a
    JOIN models AS m ON m.weights_hash = a.weights_hash
    JOIN runs AS s ON s.model_id = m.model_id AND s.kind = 'statistics'
    JOIN run_examples AS e ON e.run_id = s.run_id
    JOIN wanted AS w ON w.example_id = e.example_id
    GROUP BY s.run_id, s.status, s.max_length
    HAVING count(*) = (SELECT count(*) FROM wanted)
),
chosen AS (
    SELECT c.run_id
    FROM candidates AS c
    CROSS JOIN ablation AS a
    ORDER BY (c.max_length = a.max_length) DESC, (c.status = 'complete') DESC, c.run_id DESC
    LIMIT 1
),
means AS (
    SELECT
        h.run_id,
        h.layer,
        h.head,
        count(*)         AS examples,
        avg(h.to_cls)    AS to_cls,
        avg(h.to_sep)    AS to_sep,
        avg(h.to_punct)  AS to_punct
    FROM head_stats AS h
    JOIN chosen AS c USING (run_id)
    JOIN wanted AS w USING (example_id)
    GROUP BY h.run_id, h.layer, h.head
)
SELECT
    CAST($run AS INTEGER)                                   AS ablation_run,
    m.run_id                                                AS statistics_run,
    m.examples,
    m.layer,
    m.head,
    m.to_cls,
    m.to_sep,
    m.to_punct,
    greatest(m.to_cls, m.to_sep, m.to_punct)                AS sink_score,
    CASE greatest(m.to_cls, m.to_sep, m.to_punct)
        WHEN m.to_cls THEN '[CLS]' WHEN m.to_sep THEN '[SEP]' ELSE 'punctuation' END AS sink_kind,
    t.eps,
    greatest(m.to_cls, m.to_sep, m.to_punct) > t.eps        AS sink
FROM means AS m
CROSS JOIN settings AS t
ORDER BY m.layer, m.head;
