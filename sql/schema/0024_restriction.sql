-- Which key/value groups of a decoder need the whole context (`attnwh ingest restriction`,
-- docs/whole-context.md, docs/metrics.md#streaming-restriction-and-kv-memory). A restricted
-- group keeps only the first S tokens of a sequence (the attention sinks, Xiao et al. 2023,
-- StreamingLLM) and the last W up to each query (keys i − W + 1 .. i), its attention
-- renormalised over them; under grouped-query attention the cache is per key/value group,
-- so a group is restricted with all its query heads (DuoAttention, Xiao et al. 2024). Each
-- group is restricted alone and ranked by the change in next-token loss on held-out text;
-- then the k least harmed are restricted together for a grid of k, each set's loss measured
-- with exactly that set (never summed from the single restrictions).

CREATE TABLE restriction_runs (
    run_id          INTEGER PRIMARY KEY,
    sinks           SMALLINT NOT NULL,
    "window"        INTEGER NOT NULL,
    context_length  INTEGER NOT NULL,
    kv_context      INTEGER NOT NULL,
    kv_dtype        VARCHAR NOT NULL,
    sequences       INTEGER NOT NULL,
    tokens          BIGINT NOT NULL,
    loss            DOUBLE NOT NULL,
    kv_bytes        BIGINT NOT NULL,
    kv_bytes_run    BIGINT NOT NULL,
    resamples       INTEGER NOT NULL,
    seed            INTEGER NOT NULL
);

CREATE TABLE restriction_groups (
    run_id          INTEGER NOT NULL,
    layer           SMALLINT NOT NULL,
    kv_group        SMALLINT NOT NULL,
    rank            SMALLINT NOT NULL,
    loss            DOUBLE NOT NULL,
    delta           DOUBLE NOT NULL,
    ci_low          DOUBLE NOT NULL,
    ci_high         DOUBLE NOT NULL,
    p_value         DOUBLE NOT NULL,
    p_adjusted      DOUBLE NOT NULL,
    kv_bytes_saved  BIGINT NOT NULL,
    PRIMARY KEY (run_id, layer, kv_group)
);

CREATE TABLE restriction_plan (
    run_id              INTEGER NOT NULL,
    k                   SMALLINT NOT NULL,
    groups              STRUCT(layer SMALLINT, kv_group SMALLINT)[] NOT NULL,
    loss                DOUBLE NOT NULL,
    delta               DOUBLE NOT NULL,
    ci_low              DOUBLE NOT NULL,
    ci_high             DOUBLE NOT NULL,
    p_value             DOUBLE NOT NULL,
    kv_bytes_saved      BIGINT NOT NULL,
    kv_bytes_saved_run  BIGINT NOT NULL,
    PRIMARY KEY (run_id, k)
);

CREATE TABLE restriction_losses (
    run_id      INTEGER NOT NULL,
    kind        VARCHAR NOT NULL,   -- unrestricted | group | plan
    layer       SMALLINT,           -- group rows
    kv_group    SMALLINT,           -- group rows
    k           SMALLINT,           -- plan rows
    sequence    INTEGER NOT NULL,
    nats        DOUBLE NOT NULL,
    tokens      INTEGER NOT NULL
);

COMMENT ON TABLE restriction_runs IS 'Per restriction run (runs.kind = ''restriction''): the restriction''s settings and the unrestricted loss. A restricted key/value group keeps the first S tokens (sinks; StreamingLLM, Xiao et al. 2023) and the last W up to each query, renormalised (DuoAttention, Xiao et al. 2024); docs/metrics.md#streaming-restriction-and-kv-memory.';
COMMENT ON COLUMN restriction_runs.run_id IS 'The restriction run (runs.run_id).';
COMMENT ON COLUMN restriction_runs.sinks IS 'S (--sink-tokens): the first S real tokens of a sequence every restricted group keeps.';
COMMENT ON COLUMN restriction_runs."window" IS 'W (--window): a restricted group''s query i keeps keys i − W + 1 .. i.';
COMMENT ON COLUMN restriction_runs.context_length IS 'Tokens per sequence the loss was measured on (--context-length; the text''s last sequence may be shorter).';
COMMENT ON COLUMN restriction_runs.kv_context IS 'n (--kv-context): the context length at which restriction_groups.kv_bytes_saved and restriction_plan.kv_bytes_saved are reported.';
COMMENT ON COLUMN restriction_runs.kv_dtype IS 'The dtype of a cached value in the KV byte counts (--kv-dtype; default the checkpoint''s own).';
COMMENT ON COLUMN restriction_runs.sequences IS 'Sequences of held-out text measured (restriction_losses.sequence 0 .. sequences − 1).';
COMMENT ON COLUMN restriction_runs.tokens IS 'Tokens predicted over all sequences: Σ_s (real tokens of s − 1).';
COMMENT ON COLUMN restriction_runs.loss IS 'Unrestricted next-token cross-entropy, nats per token: Σ_s nats_s / Σ_s tokens_s.';
COMMENT ON COLUMN restriction_runs.kv_bytes IS 'The whole KV cache of one sequence of kv_context tokens: Σ_layers H_kv · n_l · 2 · d_head · bytes per value (n_l = kv_context, or a sliding-window layer''s window).';
COMMENT ON COLUMN restriction_runs.kv_bytes_run IS 'kv_bytes at the run''s own context_length.';
COMMENT ON COLUMN restriction_runs.resamples IS 'Bootstrap resamples of the sequences behind every ci_low / ci_high.';
COMMENT ON COLUMN restriction_runs.seed IS 'Seed of the bootstrap resamples.';

COMMENT ON TABLE restriction_groups IS 'Per restriction run, layer and key/value group: the group restricted alone to S sinks + a window of W (every query head of the group), the loss change on held-out text, a paired test over sequences and the KV bytes it would save; docs/metrics.md#streaming-restriction-and-kv-memory.';
COMMENT ON COLUMN restriction_groups.run_id IS 'The restriction run (runs.run_id; restriction_runs holds S, W and the contexts).';
COMMENT ON COLUMN restriction_groups.layer IS 'Layer, 0-based.';
COMMENT ON COLUMN restriction_groups.kv_group IS 'Key/value group g, 0-based; query head h reads group h // (H / H_kv) (every head its own group without GQA).';
COMMENT ON COLUMN restriction_groups.rank IS '1 = least harmed: groups ordered by delta, ties by (layer, kv_group). restriction_plan restricts the first k.';
COMMENT ON COLUMN restriction_groups.loss IS 'Next-token cross-entropy with this group alone restricted, nats per token: Σ_s nats_s / Σ_s tokens_s.';
COMMENT ON COLUMN restriction_groups.delta IS 'loss − the unrestricted loss (restriction_runs.loss), nats per token; positive = the group needs more than its sinks and window.';
COMMENT ON COLUMN restriction_groups.ci_low IS 'Lower end of the 95 % paired percentile bootstrap interval of delta: sequences resampled with replacement, Σ (nats_restricted − nats_unrestricted) / Σ tokens over each resample.';
COMMENT ON COLUMN restriction_groups.ci_high IS 'Upper end of the 95 % bootstrap interval of delta.';
COMMENT ON COLUMN restriction_groups.p_value IS 'Two-sided paired sign-flip permutation test of delta (scipy.stats.permutation_test: each sequence''s nats_restricted − nats_unrestricted keeps or flips its sign; exact when 2^n ≤ the run''s resamples), as the loss sweep tests a disabled head (ablations, metric loss); 1 where no sequence changes.';
COMMENT ON COLUMN restriction_groups.p_adjusted IS 'p_value adjusted with Benjamini–Hochberg across the run''s groups (false discovery rate).';
COMMENT ON COLUMN restriction_groups.kv_bytes_saved IS 'KV bytes one sequence of kv_context tokens no longer caches with this group restricted: (n_l − S − W) · 2 · d_head · bytes per value (0 where n_l ≤ S + W).';

COMMENT ON TABLE restriction_plan IS 'Per restriction run and k: the k least harmed groups of restriction_groups restricted together, the loss measured with exactly that set, and the KV bytes it saves; k = 0 is the model as it is, measured like the others (docs/whole-context.md).';
COMMENT ON COLUMN restriction_plan.run_id IS 'The restriction run (runs.run_id).';
COMMENT ON COLUMN restriction_plan.k IS 'Groups restricted together: those of rank 1 .. k in restriction_groups.';
COMMENT ON COLUMN restriction_plan.groups IS 'The restricted (layer, kv_group) pairs, sorted; every other group keeps the whole context.';
COMMENT ON COLUMN restriction_plan.loss IS 'Next-token cross-entropy with these groups restricted together, nats per token (Σ_s nats_s / Σ_s tokens_s).';
COMMENT ON COLUMN restriction_plan.delta IS 'loss − the unrestricted loss (restriction_runs.loss), nats per token.';
COMMENT ON COLUMN restriction_plan.ci_low IS 'Lower end of the 95 % paired bootstrap interval of delta over sequences (as restriction_groups.ci_low).';
COMMENT ON COLUMN restriction_plan.ci_high IS 'Upper end of the 95 % bootstrap interval of delta.';
COMMENT ON COLUMN restriction_plan.p_value IS 'Two-sided paired sign-flip permutation test of delta (as restriction_groups.p_value); not adjusted: the sets are nested.';
COMMENT ON COLUMN restriction_plan.kv_bytes_saved IS 'KV bytes saved for one sequence of kv_context tokens: Σ_layers |R_l| · (n_l − S − W) · 2 · d_head · bytes per value (restriction_runs.kv_bytes is the whole cache).';
COMMENT ON COLUMN restriction_plan.kv_bytes_saved_run IS 'kv_bytes_saved at the run''s own context_length.';

COMMENT ON TABLE restriction_losses IS 'Per restriction run, restriction set and sequence of held-out text: the summed next-token loss, so the paired tests of restriction_groups and restriction_plan can be recomputed.';
COMMENT ON COLUMN restriction_losses.run_id IS 'The restriction run (runs.run_id).';
COMMENT ON COLUMN restriction_losses.kind IS 'unrestricted (the model as it is), group (one group alone: layer, kv_group) or plan (the k least harmed together: k).';
COMMENT ON COLUMN restriction_losses.layer IS 'The restricted group''s layer (group rows; NULL otherwise).';
COMMENT ON COLUMN restriction_losses.kv_group IS 'The restricted key/value group (group rows; NULL otherwise).';
COMMENT ON COLUMN restriction_losses.k IS 'The plan''s k (plan rows; NULL otherwise).';
COMMENT ON COLUMN restriction_losses.sequence IS 'The sequence of held-out text, 0-based, in the order the text was cut.';
COMMENT ON COLUMN restriction_losses.nats IS 'Summed next-token cross-entropy over the sequence''s predicted tokens, nats.';
COMMENT ON COLUMN restriction_losses.tokens IS 'Tokens predicted in the sequence (its real tokens less the first).';
