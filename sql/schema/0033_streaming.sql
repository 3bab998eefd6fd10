-- StreamingLLM's experiment (`attnwh ingest streaming`, docs/whole-context.md#streaming-with-and-without-sinks;
-- Xiao et al. 2023, "Efficient Streaming Language Models with Attention Sinks"): every
-- key/value group of every attention layer keeps only the first S tokens of a sequence (the
-- attention sinks) and the last W up to each query, as a cache that evicts the rest would;
-- S = 0 is plain window attention. The next-token loss per sequence of L tokens, for each L
-- and S and for the model as it is, by bucket of query positions; then per L and S the paired
-- tests over sequences.

CREATE TABLE streaming_losses (
    run_id          INTEGER NOT NULL,
    example_id      BIGINT NOT NULL,
    context_length  INTEGER NOT NULL,
    sequence        INTEGER NOT NULL,
    sinks           SMALLINT,           -- NULL: the model as it is
    position_from   INTEGER NOT NULL,
    position_to     INTEGER NOT NULL,
    nats            DOUBLE NOT NULL,
    tokens          INTEGER NOT NULL
);

CREATE TABLE streaming_results (
    run_id          INTEGER NOT NULL,
    context_length  INTEGER NOT NULL,
    sinks           SMALLINT NOT NULL,
    "window"        INTEGER NOT NULL,
    sequences       INTEGER NOT NULL,
    tokens          BIGINT NOT NULL,
    loss            DOUBLE NOT NULL,
    baseline_loss   DOUBLE NOT NULL,
    delta           DOUBLE NOT NULL,
    ci_low          DOUBLE NOT NULL,
    ci_high         DOUBLE NOT NULL,
    p_value         DOUBLE NOT NULL,
    versus_sinks    SMALLINT,
    versus_delta    DOUBLE,
    versus_ci_low   DOUBLE,
    versus_ci_high  DOUBLE,
    versus_p_value  DOUBLE,
    PRIMARY KEY (run_id, context_length, sinks)
);

COMMENT ON TABLE streaming_losses IS 'Per streaming run (runs.kind = ''streaming''), sequence of held-out text, setting and bucket of query positions: the summed next-token loss, with every key/value group of every attention layer restricted to S sinks + the last W tokens (StreamingLLM, Xiao et al. 2023), or the model as it is; the tests of streaming_results are recomputed from it.';
COMMENT ON COLUMN streaming_losses.run_id IS 'The streaming run (runs.run_id).';
COMMENT ON COLUMN streaming_losses.example_id IS 'The sequence (examples.example_id); runs.n_examples counts the sequences of every length.';
COMMENT ON COLUMN streaming_losses.context_length IS 'L (--context-lengths): the sequence''s tokens; every sequence of a length has exactly L.';
COMMENT ON COLUMN streaming_losses.sequence IS 'The sequence among those of its length, 0-based, in the order the text was cut (each length cut from the text''s start).';
COMMENT ON COLUMN streaming_losses.sinks IS 'S (--sink-tokens): every group keeps the sequence''s first S tokens and keys i − W + 1 .. i of query i (renormalised); 0 = window attention; NULL = the model as it is (every key).';
COMMENT ON COLUMN streaming_losses.position_from IS 'First query position i of the bucket (0-based; query i predicts token i + 1). Buckets: [0, W), [W, 2W), [2W, 4W), … doubling, the last ending at L − 1; queries below S + W drop nothing.';
COMMENT ON COLUMN streaming_losses.position_to IS 'End of the bucket (exclusive), a query position.';
COMMENT ON COLUMN streaming_losses.nats IS 'Summed next-token cross-entropy of the bucket''s predictions, nats; a sequence''s loss is the sum over its buckets.';
COMMENT ON COLUMN streaming_losses.tokens IS 'Tokens predicted in the bucket (position_to − position_from); the same under every setting.';

COMMENT ON TABLE streaming_results IS 'Per streaming run, context length L and number of sinks S: the next-token loss with every key/value group restricted to S sinks + a window of W, the model as it is, and their difference tested over sequences; S against the fewest sinks of the run (S = 0: window attention) likewise. The named query streaming_loss adds perplexities.';
COMMENT ON COLUMN streaming_results.run_id IS 'The streaming run (runs.run_id).';
COMMENT ON COLUMN streaming_results.context_length IS 'L: tokens per sequence.';
COMMENT ON COLUMN streaming_results.sinks IS 'S: the first tokens of a sequence every group keeps (0 = window attention).';
COMMENT ON COLUMN streaming_results."window" IS 'W (--window): query i keeps keys i − W + 1 .. i besides the sinks.';
COMMENT ON COLUMN streaming_results.sequences IS 'Sequences of L tokens measured (streaming_losses.sequence 0 .. sequences − 1).';
COMMENT ON COLUMN streaming_results.tokens IS 'Tokens predicted over all sequences: sequences · (L − 1).';
COMMENT ON COLUMN streaming_results.loss IS 'Next-token cross-entropy with every group restricted to S sinks + W, nats per token: Σ_s nats_s / Σ_s tokens_s.';
COMMENT ON COLUMN streaming_results.baseline_loss IS 'The model as it is (every key), nats per token, on the same sequences.';
COMMENT ON COLUMN streaming_results.delta IS 'loss − baseline_loss, nats per token; positive = the evicted context was needed.';
COMMENT ON COLUMN streaming_results.ci_low IS 'Lower end of the 95 % paired percentile bootstrap interval of delta: sequences resampled with replacement (1000 times, seed 0), Σ (nats_restricted − nats_as_is) / Σ tokens over each resample.';
COMMENT ON COLUMN streaming_results.ci_high IS 'Upper end of the 95 % bootstrap interval of delta.';
COMMENT ON COLUMN streaming_results.p_value IS 'Two-sided paired sign-flip permutation test of delta over sequences (scipy.stats.permutation_test: each sequence''s difference keeps or flips its sign; exact when 2^n ≤ 1000), as the restriction and the loss sweep test; 1 where no sequence changes.';
COMMENT ON COLUMN streaming_results.versus_sinks IS 'The fewest sinks of the run (usually 0, window attention) that this S is compared with; NULL on that S''s own row.';
COMMENT ON COLUMN streaming_results.versus_delta IS 'loss − the loss with versus_sinks sinks, nats per token, on the same sequences; negative = the extra sinks helped.';
COMMENT ON COLUMN streaming_results.versus_ci_low IS 'Lower end of the 95 % paired bootstrap interval of versus_delta over sequences.';
COMMENT ON COLUMN streaming_results.versus_ci_high IS 'Upper end of the 95 % paired bootstrap interval of versus_delta.';
COMMENT ON COLUMN streaming_results.versus_p_value IS 'Two-sided paired sign-flip permutation p of versus_delta over sequences.';
