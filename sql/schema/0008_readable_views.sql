-- Readable views (issue 17): the facts joined with the names that identify them (model,
-- family, dataset, task, split, run), and pattern types by name instead of code, so that
-- common questions are one SELECT from one view. Conventions as in 0007: layer and head are
-- 0-based; an ablation delta is the score with the heads disabled minus the baseline (> 0:
-- disabling helped, < 0: it hurt). Views hold no rows: they cost nothing until read, and a
-- definition here is the one place a derived quantity is defined (head_summary reads
-- head_means). Each view and column is commented at the end, as 0007 does for the tables.

-- Every head_stats row with its run's model and data; pattern is the type's name.
CREATE VIEW head_stats_named AS
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
    s.col_cls,
    s.col_sep,
    s.col_punct,
    s.col_other,
    s.band,
    s.block,
    t.name                       AS pattern
FROM head_stats AS s
JOIN runs AS r ON r.run_id = s.run_id
JOIN models AS m ON m.model_id = r.model_id
LEFT JOIN pattern_types AS t ON t.pattern = s.pattern;

-- Per statistics run, layer and head: every statistic averaged over the run's examples. The
-- named query head_summary reads this view, so the two cannot differ.
CREATE VIEW head_means AS
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
    count(*)                     AS examples
FROM head_stats AS s
JOIN runs AS r ON r.run_id = s.run_id
JOIN models AS m ON m.model_id = r.model_id
GROUP BY m.name, m.family, r.dataset, r.task, r.split, s.run_id, s.layer, s.head;

-- Every attention_change row of a compare run with the names of the base and the tuned model.
CREATE VIEW attention_change_named AS
SELECT
    b.name                       AS base,
    t.name                       AS tuned,
    r.dataset,
    r.task,
    r.split,
    c.run_id,
    c.example_id,
    c.layer,
    c.head,
    c.cosine
FROM attention_change AS c
JOIN runs AS r ON r.run_id = c.run_id
JOIN models AS t ON t.model_id = r.model_id
JOIN models AS b ON b.model_id = r.base_model_id
WHERE r.kind = 'compare';

-- Every map that has a pattern type from the rules, a CNN or a hand label, each by name, with
-- its run's model and data and the features the rules read.
CREATE VIEW head_patterns_named AS
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
    rules.name                   AS pattern,
    cnn.name                     AS cnn_pattern,
    hand.name                    AS hand_pattern,
    s.col_cls,
    s.col_sep,
    s.col_punct,
    s.col_other,
    s.band,
    s.block
FROM head_stats AS s
JOIN runs AS r ON r.run_id = s.run_id
JOIN models AS m ON m.model_id = r.model_id
LEFT JOIN pattern_thumbnails AS th
    ON th.run_id = s.run_id AND th.example_id = s.example_id AND th.layer = s.layer AND th.head = s.head
LEFT JOIN pattern_labels AS lb
    ON lb.run_id = s.run_id AND lb.example_id = s.example_id AND lb.layer = s.layer AND lb.head = s.head
LEFT JOIN pattern_types AS rules ON rules.pattern = s.pattern
LEFT JOIN pattern_types AS cnn ON cnn.pattern = th.cnn_pattern
LEFT JOIN pattern_types AS hand ON hand.pattern = lb.pattern
WHERE s.pattern IS NOT NULL OR th.cnn_pattern IS NOT NULL OR lb.pattern IS NOT NULL;

-- ablation_results (0006) gains, after its columns (which keep their names and order, so the
-- named queries are unchanged): the model's family, the run's dataset, and the disabled head's
-- gradient importance from the same run. Replacing a view drops its comments: all are restated.
CREATE OR REPLACE VIEW ablation_results AS
SELECT
    m.name                       AS model,
    r.task,
    r.split,
    a.run_id,
    a.config_id,
    c.kind,
    c.mode,
    c.layer,
    c.head,
    c.k,
    c.n_disabled,
    c.disabled,
    a.metric,
    a.baseline,
    a.value,
    a.delta,
    a.ci_low,
    a.ci_high,
    a.p_value,
    a.p_adjusted,
    a.p_adjusted < 0.05          AS significant,
    a.test,
    a.n_examples                 AS examples,
    a.n_resamples,
    m.family,
    r.dataset,
    i.importance
FROM ablations AS a
JOIN ablation_configs AS c ON c.run_id = a.run_id AND c.config_id = a.config_id
JOIN runs AS r ON r.run_id = a.run_id
JOIN models AS m ON m.model_id = r.model_id
LEFT JOIN head_importance AS i ON i.run_id = a.run_id AND i.layer = c.layer AND i.head = c.head;

