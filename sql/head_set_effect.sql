-- name: head_set_effect
-- title: Per run and set of heads disabled together: answer accuracy and loss on the probes solved, the change, its bootstrap interval and p
-- params: run, model, mode, span, solved, resamples, seed
-- docs/ablation.md#head-sets (Wu et al. 2025: masking the top-k retrieval heads breaks
-- needle-in-a-haystack answers, masking k random heads does not). One row per set of heads
-- (ablation_configs.kind = 'set': top-K ROLE, random-K with its draw, heads L.H,…) of a loss
-- ablation run (`attnwh ingest ablation --probe passkey --disable-top retrieval:10 --random-heads
-- 10`). Per probe and span (default answer): accuracy = correct / tokens (the share of the span's
-- tokens the model predicts greedily) and loss = nats / tokens. The unit that varies is the
-- probe: every mean, interval and test is over probes, each weighing the same.
--   probes, baseline_accuracy_all: the run's probes and the unrestricted model's mean accuracy
--   over all of them (near 0: the probe says nothing about these heads);
--   solved: the probes whose baseline accuracy is >= solved (default 1: answered token for
--   token), the ones the comparison is over; baseline_accuracy, baseline_loss on them;
--   accuracy, loss: the same probes with the set disabled; accuracy_all: over all probes;
--   accuracy_delta = accuracy - baseline_accuracy (< 0: answers lost), loss_delta = loss -
--   baseline_loss (> 0: the loss rose), each with a 95 % percentile bootstrap interval over the
--   solved probes (resamples, default 1000, each probe drawn by a hash of seed (default 0), run,
--   resample and draw; the same resamples for every set of the run) and the two-sided p of the
--   paired sign-flip test of
--   the summed differences (each probe's difference keeps or flips its sign: exact over all 2^n
--   flips when 2^n <= resamples, else resamples random flips, p = (1 + hits) / (1 + resamples));
--   p is not adjusted across sets;
--   set_name, draws, draws_mean_delta, draws_sd_delta, draws_min_delta, draws_max_delta: for
--   random draws, their set (label without the draw) and the mean, sample standard deviation,
--   least and greatest accuracy_delta across its draws (NULL for other sets).
-- run is a run_id, model a model name; NULL = all.
WITH params AS (
    SELECT
        coalesce(CAST($span AS VARCHAR), 'answer')       AS span,
        coalesce(CAST($solved AS DOUBLE), 1.0)           AS solved,
        coalesce(CAST($resamples AS INTEGER), 1000)      AS resamples,
        coalesce(CAST($seed AS BIGINT), 0)               AS seed
),
per_probe AS (
    SELECT l.run_id, l.config_id, l.example_id,
           l.correct / l.tokens AS accuracy,
           l.nats / l.tokens    AS loss
    FROM ablation_losses AS l, params AS p
    WHERE l.span = p.span AND l.tokens > 0 AND ($run IS NULL OR l.run_id = $run)
      AND l.run_id IN (SELECT run_id FROM ablation_configs WHERE kind = 'set')
),
base AS (
    SELECT run_id, example_id, accuracy, loss FROM per_probe WHERE config_id = 0
),
coverage AS (
    SELECT b.run_id, count(*) AS probes, avg(b.accuracy) AS baseline_accuracy_all,
           count(*) FILTER (WHERE b.accuracy >= p.solved) AS solved
    FROM base AS b, params AS p
    GROUP BY b.run_id
),
solved AS (
    -- The probes the unrestricted model solves, numbered 0..n-1 per run for the resamples.
    SELECT b.run_id, b.example_id, b.accuracy, b.loss,
           row_number() OVER (PARTITION BY b.run_id ORDER BY b.example_id) - 1 AS i,
           count(*) OVER (PARTITION BY b.run_id) AS n
    FROM base AS b, params AS p
    WHERE b.accuracy >= p.solved
),
sets AS (
    SELECT run_id, config_id, mode, label, draw, k, n_disabled, disabled, roles_run
    FROM ablation_configs
    WHERE kind = 'set' AND ($run IS NULL OR run_id = $run) AND ($mode IS NULL OR mode = $mode)
),
paired AS (
    SELECT s.run_id, s.config_id, v.i, v.n,
           v.accuracy AS base_accuracy, q.accuracy, q.accuracy - v.accuracy AS d_accuracy,
           v.loss AS base_loss, q.loss, q.loss - v.loss AS d_loss
    FROM sets AS s
    JOIN solved AS v USING (run_id)
    JOIN per_probe AS q ON q.run_id = s.run_id AND q.config_id = s.config_id AND q.example_id = v.example_id
),
observed AS (
    SELECT run_id, config_id, any_value(n) AS n,
           avg(base_accuracy) AS baseline_accuracy, avg(accuracy) AS accuracy, avg(d_accuracy) AS accuracy_delta,
           avg(base_loss) AS baseline_loss, avg(loss) AS loss, avg(d_loss) AS loss_delta,
           sum(d_accuracy) AS sum_accuracy, sum(d_loss) AS sum_loss
    FROM paired
    GROUP BY run_id, config_id
),
every_probe AS (
    SELECT q.run_id, q.config_id, avg(q.accuracy) AS accuracy_all
    FROM per_probe AS q JOIN sets AS s USING (run_id, config_id)
    GROUP BY q.run_id, q.config_id
),
picks AS (
    -- Bootstrap resample b of run r takes probe hash('seed:r:b:j') mod n as its j-th draw (the
    -- hash of a string: that of several integers leaves its low bits correlated across draws).
    SELECT o.run_id, o.config_id, o.n, b.b, CAST(hash(concat_ws(':', p.seed, o.run_id, b.b, j.j)) % o.n AS BIGINT) AS i
    FROM observed AS o, params AS p, range(p.resamples) AS b(b), range(o.n) AS j(j)
),
boot AS (
    SELECT k.run_id, k.config_id, k.b, avg(d.d_accuracy) AS d_accuracy, avg(d.d_loss) AS d_loss
    FROM picks AS k
    JOIN paired AS d ON d.run_id = k.run_id AND d.config_id = k.config_id AND d.i = k.i
    GROUP BY k.run_id, k.config_id, k.b
),
intervals AS (
    SELECT run_id, config_id,
           quantile_cont(d_accuracy, 0.025) AS accuracy_ci_low, quantile_cont(d_accuracy, 0.975) AS accuracy_ci_high,
           quantile_cont(d_loss, 0.025) AS loss_ci_low, quantile_cont(d_loss, 0.975) AS loss_ci_high
    FROM boot
    GROUP BY run_id, config_id
),
flips AS (
    -- Every sign pattern f of the n probes where 2^n <= resamples (bit i of f flips probe i),
    -- else `resamples` random ones (hash of seed, run, f and the probe).
    SELECT o.run_id, o.config_id, f.f, o.n, (o.n <= 62 AND (1::BIGINT << o.n) <= p.resamples) AS exact
    FROM observed AS o, params AS p,
         range(CASE WHEN o.n <= 62 AND (1::BIGINT << o.n) <= p.resamples THEN 1::BIGINT << o.n
                    ELSE p.resamples END) AS f(f)
),
flipped AS (
    SELECT f.run_id, f.config_id, f.f, any_value(f.exact) AS exact,
           sum(CASE WHEN (CASE WHEN f.exact THEN (f.f >> d.i) & 1 ELSE hash(concat_ws(':', p.seed, 'flip', f.run_id, f.f, d.i)) % 2 END) = 1
                    THEN -d.d_accuracy ELSE d.d_accuracy END) AS s_accuracy,
           sum(CASE WHEN (CASE WHEN f.exact THEN (f.f >> d.i) & 1 ELSE hash(concat_ws(':', p.seed, 'flip', f.run_id, f.f, d.i)) % 2 END) = 1
                    THEN -d.d_loss ELSE d.d_loss END) AS s_loss
    FROM flips AS f
    JOIN paired AS d ON d.run_id = f.run_id AND d.config_id = f.config_id
    CROSS JOIN params AS p
    GROUP BY f.run_id, f.config_id, f.f
),
tests AS (
    -- Two-sided: a flip as extreme as the observed sum (within rounding) counts.
    SELECT x.run_id, x.config_id,
           CASE WHEN any_value(x.exact)
                THEN avg(CASE WHEN abs(x.s_accuracy) >= abs(o.sum_accuracy) * (1 - 1e-9) - 1e-12 THEN 1.0 ELSE 0.0 END)
                ELSE (1 + count(*) FILTER (WHERE abs(x.s_accuracy) >= abs(o.sum_accuracy) * (1 - 1e-9) - 1e-12))
                     / (1 + count(*)) END AS accuracy_p,
           CASE WHEN any_value(x.exact)
                THEN avg(CASE WHEN abs(x.s_loss) >= abs(o.sum_loss) * (1 - 1e-9) - 1e-12 THEN 1.0 ELSE 0.0 END)
                ELSE (1 + count(*) FILTER (WHERE abs(x.s_loss) >= abs(o.sum_loss) * (1 - 1e-9) - 1e-12))
                     / (1 + count(*)) END AS loss_p
    FROM flipped AS x
    JOIN observed AS o USING (run_id, config_id)
    GROUP BY x.run_id, x.config_id
),
rows AS (
    SELECT
        m.name AS model, r.task, r.split, s.run_id, s.mode, (SELECT span FROM params) AS span,
        s.config_id, s.label, s.draw, s.k, s.disabled, s.roles_run,
        c.probes, c.baseline_accuracy_all, c.solved,
        o.baseline_accuracy, o.accuracy, e.accuracy_all, o.accuracy_delta,
        i.accuracy_ci_low, i.accuracy_ci_high, t.accuracy_p,
        o.baseline_loss, o.loss, o.loss_delta, i.loss_ci_low, i.loss_ci_high, t.loss_p,
        CASE WHEN s.draw IS NOT NULL THEN s.label END AS set_name
    FROM sets AS s
    JOIN runs AS r ON r.run_id = s.run_id
    JOIN models AS m ON m.model_id = r.model_id
    LEFT JOIN coverage AS c ON c.run_id = s.run_id
    LEFT JOIN observed AS o ON o.run_id = s.run_id AND o.config_id = s.config_id
    LEFT JOIN every_probe AS e ON e.run_id = s.run_id AND e.config_id = s.config_id
    LEFT JOIN intervals AS i ON i.run_id = s.run_id AND i.config_id = s.config_id
    LEFT JOIN tests AS t ON t.run_id = s.run_id AND t.config_id = s.config_id
    WHERE $model IS NULL OR m.name = $model
)
SELECT
    *,
    CASE WHEN set_name IS NOT NULL THEN count(*) OVER draws END                    AS draws,
    CASE WHEN set_name IS NOT NULL THEN avg(accuracy_delta) OVER draws END         AS draws_mean_delta,
    CASE WHEN set_name IS NOT NULL THEN stddev_samp(accuracy_delta) OVER draws END AS draws_sd_delta,
    CASE WHEN set_name IS NOT NULL THEN min(accuracy_delta) OVER draws END         AS draws_min_delta,
    CASE WHEN set_name IS NOT NULL THEN max(accuracy_delta) OVER draws END         AS draws_max_delta
FROM rows
WINDOW draws AS (PARTITION BY run_id, set_name)
ORDER BY model, run_id, draw IS NOT NULL, config_id;
