-- name: massive_ablation
-- title: Massive activations as biases (Sun et al. 2024): the loss and perplexity with them set to zero and to their mean, against the model as it is
-- params: model, run
-- One row per massive-ablation run (`attnwh ingest massive-ablation`,
-- docs/metrics.md#massive-activations-as-biases) and intervention: none (the model as it is),
-- zero (every massive activation set to 0 at the layer where it first appears) and mean (set
-- to its mean over the run's sequences). loss = Σ_s nats_s / Σ_s tokens_s (nats per token),
-- perplexity = exp(loss); delta = loss − none's loss with its 95 % paired bootstrap interval
-- over sequences and a paired sign-flip permutation p over sequences (NULL for none);
-- perplexity_ratio = perplexity / none's. entries: the massive activations intervened on
-- (massive_ablation_entries), sequences and tokens: what the loss is over. NULL = all.
SELECT
    m.name                                              AS model,
    x.run_id,
    x.intervention,
    x.loss,
    exp(x.loss)                                         AS perplexity,
    x.delta,
    x.ci_low,
    x.ci_high,
    x.p_value,
    exp(x.loss) / exp(b.loss)                           AS perplexity_ratio,
    e.entries,
    s.sequences,
    s.tokens,
    s.context_length,
    s.min_magnitude,
    s.ratio,
    s.min_share
FROM massive_ablation_results AS x
JOIN massive_ablation_results AS b ON b.run_id = x.run_id AND b.intervention = 'none'
JOIN massive_ablation_runs AS s ON s.run_id = x.run_id
JOIN (SELECT run_id, count(*) AS entries FROM massive_ablation_entries GROUP BY run_id) AS e ON e.run_id = x.run_id
JOIN runs AS r ON r.run_id = x.run_id
JOIN models AS m ON m.model_id = r.model_id
WHERE ($model IS NULL OR m.name = $model)
  AND ($run IS NULL OR x.run_id = CAST($run AS INTEGER))
ORDER BY x.run_id, CASE x.intervention WHEN 'none' THEN 0 WHEN 'zero' THEN 1 ELSE 2 END;
