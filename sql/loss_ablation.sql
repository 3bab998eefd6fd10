-- name: loss_ablation
-- title: Per configuration of a loss ablation run and span: mean next-token loss, its change against the baseline, interval, p and q
-- params: run, model, task, mode, span
-- One row per configuration of an ablation run on plain text (or probes) scored by next-token
-- loss, and span (all: whole sequences; first, repeat, answer, …: named spans): the mean loss
-- per token in nats over the run's sequences (sum(nats) / sum(tokens) of ablation_losses), the
-- baseline's, delta = loss - baseline_loss (> 0: the loss rose when the heads were disabled),
-- its 95 % paired bootstrap interval over sequences, the two-sided p-value of the paired
-- permutation test (sign flips per sequence) and q_value, its Benjamini–Hochberg adjustment
-- across the run's head and layer configurations for that span (NULL for the baseline).
-- tokens = the tokens the mean is over; accuracy = the share of them the model predicts greedily
-- (sum(correct) / sum(tokens); NULL for rows stored before migration 34). label and draw name a
-- set of heads (kind set: top-K ROLE, random-K with its draw, heads L.H,…). run is a run_id;
-- NULL = all.
WITH sums AS (
    SELECT run_id, config_id, span, sum(nats) AS nats, sum(tokens) AS tokens, count(*) AS sequences,
           sum(correct) AS correct
    FROM ablation_losses
    WHERE ($run IS NULL OR run_id = $run) AND ($span IS NULL OR span = $span)
    GROUP BY run_id, config_id, span
)
SELECT
    r.model, r.task, r.split, r.run_id, r.mode, s.span, r.config_id, r.kind, r.layer, r.head,
    r.disabled,
    s.nats / nullif(s.tokens, 0)   AS loss,
    r.baseline                      AS baseline_loss,
    r.delta,
    r.ci_low,
    r.ci_high,
    r.p_value,
    r.p_adjusted                    AS q_value,
    r.p_adjusted < 0.05             AS significant,
    s.tokens,
    s.sequences,
    s.correct / nullif(s.tokens, 0) AS accuracy,
    c.label,
    c.draw
FROM sums AS s
JOIN ablation_results AS r
  ON r.run_id = s.run_id AND r.config_id = s.config_id
 AND r.metric = CASE WHEN s.span = 'all' THEN 'loss' ELSE 'loss:' || s.span END
JOIN ablation_configs AS c ON c.run_id = s.run_id AND c.config_id = s.config_id
WHERE ($model IS NULL OR r.model = $model)
  AND ($task IS NULL OR r.task = $task)
  AND ($mode IS NULL OR r.mode = $mode)
ORDER BY r.model, r.task, r.split, r.run_id, r.mode, s.span = 'all' DESC, s.span, r.config_id;
