-- The token ids each run read of each example, so that `attnwh show` and
-- Warehouse.example_maps recompute its maps from exactly those tokens. For an example of
-- plain text cut into token windows (--text, the prose sample) the stored text is the window
-- decoded, which need not tokenize back to the same ids (a window may start inside a word);
-- re-tokenizing it could show maps of another input than the one the statistics are of.
-- Rows written before this migration have none (NULL): show re-tokenizes their text, as before.
ALTER TABLE run_examples ADD COLUMN token_ids INTEGER[];

COMMENT ON COLUMN run_examples.token_ids IS 'The token ids the run''s model read for this example, special tokens included, after truncation (n_tokens of them); NULL for rows written before migration 18. attnwh show and Warehouse.example_maps recompute maps from them.';
