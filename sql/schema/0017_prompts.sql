-- The prompt a run read its model through (docs/prompts.md). A causal language model has no
-- classification head: `attnwh ingest ablation --prompt` asks it each example as text and reads
-- the label words' logits at the last real token. The prompt is part of the run's identity
-- (another template, other label words, shots or seed make another run); this column records
-- it so the run can be read back: NULL for every run that read no prompt, runs written before
-- this migration included.

ALTER TABLE runs ADD COLUMN prompt JSON;

COMMENT ON COLUMN runs.prompt IS 'The prompt the run read its causal language model through, as JSON (PromptedClassifier.describe()): task, template (a format string over {text_a} and {text_b}, ending with the cue), labels and label_words (one per class, in label-id order), separator, shots, seed, shot_source and shot_examples (position, guid and label of each solved example in the shared prefix), label_token_ids (the label words'' token ids), prefix_tokens and max_length. NULL for runs that read no prompt.';
