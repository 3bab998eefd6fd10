-- name: loss_by_position
-- title: Next-token loss by position in the context: per loss-curve run and position (or bin), the mean over sequences
-- params: model, run, bin
-- One row per loss-curve run (`attnwh ingest loss-curve`, docs/whole-context.md#in-context-
-- learning-score) and position, or bin of `bin` positions (default 1: every position).
-- Positions are 0-based token indices: position t is the token predicted from the t tokens
-- before it (t = 0, the first token, predicts nothing and has no row). A bin k holds the
-- positions k·bin .. k·bin + bin − 1 (so the first bin starts at 1); position and
-- position_last are its first and last. loss: each sequence's mean over the bin, averaged
-- over the run's sequences (all of one length, so every position has every sequence);
-- std_error: their standard deviation over sequences / √sequences (NULL for one sequence).
-- tokens: the losses averaged. NULL = all.
WITH settings AS (
    SELECT CASE WHEN CAST(coalesce($bin, 1) AS INTEGER) >= 1 THEN CAST(coalesce($bin, 1) AS INTEGER)
        ELSE error('loss_by_position: bin must be 1 or more positions') END AS width
),
chosen AS (
    SELECT r.run_id, m.name AS model
    FROM runs AS r
    JOIN models AS m USING (model_id)
    WHERE r.kind = 'loss_curve'
      AND ($model IS NULL OR m.name = $model)
      AND ($run IS NULL OR r.run_id = CAST($run AS INTEGER))
),
per_sequence AS (
    SELECT
        l.run_id,
        l.position // s.width   AS bin,
        l.sequence,
        avg(l.loss)             AS loss,
        min(l.position)         AS first,
        max(l.position)         AS last,
        count(*)                AS tokens
    FROM position_losses AS l
    CROSS JOIN settings AS s
    WHERE l.run_id IN (SELECT run_id FROM chosen)
    GROUP BY ALL
)
SELECT
    c.model,
    p.run_id,
    min(p.first)                                AS position,
    max(p.last)                                 AS position_last,
    avg(p.loss)                                 AS loss,
    stddev_samp(p.loss) / sqrt(count(*))        AS std_error,
    count(*)                                    AS sequences,
    sum(p.tokens)                               AS tokens
FROM per_sequence AS p
JOIN chosen AS c USING (run_id)
GROUP BY c.model, p.run_id, p.bin
ORDER BY p.run_id, position;