-- head_stats_named (view)
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
COMMENT ON COLUMN head_stats_named.to_cls IS 'Mean over query rows of the weight on [CLS] (0..1).';
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
COMMENT ON COLUMN head_stats_named.col_cls IS 'Pattern feature: weight on the [CLS] column off the band (head_stats.col_cls); NULL for rows written before migration 5.';
COMMENT ON COLUMN head_stats_named.col_sep IS 'Pattern feature: weight on the [SEP] columns off the band (head_stats.col_sep).';
COMMENT ON COLUMN head_stats_named.col_punct IS 'Pattern feature: weight on the punctuation columns off the band (head_stats.col_punct).';
COMMENT ON COLUMN head_stats_named.col_other IS 'Pattern feature: weight on the heaviest other single column off the band (head_stats.col_other).';
COMMENT ON COLUMN head_stats_named.band IS 'Pattern feature: weight on the diagonal band |i - j| <= 1 (head_stats.band).';
COMMENT ON COLUMN head_stats_named.block IS 'Pattern feature: within-segment weight of sentence pairs, 0 for single sentences (head_stats.block).';
COMMENT ON COLUMN head_stats_named.pattern IS 'Pattern type given by the rules, by name: heterogeneous | vertical | diagonal | vertical+diagonal | block; NULL for rows written before migration 5.';

-- head_means (view)
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
COMMENT ON COLUMN head_means.examples IS 'Examples averaged over (head_stats rows of the run, layer and head).';

-- attention_change_named (view)
COMMENT ON VIEW attention_change_named IS 'Every attention_change row (one per compare run, example, layer and head) with the names of the base and the tuned model and the run''s dataset, task and split.';
COMMENT ON COLUMN attention_change_named.base IS 'Base model name (models.name of runs.base_model_id), the model before fine-tuning.';
COMMENT ON COLUMN attention_change_named.tuned IS 'Tuned model name (models.name of runs.model_id).';
COMMENT ON COLUMN attention_change_named.dataset IS 'Dataset of the run''s examples (runs.dataset).';
COMMENT ON COLUMN attention_change_named.task IS 'Task (runs.task).';
COMMENT ON COLUMN attention_change_named.split IS 'Split (runs.split).';
COMMENT ON COLUMN attention_change_named.run_id IS 'The compare run (runs.run_id).';
COMMENT ON COLUMN attention_change_named.example_id IS 'The example (examples.example_id).';
COMMENT ON COLUMN attention_change_named.layer IS 'Layer, 0-based.';
COMMENT ON COLUMN attention_change_named.head IS 'Head within the layer, 0-based.';
COMMENT ON COLUMN attention_change_named.cosine IS 'Cosine similarity of the base and tuned model''s maps, cropped to the real tokens and flattened; 1 = unchanged, lower = changed more.';

-- head_patterns_named (view)
COMMENT ON VIEW head_patterns_named IS 'Every map (statistics run, example, layer, head) that has a pattern type from the rules, a CNN or a hand label, each type by name, with the run''s model, family, dataset, task and split and the features the rules read.';
COMMENT ON COLUMN head_patterns_named.model IS 'Model name (models.name): hub name or local path.';
COMMENT ON COLUMN head_patterns_named.family IS 'Model family (models.family): bert, roberta, ...';
COMMENT ON COLUMN head_patterns_named.dataset IS 'Dataset of the run''s examples (runs.dataset).';
COMMENT ON COLUMN head_patterns_named.task IS 'Task (runs.task).';
COMMENT ON COLUMN head_patterns_named.split IS 'Split (runs.split).';
COMMENT ON COLUMN head_patterns_named.run_id IS 'The statistics run (runs.run_id).';
COMMENT ON COLUMN head_patterns_named.example_id IS 'The example (examples.example_id).';
COMMENT ON COLUMN head_patterns_named.layer IS 'Layer, 0-based.';
COMMENT ON COLUMN head_patterns_named.head IS 'Head within the layer, 0-based.';
COMMENT ON COLUMN head_patterns_named.pattern IS 'Type given by the rules (head_stats.pattern), by name: heterogeneous | vertical | diagonal | vertical+diagonal | block; NULL if the rules gave none.';
COMMENT ON COLUMN head_patterns_named.cnn_pattern IS 'Type given by a trained CNN to the map''s thumbnail (pattern_thumbnails.cnn_pattern), by name; NULL unless classified with attnwh patterns reclassify --classifier cnn.';
COMMENT ON COLUMN head_patterns_named.hand_pattern IS 'Type given by hand (pattern_labels.pattern), by name; NULL unless a label was imported.';
COMMENT ON COLUMN head_patterns_named.col_cls IS 'Weight on the [CLS] column off the band (head_stats.col_cls).';
COMMENT ON COLUMN head_patterns_named.col_sep IS 'Weight on the [SEP] columns off the band (head_stats.col_sep).';
COMMENT ON COLUMN head_patterns_named.col_punct IS 'Weight on the punctuation columns off the band (head_stats.col_punct).';
COMMENT ON COLUMN head_patterns_named.col_other IS 'Weight on the heaviest other single column off the band (head_stats.col_other).';
COMMENT ON COLUMN head_patterns_named.band IS 'Weight on the diagonal band |i - j| <= 1 (head_stats.band).';
COMMENT ON COLUMN head_patterns_named.block IS 'Within-segment weight of sentence pairs, 0 for single sentences (head_stats.block).';

