-- Real attention maps for labelling by eye (`attnwh patterns label`): for the examples of a
-- statistics run's thumbnail sample that have at most 64 real tokens, every head's map cropped
-- to the real tokens, and the tokens themselves, so that a labelling page can draw the map a
-- person judges (not only its 32 x 32 thumbnail) with its tokens on the axes. Written in the
-- same transaction as the example's statistics; runs ingested before this migration have none
-- (their pages fall back to the thumbnails).

CREATE TABLE pattern_maps (
    run_id        INTEGER NOT NULL,
    example_id    BIGINT NOT NULL,
    layer         SMALLINT NOT NULL,
    head          SMALLINT NOT NULL,
    n_tokens      INTEGER NOT NULL,
    attention     FLOAT[] NOT NULL,   -- n_tokens x n_tokens, row-major: row = query, column = key
    PRIMARY KEY (run_id, example_id, layer, head)
);

CREATE TABLE example_tokens (
    run_id        INTEGER NOT NULL,
    example_id    BIGINT NOT NULL,
    tokens        VARCHAR[] NOT NULL, -- the real tokens as the tokenizer wrote them, specials included
    PRIMARY KEY (run_id, example_id)
);

COMMENT ON TABLE pattern_maps IS 'Per statistics run, thumbnail-sample example with at most 64 real tokens, layer and head: the attention map cropped to the real tokens, for labelling pattern types by eye (attnwh patterns label).';
COMMENT ON COLUMN pattern_maps.run_id IS 'The statistics run (runs.run_id).';
COMMENT ON COLUMN pattern_maps.example_id IS 'The example (examples.example_id).';
COMMENT ON COLUMN pattern_maps.layer IS 'Layer, 0-based.';
COMMENT ON COLUMN pattern_maps.head IS 'Head within the layer, 0-based.';
COMMENT ON COLUMN pattern_maps.n_tokens IS 'Real tokens n of the example, [CLS] and [SEP] included: the map is n × n.';
COMMENT ON COLUMN pattern_maps.attention IS 'The n × n attention weights, row-major: element i·n + j is the weight of query token i on key token j (each row sums to 1).';
COMMENT ON TABLE example_tokens IS 'Per statistics run and example of pattern_maps: the tokens the model saw, for the axes of a labelling page.';
COMMENT ON COLUMN example_tokens.run_id IS 'The statistics run (runs.run_id).';
COMMENT ON COLUMN example_tokens.example_id IS 'The example (examples.example_id).';
COMMENT ON COLUMN example_tokens.tokens IS 'The real tokens in order, as the tokenizer spells them ([CLS] and [SEP] included); position i is row and column i of the maps.';
