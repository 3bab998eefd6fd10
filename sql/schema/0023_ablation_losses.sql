-- The ablation sweep on plain text (`attnwh ingest ablation --text …` with a causal language
-- model, docs/metrics.md#language-model-loss): every configuration's next-token loss per
-- sequence and named span, as sums, so the mean loss over any set of sequences and spans is
-- sum(nats) / sum(tokens). The per-configuration tests go into ablations (metric 'loss', or
-- 'loss:<span>' for a named span).

CREATE TABLE ablation_losses (
    run_id      INTEGER NOT NULL,
    config_id   INTEGER NOT NULL,
    example_id  BIGINT NOT NULL,
    span        VARCHAR NOT NULL,   -- all | a named span of the sequence (first, repeat, answer, …)
    nats        DOUBLE NOT NULL,    -- sum of -log p(x_t | x_<t) over the span's positions t >= 1
    tokens      INTEGER NOT NULL,   -- positions summed
    PRIMARY KEY (run_id, config_id, example_id, span)
);

COMMENT ON TABLE ablation_losses IS 'Per loss ablation run, configuration, sequence and span: the summed next-token cross-entropy in nats and the number of tokens summed; the mean loss per token over any sequences and spans is sum(nats) / sum(tokens) (docs/metrics.md#language-model-loss).';
COMMENT ON COLUMN ablation_losses.run_id IS 'The ablation run (runs.run_id; its identity names the loss objective).';
COMMENT ON COLUMN ablation_losses.config_id IS 'The configuration (ablation_configs.config_id; 0 is the baseline, nothing disabled).';
COMMENT ON COLUMN ablation_losses.example_id IS 'The sequence (examples.example_id): a window of the text, or a probe.';
COMMENT ON COLUMN ablation_losses.span IS 'all: the whole sequence [0, n); otherwise a named half-open token range [a, b) of the sequence (a probe''s first or repeat half, a needle''s answer).';
COMMENT ON COLUMN ablation_losses.nats IS 'sum over positions t in [max(a, 1), b) of -log softmax(z_{t-1})[x_t], z_{t-1} the model''s logits at position t-1 with the configuration''s heads disabled, x_t the token at t; position 0 has nothing to predict it.';
COMMENT ON COLUMN ablation_losses.tokens IS 'Positions summed in nats: b - max(a, 1) (n - 1 for span all).';

COMMENT ON COLUMN ablations.metric IS 'accuracy | f1 | mcc | pearson | spearman (a classifier or a prompted model); loss (mean next-token loss per token in nats, sum(nats) / sum(tokens) of ablation_losses span all) | loss:<span> (the same over a named span).';
COMMENT ON COLUMN ablations.delta IS 'value - baseline (disabled minus baseline); > 0 means disabling helped, except for loss metrics, where > 0 means the loss rose.';
COMMENT ON COLUMN ablations.test IS 'mcnemar-exact (accuracy) | permutation (other metrics: a paired permutation test; for loss, sign flips of each sequence''s difference in nats).';
