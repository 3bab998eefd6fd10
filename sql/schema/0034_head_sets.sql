-- Sets of heads disabled together in a loss sweep (`attnwh ingest ablation --disable-top
-- retrieval:10 --random-heads 10 --draws 5 --heads 18.6,17.3`, docs/ablation.md#head-sets):
-- each set is an ablation_configs row of kind 'set' with its label, a random set's draw and the
-- head-roles run a top set was ranked in. And per configuration, sequence and span, the tokens
-- the model predicts greedily, so a probe's answer accuracy is correct / tokens (Wu et al. 2025:
-- masking the top retrieval heads breaks needle-in-a-haystack answers, k random heads do not).

ALTER TABLE ablation_configs ADD COLUMN label VARCHAR;
ALTER TABLE ablation_configs ADD COLUMN draw SMALLINT;
ALTER TABLE ablation_configs ADD COLUMN roles_run INTEGER;
ALTER TABLE ablation_losses ADD COLUMN correct INTEGER;

COMMENT ON COLUMN ablation_configs.kind IS 'baseline | head (one head) | layer (a whole layer) | helpful (every head whose own disabling helped) | top_k (the k heads that helped most) | sinks (every sink head) | set (a set of heads asked for in a loss sweep: label names it).';
COMMENT ON COLUMN ablation_configs.k IS 'top_k: the number of heads; helpful: their count; set: the heads in the set; else NULL.';
COMMENT ON COLUMN ablation_configs.label IS 'set: what the set is: top-K ROLE (the K heads of the highest mean ROLE score, head_role_means, in the head-roles run roles_run), random-K (K heads drawn uniformly without replacement from the model''s heads, the top sets'' heads left out, seeded by the run''s --seed; draw numbers the draws) or heads L.H,… (the heads listed). NULL for the other kinds.';
COMMENT ON COLUMN ablation_configs.draw IS 'set random-K: which draw, 1-based (each draw another K heads from the same seeded generator, one after the other); NULL otherwise.';
COMMENT ON COLUMN ablation_configs.roles_run IS 'set top-K ROLE: the head-roles run (runs.run_id, kind roles) whose per-head mean ROLE score ranked the heads: the model''s latest complete one defining the score when the sweep was prepared; NULL otherwise.';
COMMENT ON COLUMN ablation_losses.correct IS 'Positions t of the span (those counted in tokens) where the configuration''s greedy prediction is the token: argmax z_{t-1} = x_t (ties: the lowest token id). correct / tokens is the span''s accuracy, e.g. a pass key''s answer digits (span answer). NULL in rows stored before migration 34.';
