-- Massive activations as biases (`attnwh ingest massive-ablation`, Sun et al. 2024, "Massive
-- Activations in Large Language Models", §3): a decoder's massive activations, found on the
-- run's own sequences, set at the layer where they first appear to zero and to their mean over
-- the sequences, and the next-token loss of every sequence as the model is and under each
-- (docs/metrics.md#massive-activations-as-biases). The losses are stored unit by unit with
-- their done marks (an interrupted run resumes); the entries, the sites and the tests complete
-- the run.

CREATE TABLE massive_ablation_runs (
    run_id          INTEGER PRIMARY KEY,
    min_magnitude   DOUBLE NOT NULL,
    ratio           DOUBLE NOT NULL,
    min_share       DOUBLE NOT NULL,
    context_length  INTEGER NOT NULL,
    sequences       INTEGER NOT NULL,
    tokens          BIGINT NOT NULL,
    resamples       INTEGER NOT NULL,
    seed            INTEGER NOT NULL
);

CREATE TABLE massive_ablation_entries (
    run_id          INTEGER NOT NULL,
    layer           SMALLINT NOT NULL,
    dim             INTEGER NOT NULL,
    token_kind      VARCHAR NOT NULL,
    mean_value      DOUBLE NOT NULL,
    mean_magnitude  DOUBLE NOT NULL,
    max_magnitude   DOUBLE NOT NULL,
    mean_median     DOUBLE NOT NULL,
    sequences       INTEGER NOT NULL,
    sites           INTEGER NOT NULL,
    PRIMARY KEY (run_id, layer, dim, token_kind)
);

CREATE TABLE massive_ablation_sites (
    run_id          INTEGER NOT NULL,
    sequence        INTEGER NOT NULL,
    example_id      BIGINT NOT NULL,
    layer           SMALLINT NOT NULL,
    dim             INTEGER NOT NULL,
    token_kind      VARCHAR NOT NULL,
    position        INTEGER NOT NULL,
    value           DOUBLE NOT NULL,
    PRIMARY KEY (run_id, sequence, layer, dim, position)
);

CREATE TABLE massive_ablation_losses (
    run_id          INTEGER NOT NULL,
    intervention    VARCHAR NOT NULL,   -- none | zero | mean
    sequence        INTEGER NOT NULL,
    example_id      BIGINT NOT NULL,
    nats            DOUBLE NOT NULL,
    tokens          INTEGER NOT NULL
);

CREATE TABLE massive_ablation_results (
    run_id          INTEGER NOT NULL,
    intervention    VARCHAR NOT NULL,
    loss            DOUBLE NOT NULL,
    delta           DOUBLE NOT NULL,
    ci_low          DOUBLE,
    ci_high         DOUBLE,
    p_value         DOUBLE,
    PRIMARY KEY (run_id, intervention)
);

COMMENT ON TABLE massive_ablation_runs IS 'Per massive-ablation run (runs.kind = ''massive_ablation''): the thresholds that found the massive activations and what the loss was measured on. Sun et al. 2024: an entry of a layer''s output is massive when |h| > 100 and > 1000 × the layer''s median |h|; docs/metrics.md#massive-activations-as-biases.';
COMMENT ON COLUMN massive_ablation_runs.run_id IS 'The massive-ablation run (runs.run_id).';
COMMENT ON COLUMN massive_ablation_runs.min_magnitude IS '--min-magnitude: an entry is massive only when |h| exceeds it (Sun et al.: 100).';
COMMENT ON COLUMN massive_ablation_runs.ratio IS '--ratio: and only when |h| exceeds ratio × the median |h| of its layer''s output over the sequence''s n · D entries (Sun et al.: 1000).';
COMMENT ON COLUMN massive_ablation_runs.min_share IS '--min-share: a dimension on a kind of token counts from the first layer where it is massive in at least this share of the sequences.';
COMMENT ON COLUMN massive_ablation_runs.context_length IS 'Tokens per sequence (--context-length; the text''s last sequence may be shorter).';
COMMENT ON COLUMN massive_ablation_runs.sequences IS 'Sequences of text measured (massive_ablation_losses.sequence 0 .. sequences − 1).';
COMMENT ON COLUMN massive_ablation_runs.tokens IS 'Tokens predicted over all sequences: Σ_s (real tokens of s − 1).';
COMMENT ON COLUMN massive_ablation_runs.resamples IS 'Bootstrap resamples of the sequences behind every ci_low / ci_high (and the most sign flips behind a p).';
COMMENT ON COLUMN massive_ablation_runs.seed IS 'Seed of the bootstrap resamples and the sign flips.';

COMMENT ON TABLE massive_ablation_entries IS 'Per massive-ablation run, the massive activations intervened on: a hidden dimension on a kind of token, at the first layer where it is massive in at least min_share of the sequences (it then stays in the residual stream of the layers after). Every entry is overwritten at once, at this layer only.';
COMMENT ON COLUMN massive_ablation_entries.run_id IS 'The massive-ablation run (runs.run_id).';
COMMENT ON COLUMN massive_ablation_entries.layer IS 'Layer whose output is overwritten, 0-based: the output of the decoder layer module (before any final norm), where the entry first appears.';
COMMENT ON COLUMN massive_ablation_entries.dim IS 'Hidden dimension, 0-based.';
COMMENT ON COLUMN massive_ablation_entries.token_kind IS 'first token (position 0), punctuation or other: the kind of the tokens it sits on.';
COMMENT ON COLUMN massive_ablation_entries.mean_value IS 'The signed value h[position, dim] at layer, averaged over every site of every sequence: what the mean intervention writes.';
COMMENT ON COLUMN massive_ablation_entries.mean_magnitude IS 'Mean |h| over its sites.';
COMMENT ON COLUMN massive_ablation_entries.max_magnitude IS 'Largest |h| over its sites.';
COMMENT ON COLUMN massive_ablation_entries.mean_median IS 'Mean over its sites of the layer''s median |h| in the site''s sequence (the scale the ratio is of).';
COMMENT ON COLUMN massive_ablation_entries.sequences IS 'Sequences with at least one site of it (massive at this layer on a token of this kind); the others are left as they are by both interventions.';
COMMENT ON COLUMN massive_ablation_entries.sites IS 'Sites over all sequences (positions overwritten).';

COMMENT ON TABLE massive_ablation_sites IS 'Per massive-ablation run, sequence and entry: each position where the entry is massive in that sequence, the value found there, overwritten with 0 or the entry''s mean_value by the interventions.';
COMMENT ON COLUMN massive_ablation_sites.run_id IS 'The massive-ablation run (runs.run_id).';
COMMENT ON COLUMN massive_ablation_sites.sequence IS 'The sequence, 0-based, in the order the text was cut.';
COMMENT ON COLUMN massive_ablation_sites.example_id IS 'The sequence as an example (examples.example_id).';
COMMENT ON COLUMN massive_ablation_sites.layer IS 'The entry''s layer, 0-based (massive_ablation_entries.layer).';
COMMENT ON COLUMN massive_ablation_sites.dim IS 'The entry''s hidden dimension, 0-based.';
COMMENT ON COLUMN massive_ablation_sites.token_kind IS 'The entry''s token kind: first token, punctuation or other.';
COMMENT ON COLUMN massive_ablation_sites.position IS 'Token position in the sequence, 0-based.';
COMMENT ON COLUMN massive_ablation_sites.value IS 'The signed value h[position, dim] of the layer''s output, as the model computed it.';

COMMENT ON TABLE massive_ablation_losses IS 'Per massive-ablation run, intervention and sequence: the summed next-token loss, so the tests of massive_ablation_results can be recomputed.';
COMMENT ON COLUMN massive_ablation_losses.run_id IS 'The massive-ablation run (runs.run_id).';
COMMENT ON COLUMN massive_ablation_losses.intervention IS 'none (the model as it is), zero (every site set to 0) or mean (every site set to its entry''s mean_value), at the entry''s layer.';
COMMENT ON COLUMN massive_ablation_losses.sequence IS 'The sequence, 0-based, in the order the text was cut.';
COMMENT ON COLUMN massive_ablation_losses.example_id IS 'The sequence as an example (examples.example_id).';
COMMENT ON COLUMN massive_ablation_losses.nats IS 'Summed next-token cross-entropy over the sequence''s predicted tokens, nats.';
COMMENT ON COLUMN massive_ablation_losses.tokens IS 'Tokens predicted in the sequence (its real tokens less the first).';

COMMENT ON TABLE massive_ablation_results IS 'Per massive-ablation run and intervention: the loss over all sequences and its change from the model as it is, tested over sequences (never over the tokens of one sequence).';
COMMENT ON COLUMN massive_ablation_results.run_id IS 'The massive-ablation run (runs.run_id).';
COMMENT ON COLUMN massive_ablation_results.intervention IS 'none, zero or mean (massive_ablation_losses.intervention).';
COMMENT ON COLUMN massive_ablation_results.loss IS 'Next-token cross-entropy, nats per token: Σ_s nats_s / Σ_s tokens_s; exp(loss) is the perplexity Sun et al. report.';
COMMENT ON COLUMN massive_ablation_results.delta IS 'loss − the loss of none, nats per token; positive = the intervention hurts.';
COMMENT ON COLUMN massive_ablation_results.ci_low IS 'Lower end of the 95 % paired percentile bootstrap interval of delta: sequences resampled with replacement, Σ (nats − nats_none) / Σ tokens over each resample. NULL for none.';
COMMENT ON COLUMN massive_ablation_results.ci_high IS 'Upper end of the 95 % bootstrap interval of delta. NULL for none.';
COMMENT ON COLUMN massive_ablation_results.p_value IS 'Two-sided paired sign-flip permutation test of delta over sequences (scipy.stats.permutation_test: each sequence''s nats − nats_none keeps or flips its sign; exact when 2^n ≤ resamples); 1 where no sequence changes. NULL for none.';
