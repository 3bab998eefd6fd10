-- name: icl_score
-- title: In-context learning score (Olsson et al. 2022): loss at token `late` − loss at `early`, bootstrap interval and sign-flip p over sequences
-- params: model, run, early, late, window, resamples, seed
-- One row per loss-curve run (`attnwh ingest loss-curve`, docs/whole-context.md#in-context-
-- learning-score). Positions are 0-based token indices: position t is the token predicted
-- from the t tokens before it (the BOS, where the tokenizer adds one, is t = 0). Olsson et
-- al.'s "500th token" is read as position 500 (`late`, default 500: predicted from 500
-- tokens of context; the run needs a context of 501 tokens or more) and their "50th" as
-- position 50 (`early`, default 50); give late = 499, early = 49 for 1-based counting.
-- With `window` w (default 1, Olsson's exact definition) each is the mean loss over the w
-- positions p − ⌊w/2⌋ .. p − ⌊w/2⌋ + w − 1 around it, one token per sequence being noisy.
-- Per sequence s: d_s = loss_late,s − loss_early,s; icl_score = mean_s d_s = loss_late −
-- loss_early (negative: later tokens are predicted better, the model uses its context).
-- ci_low / ci_high: the 95 % percentile bootstrap interval of the mean of d over sequences
-- (`resamples` resamples, default 9999, as scipy.stats.bootstrap); p_value: the two-sided
-- paired sign-flip permutation test of the mean of d (each sequence's d keeps or flips its
-- sign; scipy.stats.permutation_test with permutation_type='samples'): exact, every sign
-- vector enumerated, when 2^sequences ≤ resamples (exact_test), else `resamples` random
-- ones and p = 2·min(#{T ≤ T_obs} + 1, #{T ≥ T_obs} + 1) / (resamples + 1), at most 1.
-- Resampling is seeded (`seed`, default 0): DuckDB's hash of (seed, resample, draw), hashed
-- again to mix its low bits, so the same numbers on every call. Every comparison is over sequences, never over the tokens
-- of one sequence. A run given by `run` whose context lacks the positions is refused; with
-- no `run`, such runs are left out (and refused if no run has them). NULL = all.
WITH settings AS (
    SELECT
        CAST(coalesce($early, 50) AS INTEGER)       AS early,
        CAST(coalesce($late, 500) AS INTEGER)       AS late,
        CAST(coalesce($window, 1) AS INTEGER)       AS width,
        CAST(coalesce($resamples, 9999) AS BIGINT)  AS resamples,
        CAST(coalesce($seed, 0) AS BIGINT)          AS seed
),
bounds AS (
    SELECT
        *,
        early - width // 2              AS early_from,
        early - width // 2 + width - 1  AS early_to,
        late - width // 2               AS late_from,
        late - width // 2 + width - 1   AS late_to
    FROM settings
    WHERE CASE
        WHEN width < 1 THEN error('icl_score: window must be 1 or more positions')
        WHEN resamples < 1 THEN error('icl_score: resamples must be 1 or more')
        WHEN early >= late THEN error('icl_score: early must be a position before late')
        WHEN early - width // 2 < 1 THEN error(
            'icl_score: the window around early = ' || early || ' starts before position 1 (position 0 predicts nothing)')
        ELSE true END
),
asked AS (
    SELECT r.run_id, m.name AS model, r.max_length AS context_length
    FROM runs AS r
    JOIN models AS m USING (model_id)
    WHERE r.kind = 'loss_curve'
      AND ($model IS NULL OR m.name = $model)
      AND ($run IS NULL OR r.run_id = CAST($run AS INTEGER))
),
chosen AS (
    SELECT a.*, b.*
    FROM asked AS a
    CROSS JOIN bounds AS b
    WHERE CASE
        WHEN b.late_to <= a.context_length - 1 THEN true
        WHEN $run IS NOT NULL OR NOT EXISTS (SELECT 1 FROM asked AS x WHERE x.context_length - 1 >= b.late_to) THEN error(
            'icl_score: run ' || a.run_id || ' has positions 1 .. ' || (a.context_length - 1) || '; position ' || b.late_to
            || ' (late = ' || b.late || ', window ' || b.width || ') needs a loss-curve run with --context-length '
            || (b.late_to + 1) || ' or more')
        ELSE false END
),
per_sequence AS (
    SELECT
        l.run_id,
        l.sequence,
        avg(l.loss) FILTER (WHERE l.position BETWEEN c.early_from AND c.early_to) AS loss_early,
        avg(l.loss) FILTER (WHERE l.position BETWEEN c.late_from AND c.late_to)   AS loss_late
    FROM position_losses AS l
    JOIN chosen AS c USING (run_id)
    WHERE l.position BETWEEN c.early_from AND c.early_to OR l.position BETWEEN c.late_from AND c.late_to
    GROUP BY ALL
),
differences AS (
    SELECT
        run_id,
        loss_early,
        loss_late,
        loss_late - loss_early                                      AS d,
        row_number() OVER (PARTITION BY run_id ORDER BY sequence) - 1 AS i,
        count(*) OVER (PARTITION BY run_id)                         AS n
    FROM per_sequence
),
observed AS (
    SELECT
        d.run_id,
        count(*)            AS n,
        avg(d.loss_early)   AS loss_early,
        avg(d.loss_late)    AS loss_late,
        avg(d.d)            AS score,
        -- Exact when every sign vector fits the resamples (scipy's rule); 2^n past 62 never does.
        count(*) <= 62 AND (1::BIGINT << count(*)::INTEGER) <= any_value(s.resamples) AS exact
    FROM differences AS d
    CROSS JOIN settings AS s
    GROUP BY d.run_id
),
-- The bootstrap: resample b draws n sequences with replacement, draw j being sequence
-- hash(hash(seed, b, j)) mod n (hashed twice: the low bits of a hash of several values alone
-- repeat, which gave 8 distinct resamples of 8 sequences in 2000).
draws AS (
    SELECT o.run_id, o.n, s.seed, unnest(range(s.resamples)) AS b
    FROM observed AS o
    CROSS JOIN settings AS s
),
drawn AS (
    SELECT run_id, b, unnest(range(n)) AS j, n, seed FROM draws
),
boot AS (
    SELECT w.run_id, w.b, avg(d.d) AS stat
    FROM drawn AS w
    JOIN differences AS d ON d.run_id = w.run_id AND d.i = hash(hash(w.seed, w.b, w.j)) % w.n
    GROUP BY w.run_id, w.b
),
bootstrap AS (
    SELECT run_id, quantile_cont(stat, 0.025) AS ci_low, quantile_cont(stat, 0.975) AS ci_high
    FROM boot
    GROUP BY run_id
),
-- The sign flips: every vector m of 0 .. 2^n − 1 (bit i flips sequence i) when exact, else
-- resamples random ones, sequence i flipped in flip f when hash(hash(seed, f, i, 1)) is odd.
flips AS (
    SELECT o.run_id, o.exact, unnest(range(CASE WHEN o.exact THEN 1::BIGINT << o.n::INTEGER ELSE s.resamples END)) AS f
    FROM observed AS o
    CROSS JOIN settings AS s
),
flipped AS (
    SELECT
        f.run_id,
        f.f,
        any_value(f.exact) AS exact,
        avg(CASE
            WHEN f.exact THEN CASE WHEN (f.f >> d.i::INTEGER) & 1 = 1 THEN -d.d ELSE d.d END
            WHEN hash(hash(s.seed, f.f, d.i, 1::BIGINT)) % 2 = 1 THEN -d.d
            ELSE d.d END) AS stat
    FROM flips AS f
    JOIN differences AS d USING (run_id)
    CROSS JOIN settings AS s
    GROUP BY f.run_id, f.f
),
tested AS (
    SELECT
        f.run_id,
        -- scipy's two-sided p: twice the smaller one-sided p, a relative tolerance for ties.
        least(1.0, 2 * least(
            (count(*) FILTER (WHERE f.stat <= o.score + 1e-9 * abs(o.score)) + CASE WHEN o.exact THEN 0 ELSE 1 END)
                / (count(*) + CASE WHEN o.exact THEN 0 ELSE 1 END),
            (count(*) FILTER (WHERE f.stat >= o.score - 1e-9 * abs(o.score)) + CASE WHEN o.exact THEN 0 ELSE 1 END)
                / (count(*) + CASE WHEN o.exact THEN 0 ELSE 1 END)
        )) AS p_value
    FROM flipped AS f
    JOIN observed AS o USING (run_id)
    GROUP BY f.run_id, o.score, o.exact
)
SELECT
    c.model,
    c.run_id,
    c.context_length,
    o.n                     AS sequences,
    c.early,
    c.late,
    c.width                 AS "window",
    o.loss_early,
    o.loss_late,
    o.score                 AS icl_score,
    i.ci_low,
    i.ci_high,
    t.p_value,
    c.resamples,
    o.exact                 AS exact_test
FROM chosen AS c
JOIN observed AS o USING (run_id)
JOIN bootstrap AS i USING (run_id)
JOIN tested AS t USING (run_id)
ORDER BY c.run_id;
