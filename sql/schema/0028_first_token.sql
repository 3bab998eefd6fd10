-- The readable views name a decoder's first-token column for what it is: to_cls of a causal
-- language model is the weight on the sequence's first token (its BOS, where attention sinks
-- form), so the views show it again as to_first_token beside to_cls, NULL for an encoder.
-- Replacing a view drops its comments, so they are set again here.

CREATE OR REPLACE VIEW head_stats_named AS
SELECT
    m.name                       AS model,
    m.family,
    r.dataset,
    r.task,
    r.split,
    s.run_id,
    s.example_id,
    s.layer,
    s.head,
    s.to_cls,
    CASE WHEN m.causal THEN s.to_cls END AS to_first_token,
    s.to_sep,
    s.to_punct,
    s.to_self,
    s.to_prev,
    s.to_next,
    s.entropy,
    s.max_weight,
    s.norm_to_cls,
    s.norm_to_sep,
    s.norm_to_punct,
    s.to_learned_sink,
    s.col_cls,
    s.col_sep,
    s.col_punct,
    s.col_other,
    s.band,
    s.block,
    t.name                       AS pattern,
    s.pattern_margin
FROM head_stats AS s
JOIN runs AS r ON r.run_id = s.run_id
JOIN models AS m ON m.model_id = r.model_id
LEFT JOIN pattern_types AS t ON t.pattern = s.pattern;

COMMENT ON VIEW head_stats_named IS 'Every head_stats row (one per statistics run, example, layer and head) with its run''s model, family, dataset, task and split, and the pattern type by name: per-example statistics without a join.';
COMMENT ON COLUMN head_stats_named.model IS 'Model name (models.name): hub name or local path.';
COMMENT ON COLUMN head_stats_named.family IS 'Model family (models.family): bert, roberta, ...';
COMMENT ON COLUMN head_stats_named.dataset IS 'Dataset of the run''s examples (runs.dataset).';
COMMENT ON COLUMN head_stats_named.task IS 'Task (runs.task).';
COMMENT ON COLUMN head_stats_named.split IS 'Split (runs.split).';
COMMENT ON COLUMN head_stats_named.run_id IS 'The statistics run (runs.run_id).';
COMMENT ON COLUMN head_stats_named.example_id IS 'The example (examples.example_id).';
COMMENT ON COLUMN head_stats_named.layer IS 'Layer, 0-based.';
COMMENT ON COLUMN head_stats_named.head IS 'Head within the layer, 0-based.';
COMMENT ON COLUMN head_stats_named.to_cls IS 'Mean over query rows of the weight on [CLS] (0..1); on a decoder, on its first token (to_first_token).';
COMMENT ON COLUMN head_stats_named.to_first_token IS 'A decoder''s to_cls under its own name: the mean over query rows of the weight on the sequence''s first token (its BOS, or its first word), where attention sinks form (Xiao et al. 2023); NULL for an encoder, whose to_cls is the weight on [CLS].';
COMMENT ON COLUMN head_stats_named.to_sep IS 'Mean over query rows of the total weight on all [SEP] positions (0..1).';
COMMENT ON COLUMN head_stats_named.to_punct IS 'Mean over query rows of the total weight on punctuation tokens (0..1).';
COMMENT ON COLUMN head_stats_named.to_self IS 'Mean over query rows of A[i, i], the weight a token gives itself (0..1).';
COMMENT ON COLUMN head_stats_named.to_prev IS 'Mean over query rows of A[i, i-1], the weight on the previous token (0 for the first row).';
COMMENT ON COLUMN head_stats_named.to_next IS 'Mean over query rows of A[i, i+1], the weight on the next token (0 for the last real row).';
COMMENT ON COLUMN head_stats_named.entropy IS 'Mean over query rows of the entropy of the row''s weights, in nats.';
COMMENT ON COLUMN head_stats_named.max_weight IS 'Mean over query rows of the row''s largest weight (0..1).';
COMMENT ON COLUMN head_stats_named.norm_to_cls IS 'Norm-weighted share of the head''s output from [CLS], 0..1 (head_stats.norm_to_cls; Kobayashi et al. 2020).';
COMMENT ON COLUMN head_stats_named.norm_to_sep IS 'Norm-weighted share from all [SEP] positions, 0..1 (head_stats.norm_to_sep).';
COMMENT ON COLUMN head_stats_named.norm_to_punct IS 'Norm-weighted share from punctuation tokens, 0..1 (head_stats.norm_to_punct).';
COMMENT ON COLUMN head_stats_named.to_learned_sink IS 'Mean over query rows of the share of the row''s softmax a learned sink logit takes, 1 − Σ_j A[i, j] (head_stats.to_learned_sink); NULL where the layer has none.';
COMMENT ON COLUMN head_stats_named.col_cls IS 'Pattern feature: weight on the [CLS] column off the band (head_stats.col_cls); NULL for rows written before migration 5.';
COMMENT ON COLUMN head_stats_named.col_sep IS 'Pattern feature: weight on the [SEP] columns off the band (head_stats.col_sep).';
COMMENT ON COLUMN head_stats_named.col_punct IS 'Pattern feature: weight on the punctuation columns off the band (head_stats.col_punct).';
COMMENT ON COLUMN head_stats_named.col_other IS 'Pattern feature: weight on the heaviest other single column off the band (head_stats.col_other).';
COMMENT ON COLUMN head_stats_named.band IS 'Pattern feature: weight on the diagonal band |i - j| <= 1 (head_stats.band).';
COMMENT ON COLUMN head_stats_named.block IS 'Pattern feature: within-segment weight of sentence pairs, 0 for single sentences (head_stats.block).';
COMMENT ON COLUMN head_stats_named.pattern IS 'Pattern type by name (head_stats.pattern): heterogeneous | vertical | diagonal | vertical+diagonal | block; NULL for rows written before migration 5.';
COMMENT ON COLUMN head_stats_named.pattern_margin IS 'How sure the type is (head_stats.pattern_margin): near 0 = borderline.';

