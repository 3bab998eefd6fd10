-- Beyond attention weights (docs/metrics.md#context-mixing, #massive-activations): per head
-- and per layer, how much of the attention block's output each token contributes once the
-- residual and the LayerNorm are counted (Kobayashi et al. 2021) and, on request, by value
-- zeroing (Mohebbi et al. 2023); per layer, the largest hidden-state magnitudes (Sun et al.
-- 2024). All are written by a statistics run (`attnwh ingest`) in the same transaction as the
-- example's head_stats rows. Every share is a mean over the example's real query rows i of a
-- per-row share over its real keys j, to the §2 targets of head_stats.

-- Per run × example × layer × head. rn_*: shares of the head's own terms after residual +
-- LayerNorm, ||γ ⊙ (A[i,j] f(x_j) − mean) / σ_i||; NULL for models whose attention block is not
-- followed by a LayerNorm of the residual sum (pre-LN ModernBERT). vz_*: value zeroing of this
-- head's value alone (`--value-zeroing head`), NULL otherwise.
CREATE TABLE head_mixing (
    run_id        INTEGER NOT NULL,
    example_id    BIGINT NOT NULL,
    layer         SMALLINT NOT NULL,
    head          SMALLINT NOT NULL,
    rn_to_cls     REAL,
    rn_to_sep     REAL,
    rn_to_punct   REAL,
    rn_to_self    REAL,
    rn_to_prev    REAL,
    rn_to_next    REAL,
    rn_residual   REAL,   -- ||r_i|| / (||r_i|| + Σ_j ||t_h,ij||): the residual against this head
    vz_to_cls     REAL,
    vz_to_sep     REAL,
    vz_to_punct   REAL,
    vz_to_self    REAL,
    vz_to_prev    REAL,
    vz_to_next    REAL
);

-- Per run × example × layer: the same after residual + LayerNorm for the whole block (every
-- head and the residual: c_ij = ||γ ⊙ (g_ij − mean) / σ_i||), the mixing ratio and the
-- residual's share; vz_*: value zeroing of each token's value in all heads
-- (`--value-zeroing layer`), NULL otherwise.
CREATE TABLE layer_mixing (
    run_id         INTEGER NOT NULL,
    example_id     BIGINT NOT NULL,
    layer          SMALLINT NOT NULL,
    mixing_ratio   REAL,   -- Σ_{j≠i} c_ij / Σ_j c_ij
    residual_share REAL,   -- ||r_i|| / (||r_i|| + Σ_h Σ_j ||t_h,ij||)
    rn_to_cls      REAL,
    rn_to_sep      REAL,
    rn_to_punct    REAL,
    rn_to_self     REAL,
    rn_to_prev     REAL,
    rn_to_next     REAL,
    vz_to_cls      REAL,
    vz_to_sep      REAL,
    vz_to_punct    REAL,
    vz_to_self     REAL,
    vz_to_prev     REAL,
    vz_to_next     REAL
);

-- Per run × example × layer: the top_k largest |h| of the layer's output hidden states over
-- the real tokens (rank 1 = largest), where they sit, and the median |h| of those hidden
-- states. Sun et al. call an entry massive when it exceeds 100 and 1000 × that median.
CREATE TABLE massive_activations (
    run_id        INTEGER NOT NULL,
    example_id    BIGINT NOT NULL,
    layer         SMALLINT NOT NULL,
    rank          SMALLINT NOT NULL,
    magnitude     REAL NOT NULL,
    dim           INTEGER NOT NULL,
    position      INTEGER NOT NULL,
    token_kind    VARCHAR NOT NULL,   -- [CLS] | [SEP] | punctuation | other
    median        REAL NOT NULL
);

COMMENT ON TABLE head_mixing IS 'Per statistics run, example, layer and head: shares of the head''s contribution to the attention block''s output after residual and LayerNorm (rn_*, Kobayashi et al. 2021) and, with --value-zeroing head, by zeroing this head''s value of each token (vz_*, Mohebbi et al. 2023); the same targets as head_stats. docs/metrics.md#context-mixing.';
COMMENT ON COLUMN head_mixing.run_id IS 'The statistics run (runs.run_id).';
COMMENT ON COLUMN head_mixing.example_id IS 'The example (examples.example_id).';
COMMENT ON COLUMN head_mixing.layer IS 'Layer, 0-based.';
COMMENT ON COLUMN head_mixing.head IS 'Head, 0-based.';
COMMENT ON COLUMN head_mixing.rn_to_cls IS 'Share of the head''s post-LayerNorm contribution ||γ ⊙ (A[i,j] f_h(x_j) − mean)|| / σ_i from [CLS], mean over query rows; NULL for pre-LN models.';
COMMENT ON COLUMN head_mixing.rn_to_sep IS 'The same from all [SEP] tokens.';
COMMENT ON COLUMN head_mixing.rn_to_punct IS 'The same from punctuation tokens.';
COMMENT ON COLUMN head_mixing.rn_to_self IS 'The same from the query token itself (j = i).';
COMMENT ON COLUMN head_mixing.rn_to_prev IS 'The same from the previous token (j = i - 1).';
COMMENT ON COLUMN head_mixing.rn_to_next IS 'The same from the next token (j = i + 1).';
COMMENT ON COLUMN head_mixing.rn_residual IS 'The residual against this head: ||r_i|| / (||r_i|| + Σ_j ||t_h,ij||) with r_i = γ ⊙ (x_i − mean) / σ_i, mean over query rows.';
COMMENT ON COLUMN head_mixing.vz_to_cls IS 'Value zeroing of this head alone (--value-zeroing head): share of 1 − cos(ŷ_i without token j''s value, ŷ_i), rows normalised to 1, from [CLS]; NULL when not run.';
COMMENT ON COLUMN head_mixing.vz_to_sep IS 'The same from all [SEP] tokens.';
COMMENT ON COLUMN head_mixing.vz_to_punct IS 'The same from punctuation tokens.';
COMMENT ON COLUMN head_mixing.vz_to_self IS 'The same from the query token itself.';
COMMENT ON COLUMN head_mixing.vz_to_prev IS 'The same from the previous token.';
COMMENT ON COLUMN head_mixing.vz_to_next IS 'The same from the next token.';

COMMENT ON TABLE layer_mixing IS 'Per statistics run, example and layer: how much the attention block mixes context after residual and LayerNorm (Kobayashi et al. 2021), its shares to the head_stats targets, and with --value-zeroing layer the value-zeroing shares (Mohebbi et al. 2023). docs/metrics.md#context-mixing.';
COMMENT ON COLUMN layer_mixing.run_id IS 'The statistics run (runs.run_id).';
COMMENT ON COLUMN layer_mixing.example_id IS 'The example (examples.example_id).';
COMMENT ON COLUMN layer_mixing.layer IS 'Layer, 0-based.';
COMMENT ON COLUMN layer_mixing.mixing_ratio IS 'Σ_{j≠i} c_ij / Σ_j c_ij over the full contributions c_ij (every head and, for j = i, the residual) after LayerNorm, mean over query rows; NULL for pre-LN models.';
COMMENT ON COLUMN layer_mixing.residual_share IS '||r_i|| / (||r_i|| + Σ_h Σ_j ||t_h,ij||): the residual''s share of the terms'' norms, mean over query rows; NULL for pre-LN models.';
COMMENT ON COLUMN layer_mixing.rn_to_cls IS 'Share of Σ_j c_ij from [CLS] (c_ij: all heads and the residual after LayerNorm), mean over query rows.';
COMMENT ON COLUMN layer_mixing.rn_to_sep IS 'The same from all [SEP] tokens.';
COMMENT ON COLUMN layer_mixing.rn_to_punct IS 'The same from punctuation tokens.';
COMMENT ON COLUMN layer_mixing.rn_to_self IS 'The same from the query token itself (residual included).';
COMMENT ON COLUMN layer_mixing.rn_to_prev IS 'The same from the previous token.';
COMMENT ON COLUMN layer_mixing.rn_to_next IS 'The same from the next token.';
COMMENT ON COLUMN layer_mixing.vz_to_cls IS 'Value zeroing of each token''s value in all heads (--value-zeroing layer): share of 1 − cos(ŷ_i without token j''s value, ŷ_i), rows normalised to 1, from [CLS]; NULL when not run.';
COMMENT ON COLUMN layer_mixing.vz_to_sep IS 'The same from all [SEP] tokens.';
COMMENT ON COLUMN layer_mixing.vz_to_punct IS 'The same from punctuation tokens.';
COMMENT ON COLUMN layer_mixing.vz_to_self IS 'The same from the query token itself.';
COMMENT ON COLUMN layer_mixing.vz_to_prev IS 'The same from the previous token.';
COMMENT ON COLUMN layer_mixing.vz_to_next IS 'The same from the next token.';

COMMENT ON TABLE massive_activations IS 'Per statistics run, example and layer: the largest magnitudes of the layer''s output hidden states over the real tokens, with where they sit, and the median magnitude (Sun et al. 2024: massive when > 100 and > 1000 × the median). docs/metrics.md#massive-activations.';
COMMENT ON COLUMN massive_activations.run_id IS 'The statistics run (runs.run_id).';
COMMENT ON COLUMN massive_activations.example_id IS 'The example (examples.example_id).';
COMMENT ON COLUMN massive_activations.layer IS 'Layer whose output it is, 0-based (the embeddings are not included).';
COMMENT ON COLUMN massive_activations.rank IS '1 for the largest magnitude of the example''s layer output, 2 for the next, …';
COMMENT ON COLUMN massive_activations.magnitude IS '|h[position, dim]|.';
COMMENT ON COLUMN massive_activations.dim IS 'Hidden dimension, 0-based.';
COMMENT ON COLUMN massive_activations.position IS 'Token position in the example, 0-based ([CLS] is 0 for BERT-like tokenizers).';
COMMENT ON COLUMN massive_activations.token_kind IS '[CLS], [SEP], punctuation or other: the kind of the token at position.';
COMMENT ON COLUMN massive_activations.median IS 'Median of |h| over the real tokens and every dimension of this layer''s output for this example.';

COMMENT ON COLUMN ablation_configs.kind IS 'baseline | head | layer | helpful (every head whose own disabling helped) | top_k (the k heads whose own disabling helped most) | sinks (every sink head of the model, from a statistics run on the same examples: mean attention to [CLS], [SEP] or punctuation above 0.3).';

-- Per ablation run, layer and head: the sink scores of the run's model on exactly the run's
-- examples, from one statistics run of the same weights whose run_examples hold them all (of
-- several: the ablation run's max_length first, as truncation changes the maps, then a
-- complete run, then the latest). The named queries sink_heads_of_run (what the 'sinks'
-- combination disables) and sink_vs_ablation read it; an ablation run without such a
-- statistics run has no rows.
CREATE VIEW ablation_sink_scores AS
WITH wanted AS (
    SELECT a.run_id, a.max_length, m.weights_hash, e.example_id
    FROM runs AS a
    JOIN models AS m USING (model_id)
    JOIN run_examples AS e USING (run_id)
    WHERE a.kind = 'ablation'
),
sizes AS (
    SELECT run_id, max_length, weights_hash, count(*) AS n FROM wanted GROUP BY ALL
),
candidates AS (
    SELECT
        z.run_id AS ablation_run,
        s.run_id AS statistics_run,
        row_number() OVER (
            PARTITION BY z.run_id
            ORDER BY (s.max_length = z.max_length) DESC, (s.status = 'complete') DESC, s.run_id DESC
        ) AS preference
    FROM sizes AS z
    JOIN models AS m ON m.weights_hash = z.weights_hash
    JOIN runs AS s ON s.model_id = m.model_id AND s.kind = 'statistics'
    JOIN run_examples AS e ON e.run_id = s.run_id
    JOIN wanted AS w ON w.run_id = z.run_id AND w.example_id = e.example_id
    GROUP BY z.run_id, z.max_length, z.n, s.run_id, s.max_length, s.status
    HAVING count(*) = z.n
),
means AS (
    SELECT
        c.ablation_run,
        c.statistics_run,
        h.layer,
        h.head,
        count(*)         AS examples,
        avg(h.to_cls)    AS to_cls,
        avg(h.to_sep)    AS to_sep,
        avg(h.to_punct)  AS to_punct
    FROM candidates AS c
    JOIN head_stats AS h ON h.run_id = c.statistics_run
    JOIN wanted AS w ON w.run_id = c.ablation_run AND w.example_id = h.example_id
    WHERE c.preference = 1
    GROUP BY c.ablation_run, c.statistics_run, h.layer, h.head
)
SELECT
    *,
    greatest(to_cls, to_sep, to_punct) AS sink_score,
    CASE greatest(to_cls, to_sep, to_punct)
        WHEN to_cls THEN '[CLS]' WHEN to_sep THEN '[SEP]' ELSE 'punctuation' END AS sink_kind
FROM means;

COMMENT ON VIEW ablation_sink_scores IS 'Per ablation run, layer and head: mean attention to [CLS], [SEP] and punctuation of the run''s model over exactly the run''s examples, from a statistics run of the same weights that holds them all, and the sink score (Gu et al. 2025). docs/metrics.md#attention-sinks.';
COMMENT ON COLUMN ablation_sink_scores.ablation_run IS 'The ablation run (runs.run_id).';
COMMENT ON COLUMN ablation_sink_scores.statistics_run IS 'The statistics run the means come from: same weights, holds every example of the ablation run; the ablation run''s max_length first, then a complete run, then the latest.';
COMMENT ON COLUMN ablation_sink_scores.layer IS 'Layer, 0-based.';
COMMENT ON COLUMN ablation_sink_scores.head IS 'Head, 0-based.';
COMMENT ON COLUMN ablation_sink_scores.examples IS 'Examples averaged over: the ablation run''s.';
COMMENT ON COLUMN ablation_sink_scores.to_cls IS 'Mean of head_stats.to_cls over the ablation run''s examples.';
COMMENT ON COLUMN ablation_sink_scores.to_sep IS 'Mean of head_stats.to_sep over the ablation run''s examples.';
COMMENT ON COLUMN ablation_sink_scores.to_punct IS 'Mean of head_stats.to_punct over the ablation run''s examples.';
COMMENT ON COLUMN ablation_sink_scores.sink_score IS 'The largest of to_cls, to_sep and to_punct: the head is a sink head at eps when this exceeds eps.';
COMMENT ON COLUMN ablation_sink_scores.sink_kind IS 'Which of the three is largest: [CLS], [SEP] or punctuation (ties: [CLS], then [SEP]).';
