-- Value zeroing (--value-zeroing layer|head) reads decoders: what its vz_* columns mean on a
-- causal map. Row i of C sees keys 0..i (on a sliding-window layer only i - W + 1..i): a key
-- a row cannot see changes nothing there, so its C is exactly 0 and each row is normalised
-- over the keys it sees. The first token (BOS, or the first real token) takes [CLS]'s place;
-- vz_to_sep and vz_to_next are NULL, as head_stats.to_sep and to_next are. Under grouped-query
-- attention, --value-zeroing head zeroes the value as one query head reads it, not for the
-- other query heads of its key/value group. No table changes; the comments say it.

COMMENT ON COLUMN head_mixing.vz_to_cls IS 'Value zeroing of this head alone (--value-zeroing head): share of 1 − cos(ŷ_i without token j''s value, ŷ_i), each row normalised to 1 over the keys it sees, from [CLS]; on a decoder from the first token (BOS, or the first real token), the value zeroed for this query head only, not for the others of its key/value group; NULL when not run.';
COMMENT ON COLUMN head_mixing.vz_to_sep IS 'The same from all [SEP] tokens; NULL for decoders, which have no [SEP].';
COMMENT ON COLUMN head_mixing.vz_to_next IS 'The same from the next token (0 for the last real row); NULL for decoders, whose rows cannot see it.';
COMMENT ON COLUMN layer_mixing.vz_to_cls IS 'Value zeroing of each token''s value in all heads (--value-zeroing layer): share of 1 − cos(ŷ_i without token j''s value, ŷ_i), each row normalised to 1 over the keys it sees, from [CLS]; on a decoder from the first token (BOS, or the first real token); NULL when not run.';
COMMENT ON COLUMN layer_mixing.vz_to_sep IS 'The same from all [SEP] tokens; NULL for decoders, which have no [SEP].';
COMMENT ON COLUMN layer_mixing.vz_to_next IS 'The same from the next token (0 for the last real row); NULL for decoders, whose rows cannot see it.';