CREATE OR REPLACE VIEW head_means AS
SELECT
    m.name                       AS model,
    m.family,
    r.dataset,
    r.task,
    r.split,
    s.run_id,
    s.layer,
    s.head,
    avg(s.to_cls)                AS to_cls,
    CASE WHEN m.causal THEN avg(s.to_cls) END AS to_first_token,
    avg(s.to_sep)                AS to_sep,
    avg(s.to_punct)              AS to_punct,
    avg(s.to_self)               AS to_self,
    avg(s.to_prev)               AS to_prev,
    avg(s.to_next)               AS to_next,
    avg(s.entropy)               AS entropy,
    avg(s.max_weight)            AS max_weight,
    avg(s.norm_to_cls)           AS norm_to_cls,
    avg(s.norm_to_sep)           AS norm_to_sep,
    avg(s.norm_to_punct)         AS norm_to_punct,
    avg(s.to_learned_sink)       AS to_learned_sink,
    count(*)                     AS examples
FROM head_stats AS s
JOIN runs AS r ON r.run_id = s.run_id
JOIN models AS m ON m.model_id = r.model_id
GROUP BY m.name, m.family, m.causal, r.dataset, r.task, r.split, s.run_id, s.layer, s.head;

COMMENT ON VIEW head_means IS 'Per statistics run, layer and head: every attention statistic averaged over the run''s examples, with the run''s model, family, dataset, task and split. The named query head_summary reads it.';
COMMENT ON COLUMN head_means.model IS 'Model name (models.name): hub name or local path.';
COMMENT ON COLUMN head_means.family IS 'Model family (models.family): bert, roberta, ...';
COMMENT ON COLUMN head_means.dataset IS 'Dataset of the run''s examples (runs.dataset).';
COMMENT ON COLUMN head_means.task IS 'Task (runs.task).';
COMMENT ON COLUMN head_means.split IS 'Split (runs.split).';
COMMENT ON COLUMN head_means.run_id IS 'The statistics run (runs.run_id).';
COMMENT ON COLUMN head_means.layer IS 'Layer, 0-based.';
COMMENT ON COLUMN head_means.head IS 'Head within the layer, 0-based.';
COMMENT ON COLUMN head_means.to_cls IS 'Mean over the run''s examples of head_stats.to_cls, the weight on [CLS] (0..1).';
COMMENT ON COLUMN head_means.to_first_token IS 'A decoder''s to_cls under its own name: the mean weight on the sequence''s first token, where attention sinks form; NULL for an encoder.';
COMMENT ON COLUMN head_means.to_sep IS 'Mean over the run''s examples of head_stats.to_sep, the weight on all [SEP] positions (0..1).';
COMMENT ON COLUMN head_means.to_punct IS 'Mean over the run''s examples of head_stats.to_punct, the weight on punctuation (0..1).';
COMMENT ON COLUMN head_means.to_self IS 'Mean over the run''s examples of head_stats.to_self, the weight a token gives itself (0..1).';
COMMENT ON COLUMN head_means.to_prev IS 'Mean over the run''s examples of head_stats.to_prev, the weight on the previous token (0..1).';
COMMENT ON COLUMN head_means.to_next IS 'Mean over the run''s examples of head_stats.to_next, the weight on the next token (0..1).';
COMMENT ON COLUMN head_means.entropy IS 'Mean over the run''s examples of head_stats.entropy, in nats.';
COMMENT ON COLUMN head_means.max_weight IS 'Mean over the run''s examples of head_stats.max_weight, a row''s largest weight (0..1).';
COMMENT ON COLUMN head_means.norm_to_cls IS 'Mean over the run''s examples of head_stats.norm_to_cls, the norm-weighted share from [CLS] (0..1).';
COMMENT ON COLUMN head_means.norm_to_sep IS 'Mean over the run''s examples of head_stats.norm_to_sep (0..1).';
COMMENT ON COLUMN head_means.norm_to_punct IS 'Mean over the run''s examples of head_stats.norm_to_punct (0..1).';
COMMENT ON COLUMN head_means.to_learned_sink IS 'Mean over the run''s examples of head_stats.to_learned_sink (0..1); NULL where the layer has no learned sink.';
COMMENT ON COLUMN head_means.examples IS 'Examples averaged over (head_stats rows of the run, layer and head).';