-- ablation_results (view, replaced above)
COMMENT ON VIEW ablation_results IS 'Every ablation configuration''s scores with its run''s model, family, dataset, task and split, and the disabled head''s gradient importance: what the named ablation queries read. delta = disabled minus baseline, > 0 means disabling helped.';
COMMENT ON COLUMN ablation_results.model IS 'Model name (models.name), a fine-tuned classifier.';
COMMENT ON COLUMN ablation_results.task IS 'Task (runs.task).';
COMMENT ON COLUMN ablation_results.split IS 'Split scored (runs.split).';
COMMENT ON COLUMN ablation_results.run_id IS 'The ablation run (runs.run_id).';
COMMENT ON COLUMN ablation_results.config_id IS 'The configuration; 0 = baseline.';
COMMENT ON COLUMN ablation_results.kind IS 'baseline | head | layer | helpful | top_k (ablation_configs.kind).';
COMMENT ON COLUMN ablation_results.mode IS 'uniform | zero (ablation_configs.mode).';
COMMENT ON COLUMN ablation_results.layer IS 'Disabled layer, 0-based; NULL unless a head or layer configuration.';
COMMENT ON COLUMN ablation_results.head IS 'Disabled head, 0-based; NULL unless a head configuration.';
COMMENT ON COLUMN ablation_results.k IS 'Heads in a top_k or helpful combination; else NULL.';
COMMENT ON COLUMN ablation_results.n_disabled IS 'Number of heads disabled.';
COMMENT ON COLUMN ablation_results.disabled IS 'The disabled heads as layer-head, comma separated, 0-based.';
COMMENT ON COLUMN ablation_results.metric IS 'accuracy | f1 | mcc | pearson | spearman.';
COMMENT ON COLUMN ablation_results.baseline IS 'The score with nothing disabled.';
COMMENT ON COLUMN ablation_results.value IS 'The score with the heads disabled.';
COMMENT ON COLUMN ablation_results.delta IS 'value - baseline (disabled minus baseline); > 0 means disabling helped, < 0 that it hurt.';
COMMENT ON COLUMN ablation_results.ci_low IS 'Lower end of the 95 % bootstrap interval of delta.';
COMMENT ON COLUMN ablation_results.ci_high IS 'Upper end of the 95 % bootstrap interval of delta.';
COMMENT ON COLUMN ablation_results.p_value IS 'Two-sided p-value of the paired test.';
COMMENT ON COLUMN ablation_results.p_adjusted IS 'Benjamini-Hochberg adjusted p-value; NULL for the baseline and combinations.';
COMMENT ON COLUMN ablation_results.significant IS 'p_adjusted < 0.05; NULL where p_adjusted is NULL.';
COMMENT ON COLUMN ablation_results.test IS 'mcnemar-exact | permutation.';
COMMENT ON COLUMN ablation_results.examples IS 'Examples scored (ablations.n_examples).';
COMMENT ON COLUMN ablation_results.n_resamples IS 'Bootstrap resamples used.';
COMMENT ON COLUMN ablation_results.family IS 'Model family (models.family): bert, roberta, ...';
COMMENT ON COLUMN ablation_results.dataset IS 'Dataset of the scored examples (runs.dataset).';
COMMENT ON COLUMN ablation_results.importance IS 'For a head configuration, the disabled head''s gradient importance in the same run (head_importance.importance); NULL for other configurations and runs that did not measure it.';
