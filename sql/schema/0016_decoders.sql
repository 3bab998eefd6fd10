-- Decoders (causal language models) in the warehouse. A model records whether it is causal,
-- its key/value heads (grouped-query attention: H_kv <= num_heads, several query heads share
-- one key/value head and so one KV cache) and its sliding window. head_groups gives each
-- query head's key/value group g(h) = h // (num_heads / num_key_value_heads).
-- On a decoder's rows of head_stats: query row i sees keys 0..i (on a sliding-window layer
-- only i - W + 1..i), the first token (BOS, or the first real token where the tokenizer adds
-- none) takes [CLS]'s place, and to_sep, norm_to_sep and to_next are NULL. Every real row
-- counts in the means, row 0 included (one visible key: weight 1, entropy 0), as in Gu et al.
-- (2025)'s first-token attention score, the mean over all rows that see the token.
-- Rows written before this migration are encoders': not causal, as many key/value heads as
-- query heads, no window.

ALTER TABLE models ADD COLUMN causal BOOLEAN;
ALTER TABLE models ADD COLUMN num_key_value_heads INTEGER;
ALTER TABLE models ADD COLUMN sliding_window INTEGER;
ALTER TABLE models ADD COLUMN sliding_layers INTEGER[];
UPDATE models SET causal = false, num_key_value_heads = num_heads;

-- A decoder has no [SEP] and its rows cannot see the next token: NULL, never 0.
ALTER TABLE head_stats ALTER COLUMN to_sep DROP NOT NULL;
ALTER TABLE head_stats ALTER COLUMN norm_to_sep DROP NOT NULL;
ALTER TABLE head_stats ALTER COLUMN to_next DROP NOT NULL;

CREATE VIEW head_groups AS
SELECT
    m.model_id,
    h.head::SMALLINT AS head,
    (h.head // (m.num_heads // m.num_key_value_heads))::SMALLINT AS kv_group,
    m.num_key_value_heads
FROM models AS m, LATERAL (SELECT range AS head FROM range(m.num_heads)) AS h;

COMMENT ON COLUMN models.causal IS 'Whether the model is a decoder (causal language model): row i of its maps sees keys 0..i, the first token takes [CLS]''s place and head_stats.to_sep, norm_to_sep and to_next are NULL (docs/metrics.md#decoders).';
COMMENT ON COLUMN models.num_key_value_heads IS 'Key/value heads per layer: fewer than num_heads under grouped-query attention, where num_heads / num_key_value_heads query heads share each one (see head_groups); equal to num_heads otherwise.';
COMMENT ON COLUMN models.sliding_window IS 'Keys a row of a sliding-window layer sees, itself included (row i: keys i - W + 1..i on a decoder); NULL where no layer has a window.';
COMMENT ON COLUMN models.sliding_layers IS 'The layers that have the sliding window (Gemma mixes them with global layers); NULL where none.';

COMMENT ON VIEW head_groups IS 'Each query head''s key/value group under grouped-query attention, g(h) = h // (num_heads / num_key_value_heads), per model (the same at every layer); a KV cache is kept per group. Join on model_id and head.';
COMMENT ON COLUMN head_groups.model_id IS 'Model id (models.model_id).';
COMMENT ON COLUMN head_groups.head IS 'Query head within a layer (0-based), as head_stats.head.';
COMMENT ON COLUMN head_groups.kv_group IS 'The key/value head this query head reads: head // (num_heads / num_key_value_heads).';
COMMENT ON COLUMN head_groups.num_key_value_heads IS 'Key/value heads per layer of the model (models.num_key_value_heads).';

COMMENT ON COLUMN head_stats.to_cls IS 'Mean over query rows of the weight on [CLS] (0..1); on a decoder, on the first token (BOS, or the first real token), every row counted, row 0 included (its weight there is 1).';
COMMENT ON COLUMN head_stats.to_sep IS 'Mean over query rows of the total weight on all [SEP] positions (0..1); NULL for decoders, which have no [SEP].';
COMMENT ON COLUMN head_stats.to_next IS 'Mean over query rows of A[i, i+1], the weight on the next token (0 for the last real row); NULL for decoders, whose rows cannot see it.';
COMMENT ON COLUMN head_stats.norm_to_sep IS 'Norm-weighted share from all [SEP] positions, 0..1 (see norm_to_cls); NULL for decoders.';
COMMENT ON COLUMN head_stats.entropy IS 'Mean over query rows of the entropy of the row''s weights, in nats; on a decoder over the keys each row sees (row 0: one key, entropy 0).';
