-- name: streaming_loss
-- title: StreamingLLM's experiment: loss and perplexity with every key/value group keeping only S sinks + a window, per context length
-- params: model, run
-- One row per streaming run (`attnwh ingest streaming`, docs/whole-context.md), context length
-- L and number of sinks S: the next-token loss (nats per token, Σ nats / Σ tokens over the
-- run's sequences of L tokens) and the perplexity (exp of it) with every key/value group of
-- every attention layer restricted to the first S tokens and the last W (S = 0: window
-- attention; Xiao et al. 2023), those of the model as it is on the same sequences, and delta
-- = loss − baseline_loss with its 95 % paired bootstrap interval over sequences and a paired
-- sign-flip permutation p over sequences. versus_*: the same against the run's fewest sinks
-- (versus_sinks, usually 0), NULL on that S's own row. NULL = all.
SELECT
    m.name                          AS model,
    s.run_id,
    s.context_length,
    s.sinks,
    s."window",
    s.loss,
    exp(s.loss)                     AS perplexity,
    s.baseline_loss,
    exp(s.baseline_loss)            AS baseline_perplexity,
    s.delta,
    s.ci_low,
    s.ci_high,
    s.p_value,
    s.versus_sinks,
    s.versus_delta,
    s.versus_ci_low,
    s.versus_ci_high,
    s.versus_p_value,
    s.sequences,
    s.tokens
FROM streaming_results AS s
JOIN runs AS r USING (run_id)
JOIN models AS m USING (model_id)
WHERE ($model IS NULL OR m.name = $model)
  AND ($run IS NULL OR s.run_id = CAST($run AS INTEGER))
ORDER BY s.run_id, s.context_length, s.sinks;
