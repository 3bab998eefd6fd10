-- name: pattern_frequency
-- title: Share of each attention pattern type per model and task, with a bootstrap interval over examples
-- params: model, task, classifier, n_boot, seed
-- One row per statistics run and pattern type: how many of the run's (example, layer, head)
-- maps have that type, and their share of the run's maps (Kovaleva et al. Fig. 2).
-- classifier 'stored' (the default) reads head_stats.pattern, every map of the run: the types
-- the ingest gave (the shipped classifier) or the last `attnwh patterns reclassify`; 'cnn'
-- reads the labels a trained CNN gave the stored thumbnails (`attnwh patterns reclassify
-- --classifier cnn`), a seeded sample of examples. share_low, share_high = the 95 %
-- percentile bootstrap interval of the share over n_boot (default 1000) resamples of the
-- run's examples with replacement (every map of a drawn example counts, so heads of one
-- example stay together); draws are hash(seed, run, resample, position), the same for the
-- same seed (default 42) and DuckDB version. examples = the examples resampled. model is a
-- model name as stored; NULL = all.
WITH settings AS (
    SELECT
        coalesce(CAST($n_boot AS BIGINT), 1000)  AS n_boot,
        coalesce(CAST($seed AS BIGINT), 42)      AS seed
),
labelled AS (
    SELECT run_id, example_id, pattern FROM head_stats
    WHERE coalesce($classifier, 'stored') = 'stored' AND pattern IS NOT NULL
    UNION ALL
    SELECT run_id, example_id, cnn_pattern FROM pattern_thumbnails
    WHERE $classifier = 'cnn' AND cnn_pattern IS NOT NULL
),
chosen AS (
    SELECT m.name AS model, r.task, r.split, r.run_id
    FROM runs AS r
    JOIN models AS m USING (model_id)
    WHERE r.kind = 'statistics'
      AND ($model IS NULL OR m.name = $model)
      AND ($task IS NULL OR r.task = $task)
      AND r.run_id IN (SELECT run_id FROM labelled)
),
per_example AS (
    -- Maps of each type per example, every type present (0 where none).
    SELECT e.run_id, e.example_id, t.pattern, coalesce(c.maps, 0) AS maps
    FROM (SELECT DISTINCT run_id, example_id FROM labelled WHERE run_id IN (SELECT run_id FROM chosen)) AS e
    CROSS JOIN pattern_types AS t
    LEFT JOIN (
        SELECT run_id, example_id, pattern, count(*) AS maps FROM labelled GROUP BY ALL
    ) AS c USING (run_id, example_id, pattern)
),
positions AS (
    SELECT run_id, example_id,
           row_number() OVER (PARTITION BY run_id ORDER BY example_id) - 1 AS position,
           count(*) OVER (PARTITION BY run_id)                            AS examples
    FROM (SELECT DISTINCT run_id, example_id FROM per_example)
),
draws AS (
    -- Per run and resample, how often each example is drawn.
    SELECT p.run_id, p.resample, x.example_id, count(*) AS times
    FROM (
        SELECT r.run_id, r.examples, t.seed, b.resample, unnest(range(r.examples)) AS slot
        FROM (SELECT DISTINCT run_id, examples FROM positions) AS r
        CROSS JOIN settings AS t
        CROSS JOIN (SELECT unnest(range(n_boot)) AS resample FROM settings) AS b
    ) AS p
    JOIN positions AS x
      ON x.run_id = p.run_id
     AND x.position = (hash(p.seed, p.run_id, p.resample, p.slot) % p.examples::UBIGINT)::BIGINT
    GROUP BY ALL
),
replicates AS (
    SELECT d.run_id, d.resample, e.pattern,
           sum(d.times * e.maps) / sum(sum(d.times * e.maps)) OVER (PARTITION BY d.run_id, d.resample) AS share
    FROM draws AS d
    JOIN per_example AS e USING (run_id, example_id)
    GROUP BY d.run_id, d.resample, e.pattern
),
intervals AS (
    SELECT run_id, pattern,
           quantile_cont(share, 0.025) AS share_low,
           quantile_cont(share, 0.975) AS share_high
    FROM replicates
    GROUP BY ALL
),
totals AS (
    SELECT run_id, pattern, CAST(sum(maps) AS BIGINT) AS maps FROM per_example GROUP BY ALL
)
SELECT
    c.model,
    c.task,
    c.split,
    c.run_id,
    t.name                                                         AS pattern,
    s.maps,
    s.maps / sum(s.maps) OVER (PARTITION BY c.run_id)              AS share,
    i.share_low,
    i.share_high,
    p.examples
FROM chosen AS c
JOIN totals AS s USING (run_id)
JOIN pattern_types AS t USING (pattern)
JOIN intervals AS i USING (run_id, pattern)
JOIN (SELECT DISTINCT run_id, examples FROM positions) AS p USING (run_id)
ORDER BY c.model, c.task, c.split, c.run_id, t.pattern;
