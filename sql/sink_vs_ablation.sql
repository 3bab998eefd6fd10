-- name: sink_vs_ablation
-- title: Are sink heads the ones that can be removed? Per head, sink score against the effect of disabling it
-- params: model, task, eps, metric, n_boot, seed
-- One row per ablation run and head (docs/metrics.md#attention-sinks; Gu et al. 2025 against
-- Kovaleva et al.'s Fig. 8). The sink scores come from a statistics run of the same weights
-- whose run_examples hold every example of the ablation run (view ablation_sink_scores: the
-- ablation run's max_length first, then a complete run, then the latest), averaged over
-- exactly the ablation run's examples: to_cls, to_sep, to_punct, sink_score = the largest of
-- the three, sink_kind = which (ties: [CLS], then [SEP]; 'first token' for a decoder's run,
-- whose to_cls is its first token's and to_sep NULL), sink = sink_score > eps (default
-- 0.3). Beside them, the head's own ablation effect on `metric` (default: the run's main
-- metric, the one its combinations were chosen by: mcc, else f1, else pearson, else
-- accuracy, of those the run scored): delta (disabled minus baseline), its 95 % interval, p
-- and Benjamini–Hochberg adjusted p. An ablation run with no such statistics run has no
-- rows; `attnwh ingest` on its examples adds one.
-- Per run, repeated on each of its rows: heads and sink_heads; spearman = Spearman's rho
-- between sink_score and delta across the heads (average ranks for ties; NULL when either
-- is constant); spearman_low, spearman_high = the 95 % percentile bootstrap interval of rho
-- over n_boot (default 1000) resamples of the heads with replacement, ranks recomputed in
-- each, resamples with an undefined rho left out (boot_rho = how many remain); the draws
-- are hash(seed, run, resample, position), so the interval is the same for the same seed
-- (default 42) and DuckDB version. sinks_*: the run's stored 'sinks' combination on the same
-- metric (every sink head at 0.3 disabled together, p unadjusted), NULL when it has none.
WITH settings AS (
    SELECT
        coalesce(CAST($eps AS DOUBLE), 0.3)      AS eps,
        coalesce(CAST($n_boot AS BIGINT), 1000)  AS n_boot,
        coalesce(CAST($seed AS BIGINT), 42)      AS seed
),
ablation AS (
    SELECT r.run_id
    FROM runs AS r
    JOIN models AS m USING (model_id)
    WHERE r.kind = 'ablation'
      AND ($model IS NULL OR m.name = $model)
      AND ($task IS NULL OR r.task = $task)
),
main_metric AS (
    -- metrics_for(task)[0] read off the metrics a run stores: {mcc}, {f1, accuracy},
    -- {pearson, spearman} or {accuracy}.
    SELECT run_id, first(metric ORDER BY coalesce(list_position(['mcc', 'f1', 'pearson', 'accuracy'], metric), 99), metric) AS metric
    FROM ablations
    WHERE run_id IN (SELECT run_id FROM ablation)
    GROUP BY run_id
),
effects AS (
    SELECT
        v.model, v.task, v.split, v.run_id, v.mode, v.metric, v.layer, v.head,
        v.baseline, v.value, v.delta, v.ci_low, v.ci_high, v.p_value, v.p_adjusted, v.significant
    FROM ablation_results AS v
    JOIN main_metric AS mm USING (run_id)
    WHERE v.kind = 'head' AND v.metric = coalesce($metric, mm.metric)
),
paired AS (
    SELECT
        e.*,
        m.statistics_run,
        m.examples,
        m.to_cls,
        m.to_sep,
        m.to_punct,
        m.sink_score,
        m.sink_kind,
        t.eps,
        m.sink_score > t.eps AS sink
    FROM effects AS e
    JOIN ablation_sink_scores AS m ON m.ablation_run = e.run_id AND m.layer = e.layer AND m.head = e.head
    CROSS JOIN settings AS t
),
ranked AS (
    SELECT
        *,
        rank() OVER (PARTITION BY run_id ORDER BY sink_score)
            + (count(*) OVER (PARTITION BY run_id, sink_score) - 1) / 2.0  AS score_rank,
        rank() OVER (PARTITION BY run_id ORDER BY delta)
            + (count(*) OVER (PARTITION BY run_id, delta) - 1) / 2.0       AS delta_rank,
        row_number() OVER (PARTITION BY run_id ORDER BY layer, head) - 1   AS position
    FROM paired
),
per_run AS (
    SELECT
        run_id,
        count(*)                                            AS heads,
        count(*) FILTER (WHERE sink)                        AS sink_heads,
        -- Pearson's r of the ranks from their sums, which are exact (ranks are halves), so rho
        -- does not depend on the order DuckDB's threads add them up; NULL (not NaN) when
        -- every head has the same score or the same effect.
        (count(*) * sum(score_rank * delta_rank) - sum(score_rank) * sum(delta_rank))
            / sqrt(nullif((count(*) * sum(score_rank * score_rank) - sum(score_rank) ^ 2)
                          * (count(*) * sum(delta_rank * delta_rank) - sum(delta_rank) ^ 2), 0)) AS spearman
    FROM ranked
    GROUP BY run_id
),
draws AS (
    SELECT p.run_id, p.resample, h.sink_score, h.delta
    FROM (
        SELECT r.run_id, r.heads, t.seed, b.resample, unnest(range(r.heads)) AS slot
        FROM per_run AS r
        CROSS JOIN settings AS t
        CROSS JOIN (SELECT unnest(range(n_boot)) AS resample FROM settings) AS b
    ) AS p
    JOIN ranked AS h
      ON h.run_id = p.run_id
     AND h.position = (hash(p.seed, p.run_id, p.resample, p.slot) % p.heads::UBIGINT)::BIGINT
),
resampled AS (
    SELECT
        run_id,
        resample,
        rank() OVER (PARTITION BY run_id, resample ORDER BY sink_score)
            + (count(*) OVER (PARTITION BY run_id, resample, sink_score) - 1) / 2.0  AS score_rank,
        rank() OVER (PARTITION BY run_id, resample ORDER BY delta)
            + (count(*) OVER (PARTITION BY run_id, resample, delta) - 1) / 2.0       AS delta_rank
    FROM draws
),
replicates AS (
    SELECT
        run_id,
        resample,
        (count(*) * sum(score_rank * delta_rank) - sum(score_rank) * sum(delta_rank))
            / sqrt(nullif((count(*) * sum(score_rank * score_rank) - sum(score_rank) ^ 2)
                          * (count(*) * sum(delta_rank * delta_rank) - sum(delta_rank) ^ 2), 0)) AS rho
    FROM resampled
    GROUP BY run_id, resample
),
intervals AS (
    SELECT
        run_id,
        quantile_cont(rho, 0.025)  AS spearman_low,
        quantile_cont(rho, 0.975)  AS spearman_high,
        count(rho)                 AS boot_rho
    FROM replicates
    GROUP BY run_id
),
together AS (
    SELECT v.run_id, v.n_disabled, v.delta, v.ci_low, v.ci_high, v.p_value
    FROM ablation_results AS v
    JOIN (SELECT DISTINCT run_id, metric FROM effects) AS e USING (run_id, metric)
    WHERE v.kind = 'sinks'
)
SELECT
    h.model, h.task, h.split, h.run_id, h.mode, h.metric, h.statistics_run, h.examples,
    h.layer, h.head,
    h.to_cls, h.to_sep, h.to_punct, h.sink_score,
    CASE WHEN coalesce(m.causal, false) AND h.sink_kind = '[CLS]' THEN 'first token' ELSE h.sink_kind END AS sink_kind,
    h.eps, h.sink,
    h.baseline, h.value, h.delta, h.ci_low, h.ci_high, h.p_value, h.p_adjusted, h.significant,
    r.heads, r.sink_heads, r.spearman, i.spearman_low, i.spearman_high, i.boot_rho,
    g.n_disabled AS sinks_disabled,
    g.delta      AS sinks_delta,
    g.ci_low     AS sinks_ci_low,
    g.ci_high    AS sinks_ci_high,
    g.p_value    AS sinks_p_value
FROM ranked AS h
JOIN per_run AS r USING (run_id)
LEFT JOIN intervals AS i USING (run_id)
LEFT JOIN together AS g USING (run_id)
JOIN runs AS a ON a.run_id = h.run_id
JOIN models AS m ON m.model_id = a.model_id
ORDER BY h.model, h.task, h.split, h.run_id, h.layer, h.head;
