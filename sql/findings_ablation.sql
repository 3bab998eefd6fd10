-- name: findings_ablation
-- title: Findings per ablation run and metric: baseline, heads and layers that changed the score significantly, the smallest change the sample could show
-- params: model, task
-- One row per ablation run and metric (the report's "Findings" list): the score with
-- nothing disabled on n examples; how many single heads and whole layers were tested (m, the
-- Benjamini–Hochberg family of the run and metric) and how many changed the score with
-- adjusted p < 0.05, split by the sign of delta (raised: disabling helped); and what the
-- sample could detect at all (below). model is a model name as stored; NULL = all.
--
-- Smallest detectable change, accuracy (test 'mcnemar-exact'): the exact McNemar test is a
-- two-sided binomial test on the discordant examples. With a net change of d examples, the
-- most extreme outcome is all d discordant pairs in one direction, p = 2 * 0.5^d (more
-- discordant pairs in both directions only raise p), so |delta| = d / n is significant at
-- 0.05 only when 2 * 0.5^d < 0.05, i.e. d > log2(2 / 0.05): d >= floor(log2(40)) + 1 = 6
-- (detect_k). Benjamini–Hochberg adjusts the smallest of m p-values to at most p * m, and to
-- exactly p * m when no other test is small, so a head or layer whose change stands alone
-- survives the correction only when 2 * 0.5^d * m < 0.05: d >= floor(log2(2m / 0.05)) + 1
-- (detect_k_alone). floor + 1 is the strict inequality (log2(40m) is never an integer: 40m
-- has the factor 5). detect_delta* = that d / n; NULL when d > n (no change of this sample
-- can reach it). Many changes together need less (BH's threshold rises to 0.05 * j / m for
-- the j-th smallest p), never less than detect_k.
-- F1, MCC, Pearson, Spearman (test 'permutation'): p = (k + 1) / (R + 1) over R permutations,
-- so the smallest p the test can give is 1 / (R + 1) (min_p), whatever the effect; the
-- smallest detectable delta depends on the predictions, not on n alone, and is NULL here.
-- p_alone = 0.05 / m, the p a change standing alone must stay under to survive the
-- correction; alone_possible says whether min_p < p_alone, i.e. whether such a change can
-- survive at all (for McNemar: whether detect_k_alone <= n).
WITH scored AS (
    SELECT *
    FROM ablation_results
    WHERE ($model IS NULL OR model = $model)
      AND ($task IS NULL OR task = $task)
),
runs_metrics AS (
    SELECT
        model, task, split, run_id, mode, metric,
        first(baseline ORDER BY config_id)                                              AS baseline,
        max(examples)                                                                   AS n_examples,
        max(n_resamples)                                                                AS n_resamples,
        first(test ORDER BY config_id) FILTER (WHERE kind IN ('head', 'layer'))         AS test,
        count(*) FILTER (WHERE kind = 'head')                                           AS heads_tested,
        count(*) FILTER (WHERE kind = 'layer')                                          AS layers_tested,
        count(*) FILTER (WHERE kind = 'head' AND p_adjusted < 0.05)                     AS heads_significant,
        count(*) FILTER (WHERE kind = 'head' AND p_adjusted < 0.05 AND delta > 0)       AS heads_raised,
        count(*) FILTER (WHERE kind = 'head' AND p_adjusted < 0.05 AND delta < 0)       AS heads_lowered,
        count(*) FILTER (WHERE kind = 'layer' AND p_adjusted < 0.05)                    AS layers_significant,
        count(*) FILTER (WHERE kind = 'layer' AND p_adjusted < 0.05 AND delta > 0)      AS layers_raised,
        count(*) FILTER (WHERE kind = 'layer' AND p_adjusted < 0.05 AND delta < 0)      AS layers_lowered
    FROM scored
    GROUP BY model, task, split, run_id, mode, metric
),
detect AS (
    SELECT
        *,
        heads_tested + layers_tested AS tests,
        CASE WHEN test = 'mcnemar-exact' THEN (floor(log2(2 / 0.05)) + 1)::INTEGER END AS detect_k,
        CASE WHEN test = 'mcnemar-exact' AND heads_tested + layers_tested > 0
             THEN (floor(log2(2 * (heads_tested + layers_tested) / 0.05)) + 1)::INTEGER END AS detect_k_alone,
        CASE test WHEN 'mcnemar-exact' THEN 2 * power(0.5, n_examples)
                  WHEN 'permutation' THEN 1 / (n_resamples + 1) END AS min_p
    FROM runs_metrics
)
SELECT
    model, task, split, run_id, mode, metric, test,
    baseline, n_examples, n_resamples,
    heads_tested, layers_tested, tests,
    heads_significant, heads_raised, heads_lowered,
    layers_significant, layers_raised, layers_lowered,
    detect_k,
    CASE WHEN detect_k <= n_examples THEN detect_k / n_examples END             AS detect_delta,
    detect_k_alone,
    CASE WHEN detect_k_alone <= n_examples THEN detect_k_alone / n_examples END AS detect_delta_alone,
    min_p,
    0.05 / nullif(tests, 0)                                                     AS p_alone,
    min_p * tests < 0.05                                                        AS alone_possible
FROM detect
ORDER BY model, task, split, run_id, metric;
