-- A statistics run that read a causal language model through a prompt (`attnwh ingest
-- --prompt`, docs/prompts.md) also reads the prompt's answer in the same forward pass: the
-- label words' logits at each example's last real token, the class of the largest being the
-- prediction. One row per run and example; the run's accuracy goes into scores when it
-- completes. (The ablation sweep stores its prompted predictions in ablation_predictions.)

CREATE TABLE prompt_predictions (
    run_id      INTEGER NOT NULL,
    example_id  BIGINT NOT NULL,
    prediction  SMALLINT NOT NULL,  -- label id (the template's label-word order)
    correct     BOOLEAN,            -- NULL for an unlabelled example
    logits      REAL[] NOT NULL,    -- the label words' logits, in label-id order
    PRIMARY KEY (run_id, example_id)
);

COMMENT ON TABLE prompt_predictions IS 'Per statistics run read through a prompt (runs.prompt) and example: the prompt''s answer, read from the label words'' logits at the last real token in the pass that measured the statistics (docs/prompts.md).';
COMMENT ON COLUMN prompt_predictions.run_id IS 'The statistics run (runs.run_id); runs.prompt holds its template and label words.';
COMMENT ON COLUMN prompt_predictions.example_id IS 'The example (examples.example_id).';
COMMENT ON COLUMN prompt_predictions.prediction IS 'The predicted label id: the label word with the largest logit (runs.prompt->label_words, in label-id order).';
COMMENT ON COLUMN prompt_predictions.correct IS 'Whether the prediction is the gold label; NULL for an unlabelled example (a GLUE test split).';
COMMENT ON COLUMN prompt_predictions.logits IS 'The label words'' next-token logits at the example''s last real token, in label-id order.';
