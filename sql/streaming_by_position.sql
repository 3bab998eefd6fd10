-- name: streaming_by_position
-- title: StreamingLLM's experiment by position: the loss before the window and in doubling buckets past it
-- params: model, run
-- One row per streaming run (`attnwh ingest streaming`), context length L, setting and bucket
-- of query positions [position_from, position_to) (query i predicts token i + 1; buckets [0, W),
-- [W, 2W), [2W, 4W), …): the next-token loss over the run's sequences (Σ nats / Σ tokens),
-- the model as it is's in the same bucket and delta. sinks NULL is the model as it is (delta
-- 0). Below S + W nothing is evicted, so delta is 0 there; past it the curve shows how the
-- loss goes as the evicted context grows. No test: streaming_loss tests each whole sequence.
-- NULL = all.
WITH buckets AS (
    SELECT run_id, context_length, sinks, position_from, position_to,
           sum(nats) AS nats, CAST(sum(tokens) AS BIGINT) AS tokens, count(*) AS sequences
    FROM streaming_losses
    GROUP BY ALL
)
SELECT
    m.name                                  AS model,
    b.run_id,
    b.context_length,
    b.sinks,
    b.position_from,
    b.position_to,
    b.nats / b.tokens                       AS loss,
    a.nats / a.tokens                       AS baseline_loss,
    b.nats / b.tokens - a.nats / a.tokens   AS delta,
    b.tokens,
    b.sequences
FROM buckets AS b
JOIN buckets AS a
  ON a.run_id = b.run_id AND a.context_length = b.context_length AND a.sinks IS NULL
 AND a.position_from = b.position_from
JOIN runs AS r ON r.run_id = b.run_id
JOIN models AS m USING (model_id)
WHERE ($model IS NULL OR m.name = $model)
  AND ($run IS NULL OR b.run_id = CAST($run AS INTEGER))
ORDER BY b.run_id, b.context_length, b.sinks NULLS FIRST, b.position_from;
