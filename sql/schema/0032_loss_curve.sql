-- Next-token loss by position (`attnwh ingest loss-curve`, docs/whole-context.md#in-context-
-- learning-score): a causal language model's loss at every position of sequences of exactly
-- the run's context length (runs.max_length), kept per sequence so that every comparison of
-- positions (the in-context learning score of Olsson et al. 2022: the loss at token 500 minus
-- the loss at token 50) is tested over sequences, never over the tokens of one sequence. The
-- named queries loss_by_position and icl_score read it. Stored unit by unit with the units'
-- done marks, like the other runs through the engine.

CREATE TABLE position_losses (
    run_id      INTEGER NOT NULL,
    example_id  BIGINT NOT NULL,
    sequence    INTEGER NOT NULL,
    position    INTEGER NOT NULL,
    token_id    BIGINT NOT NULL,
    loss        DOUBLE NOT NULL,
    PRIMARY KEY (run_id, sequence, position)
);

COMMENT ON TABLE position_losses IS 'Per loss-curve run (runs.kind = ''loss_curve''), sequence and position: the next-token cross-entropy of the token at that position given every token before it in the sequence; sequences are of exactly runs.max_length tokens (docs/whole-context.md#in-context-learning-score).';
COMMENT ON COLUMN position_losses.run_id IS 'The loss-curve run (runs.run_id); its context length is runs.max_length.';
COMMENT ON COLUMN position_losses.example_id IS 'The sequence as an example (examples.example_id; its text is the decoded sequence).';
COMMENT ON COLUMN position_losses.sequence IS 'The sequence, 0-based, in the order the text was cut (0 .. runs.n_examples − 1).';
COMMENT ON COLUMN position_losses.position IS 'Token index t in the sequence, 0-based (the tokenizer''s BOS, where it adds one, is t = 0): the token predicted from the t tokens before it. 1 .. context length − 1; t = 0 predicts nothing and has no row.';
COMMENT ON COLUMN position_losses.token_id IS 'The token at position t, the one predicted (the tokenizer''s id).';
COMMENT ON COLUMN position_losses.loss IS 'Next-token cross-entropy of the token at position t, nats: −log softmax(z_{t−1})[x_t], z_{t−1} the model''s logits at t − 1.';
