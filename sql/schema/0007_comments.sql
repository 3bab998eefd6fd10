-- A self-describing warehouse: a comment on every table, view and column, readable with
-- `attnwh schema`, duckdb_tables(), duckdb_views() and duckdb_columns(). Wording follows
-- docs/metrics.md. Conventions used throughout: layer and head are 0-based; attention weights
-- and shares are fractions of a row's weight (0..1); an ablation delta is value with the
-- heads disabled minus the baseline, so a delta > 0 means disabling helped.
-- A table added by a later migration gets its comments in that migration.

-- schema_migrations (created by attnwh.sql.warehouse before the first migration)
COMMENT ON TABLE schema_migrations IS 'The schema migrations applied to this file, one row per version (sql/schema/NNNN_name.sql).';
COMMENT ON COLUMN schema_migrations.version IS 'Migration number; the highest is the file''s schema version.';
COMMENT ON COLUMN schema_migrations.name IS 'Migration name, from its file name.';
COMMENT ON COLUMN schema_migrations.applied_at IS 'When the migration was applied (local time).';

-- models
COMMENT ON TABLE models IS 'One row per encoder checkpoint seen by any run, identified by name and a hash of its weights.';
COMMENT ON COLUMN models.model_id IS 'Model id; runs.model_id and runs.base_model_id refer to it.';
COMMENT ON COLUMN models.name IS 'Hub name or local path, as given on the command line.';
COMMENT ON COLUMN models.revision IS 'Hub commit the weights came from; NULL for local checkpoints.';
COMMENT ON COLUMN models.weights_hash IS 'blake2b hash of the parameters as loaded; a changed checkpoint under the same name gets a new row.';
COMMENT ON COLUMN models.family IS 'config.model_type: bert, roberta, distilbert, ...';
COMMENT ON COLUMN models.architecture IS 'The transformers class that was loaded.';
COMMENT ON COLUMN models.num_layers IS 'Number of attention layers (numbered 0 .. num_layers - 1).';
COMMENT ON COLUMN models.num_heads IS 'Attention heads per layer (numbered 0 .. num_heads - 1).';
COMMENT ON COLUMN models.hidden_size IS 'Width of the hidden states.';
COMMENT ON COLUMN models.max_length IS 'Longest input the model accepts, in tokens.';
COMMENT ON COLUMN models.added_at IS 'When the model was first recorded.';
COMMENT ON COLUMN models.base_model_id IS 'The model this one was fine-tuned from (models.model_id); NULL for pre-trained models.';
COMMENT ON COLUMN models.finetuned_task IS 'Task it was fine-tuned on; NULL for pre-trained models.';

-- examples
COMMENT ON TABLE examples IS 'Every example any run read; example_id is a hash of (dataset, task, split, position, texts, label), so the same example has the same id in every run and file.';
COMMENT ON COLUMN examples.example_id IS 'Hash of the example''s dataset, task, split, position, texts and label.';
COMMENT ON COLUMN examples.dataset IS 'Where the task comes from: glue, sample, a Hugging Face datasets name, or a local file name with its extension.';
COMMENT ON COLUMN examples.task IS 'Task name: a GLUE task, a sample task, a datasets configuration, or --task (default: the file name without extension).';
COMMENT ON COLUMN examples.split IS 'Split read: train, dev, ...; all for a whole local file.';
COMMENT ON COLUMN examples.position IS 'Row index within the source split, 0-based.';
COMMENT ON COLUMN examples.guid IS 'The source''s own id of the example, when it has one.';
COMMENT ON COLUMN examples.text_a IS 'The (first) sentence.';
COMMENT ON COLUMN examples.text_b IS 'The second sentence of a sentence pair; NULL for single sentences.';
COMMENT ON COLUMN examples.label IS 'Gold label as written in the source; NULL when unlabelled.';
COMMENT ON COLUMN examples.label_id IS 'Index of the label in the task''s label names; NULL for regression and unlabelled examples.';

-- runs
COMMENT ON TABLE runs IS 'One row per run of any kind (statistics, compare, relations, finetune, ablation): its model, data, settings, status and timing. Written only by attnwh.sql.runs.';
COMMENT ON COLUMN runs.run_id IS 'Run id; every per-run table refers to it.';
COMMENT ON COLUMN runs.kind IS 'statistics (attnwh ingest) | compare | relations | finetune | ablation.';
COMMENT ON COLUMN runs.run_key IS 'Hash of everything that determines the run''s rows; a rerun with the same key resumes or is skipped.';
COMMENT ON COLUMN runs.model_id IS 'The model run (models.model_id); for compare and finetune runs, the tuned model.';
COMMENT ON COLUMN runs.dataset IS 'Dataset of the examples, as in examples.dataset.';
COMMENT ON COLUMN runs.task IS 'Task of the examples, as in examples.task (dependencies or frames for relations runs).';
COMMENT ON COLUMN runs.split IS 'Split of the examples, as in examples.split.';
COMMENT ON COLUMN runs.source IS 'Where the examples were read from: a path or a datasets name.';
COMMENT ON COLUMN runs.example_limit IS '--limit: at most this many examples, a seeded random sample; NULL for the whole split.';
COMMENT ON COLUMN runs.seed IS 'Seed of the --limit sample.';
COMMENT ON COLUMN runs.max_length IS 'Inputs were truncated to this many tokens.';
COMMENT ON COLUMN runs.n_examples IS 'Examples in the run.';
COMMENT ON COLUMN runs.n_truncated IS 'Examples that were longer than max_length and truncated.';
COMMENT ON COLUMN runs.device IS 'Device the model ran on: cpu, cuda, ...';
COMMENT ON COLUMN runs.dtype IS 'Floating-point type of the model: float32, bfloat16 or float16.';
COMMENT ON COLUMN runs.batch_size IS 'Examples per batch.';
COMMENT ON COLUMN runs.versions IS 'JSON: versions of attnwh, torch, transformers, duckdb and python that wrote the run.';
COMMENT ON COLUMN runs.command IS 'The command line that started the run.';
COMMENT ON COLUMN runs.status IS 'running | interrupted | failed | complete; only complete runs are whole.';
COMMENT ON COLUMN runs.started_at IS 'When the run was first started.';
COMMENT ON COLUMN runs.finished_at IS 'When the run last stopped; NULL while running.';
COMMENT ON COLUMN runs.seconds IS 'Model time in seconds, summed over resumed sessions.';
COMMENT ON COLUMN runs.base_model_id IS 'For compare runs the base model of the comparison, for finetune runs the starting model (models.model_id); NULL otherwise.';

-- run_examples
COMMENT ON TABLE run_examples IS 'Per run and example: how the tokenizer saw it. An example with a row here is done (resume skips it).';
COMMENT ON COLUMN run_examples.run_id IS 'The run (runs.run_id).';
COMMENT ON COLUMN run_examples.example_id IS 'The example (examples.example_id).';
COMMENT ON COLUMN run_examples.n_tokens IS 'Tokens the model saw, [CLS] and [SEP] included.';
COMMENT ON COLUMN run_examples.n_tokens_full IS 'Tokens before truncation.';
COMMENT ON COLUMN run_examples.truncated IS 'Whether the example was cut to the run''s max_length.';

-- head_stats
COMMENT ON TABLE head_stats IS 'One row per statistics run, example, layer and head: attention statistics, each the mean over the example''s real query rows (docs/metrics.md#head-statistics), and the pattern features and type (docs/metrics.md#pattern-features-and-types).';
COMMENT ON COLUMN head_stats.run_id IS 'The statistics run (runs.run_id).';
COMMENT ON COLUMN head_stats.example_id IS 'The example (examples.example_id).';
COMMENT ON COLUMN head_stats.layer IS 'Layer, 0-based.';
COMMENT ON COLUMN head_stats.head IS 'Head within the layer, 0-based.';
COMMENT ON COLUMN head_stats.to_cls IS 'Mean over query rows of the weight on [CLS] (0..1).';
COMMENT ON COLUMN head_stats.to_sep IS 'Mean over query rows of the total weight on all [SEP] positions (0..1).';
COMMENT ON COLUMN head_stats.to_punct IS 'Mean over query rows of the total weight on punctuation tokens (0..1).';
COMMENT ON COLUMN head_stats.to_self IS 'Mean over query rows of A[i, i], the weight a token gives itself (0..1).';
COMMENT ON COLUMN head_stats.to_prev IS 'Mean over query rows of A[i, i-1], the weight on the previous token (0 for the first row).';
COMMENT ON COLUMN head_stats.to_next IS 'Mean over query rows of A[i, i+1], the weight on the next token (0 for the last real row).';
COMMENT ON COLUMN head_stats.entropy IS 'Mean over query rows of the entropy of the row''s weights, in nats.';
COMMENT ON COLUMN head_stats.max_weight IS 'Mean over query rows of the row''s largest weight (0..1).';
COMMENT ON COLUMN head_stats.norm_to_cls IS 'Share of the head''s output that comes from [CLS]: weights scaled by the norm of each token''s transformed value (Kobayashi et al. 2020), 0..1.';
COMMENT ON COLUMN head_stats.norm_to_sep IS 'Norm-weighted share from all [SEP] positions, 0..1 (see norm_to_cls).';
COMMENT ON COLUMN head_stats.norm_to_punct IS 'Norm-weighted share from punctuation tokens, 0..1 (see norm_to_cls).';
COMMENT ON COLUMN head_stats.col_cls IS 'Pattern feature: mean over rows of the weight on the [CLS] column, cells with |i - j| <= 1 left out; NULL for rows written before migration 5.';
COMMENT ON COLUMN head_stats.col_sep IS 'Pattern feature: the same for all [SEP] columns together.';
COMMENT ON COLUMN head_stats.col_punct IS 'Pattern feature: the same for all punctuation columns together.';
COMMENT ON COLUMN head_stats.col_other IS 'Pattern feature: the largest such mean for any single other ordinary column.';
COMMENT ON COLUMN head_stats.band IS 'Pattern feature: mean over rows of A[i,i-1] + A[i,i] + A[i,i+1] on ordinary, non-punctuation keys.';
COMMENT ON COLUMN head_stats.block IS 'Pattern feature: for sentence pairs, the smaller segment''s mean weight on ordinary keys of its own segment; 0 for single sentences.';
COMMENT ON COLUMN head_stats.pattern IS 'Pattern type given by the rules (pattern_types.pattern); NULL for rows written before migration 5.';

-- finetunes
COMMENT ON TABLE finetunes IS 'One row per attnwh finetune run (runs.kind = finetune): its training settings and result.';
COMMENT ON COLUMN finetunes.run_id IS 'The finetune run (runs.run_id).';
COMMENT ON COLUMN finetunes.from_scratch IS 'Whether training started from random weights of the same architecture instead of the pre-trained ones.';
COMMENT ON COLUMN finetunes.train_examples IS 'Training examples used.';
COMMENT ON COLUMN finetunes.epochs IS 'Training epochs.';
COMMENT ON COLUMN finetunes.learning_rate IS 'Peak learning rate.';
COMMENT ON COLUMN finetunes.warmup IS 'Share of the training steps with a linear warm-up (0..1).';
COMMENT ON COLUMN finetunes.train_seconds IS 'Training time in seconds.';
COMMENT ON COLUMN finetunes.final_loss IS 'Training loss at the end; NULL when not recorded.';
COMMENT ON COLUMN finetunes.out_dir IS 'Folder where the fine-tuned model was saved.';

-- scores
COMMENT ON TABLE scores IS 'Task scores of a run on its evaluation split (docs/metrics.md#task-metrics).';
COMMENT ON COLUMN scores.run_id IS 'The run (runs.run_id).';
COMMENT ON COLUMN scores.metric IS 'accuracy | f1 | mcc | pearson | spearman.';
COMMENT ON COLUMN scores.value IS 'The score (accuracy and f1 0..1, mcc and correlations -1..1).';
COMMENT ON COLUMN scores.n_examples IS 'Evaluation examples scored.';

-- attention_change
COMMENT ON TABLE attention_change IS 'Per compare run, example, layer and head: cosine similarity of the base and the tuned model''s attention maps on the same tokens (docs/metrics.md#attention-change).';
COMMENT ON COLUMN attention_change.run_id IS 'The compare run (runs.run_id; runs.base_model_id is the base, runs.model_id the tuned model).';
COMMENT ON COLUMN attention_change.example_id IS 'The example (examples.example_id).';
COMMENT ON COLUMN attention_change.layer IS 'Layer, 0-based.';
COMMENT ON COLUMN attention_change.head IS 'Head within the layer, 0-based.';
COMMENT ON COLUMN attention_change.cosine IS 'Cosine similarity of the two maps cropped to the real tokens and flattened; 1 = unchanged.';

-- dependency_heads
COMMENT ON TABLE dependency_heads IS 'Per relations run, dependency relation, direction, layer and head: how often the most-attended word is the syntactic partner (docs/metrics.md#dependency-accuracy).';
COMMENT ON COLUMN dependency_heads.run_id IS 'The relations run (runs.run_id, task dependencies).';
COMMENT ON COLUMN dependency_heads.relation IS 'Universal Dependencies relation without subtype (root not counted).';
COMMENT ON COLUMN dependency_heads.direction IS 'dep_to_head: the dependent''s most-attended word is its head; head_to_dep: the head word''s most-attended word is the dependent.';
COMMENT ON COLUMN dependency_heads.layer IS 'Layer, 0-based.';
COMMENT ON COLUMN dependency_heads.head IS 'Head within the layer, 0-based.';
COMMENT ON COLUMN dependency_heads.correct IS 'Dependencies where the most-attended word was right.';
COMMENT ON COLUMN dependency_heads.total IS 'Dependencies of this relation in the run.';
COMMENT ON COLUMN dependency_heads.accuracy IS 'correct / total (0..1).';

-- dependency_baselines
COMMENT ON TABLE dependency_baselines IS 'Per relations run and relation: the best fixed-offset guess of the head word and its accuracy (docs/metrics.md#offset-baseline).';
COMMENT ON COLUMN dependency_baselines.run_id IS 'The relations run (runs.run_id).';
COMMENT ON COLUMN dependency_baselines.relation IS 'Universal Dependencies relation without subtype.';
COMMENT ON COLUMN dependency_baselines.best_offset IS 'The offset k in -5..5 (not 0) for which the word k positions from the dependent is most often its head; negative = to the left.';
COMMENT ON COLUMN dependency_baselines.correct IS 'Dependencies the offset guess got right.';
COMMENT ON COLUMN dependency_baselines.total IS 'Dependencies of this relation in the run.';
COMMENT ON COLUMN dependency_baselines.accuracy IS 'correct / total (0..1).';

-- frame_heads
COMMENT ON TABLE frame_heads IS 'Per frames run, direction, layer and head: mean over annotations of the largest word-level weight on target-frame-element links (docs/metrics.md#frame-scores).';
COMMENT ON COLUMN frame_heads.run_id IS 'The relations run (runs.run_id, task frames).';
COMMENT ON COLUMN frame_heads.direction IS 'target_to_element (target rows) | element_to_target | either (the larger of the two).';
COMMENT ON COLUMN frame_heads.layer IS 'Layer, 0-based.';
COMMENT ON COLUMN frame_heads.head IS 'Head within the layer, 0-based.';
COMMENT ON COLUMN frame_heads.n_annotations IS 'Annotations measured.';
COMMENT ON COLUMN frame_heads.mean_max_attention IS 'Mean over annotations of the largest word-level weight on a link (0..1).';
COMMENT ON COLUMN frame_heads.percentile IS 'Share (0..100) of the run''s layer x head means in this direction that are <= this head''s; the best head scores 100.';
COMMENT ON COLUMN frame_heads.rank IS 'Rank within the run and direction; 1 = best (ties by layer, then head).';

-- frame_filters
COMMENT ON TABLE frame_filters IS 'Per frames run: how many annotations each filter dropped, in order, and the filter settings (docs/metrics.md#frame-scores).';
COMMENT ON COLUMN frame_filters.run_id IS 'The relations run (runs.run_id, task frames).';
COMMENT ON COLUMN frame_filters.annotations_read IS 'Annotations (file blocks) read.';
COMMENT ON COLUMN frame_filters.no_elements IS 'Dropped: no frame elements.';
COMMENT ON COLUMN frame_filters.long_sentence IS 'Dropped: sentence longer than max_sentence_words.';
COMMENT ON COLUMN frame_filters.long_element IS 'Dropped: an element longer than max_element_words.';
COMMENT ON COLUMN frame_filters.too_close IS 'Dropped: every link''s words closer than min_distance.';
COMMENT ON COLUMN frame_filters.kept IS 'annotations_read - no_elements - long_sentence - long_element - too_close.';
COMMENT ON COLUMN frame_filters.sentences IS 'Distinct sentences among the measured annotations (after --limit).';
COMMENT ON COLUMN frame_filters.measured IS 'Annotations that had a link word with word pieces and fit the model.';
COMMENT ON COLUMN frame_filters.max_sentence_words IS 'Setting: longest sentence kept, in words.';
COMMENT ON COLUMN frame_filters.max_element_words IS 'Setting: longest frame element kept, in words.';
COMMENT ON COLUMN frame_filters.min_distance IS 'Setting: least distance in words between a link''s target and element words.';

-- feature_attention
COMMENT ON TABLE feature_attention IS 'Per dependencies run, word feature, layer and head: attention received by words with the feature, with the uniform-head reference (docs/metrics.md#feature-word-attention).';
COMMENT ON COLUMN feature_attention.run_id IS 'The relations run (runs.run_id, task dependencies).';
COMMENT ON COLUMN feature_attention.feature IS 'noun | verb | pronoun | subject | object | negation.';
COMMENT ON COLUMN feature_attention.layer IS 'Layer, 0-based.';
COMMENT ON COLUMN feature_attention.head IS 'Head within the layer, 0-based.';
COMMENT ON COLUMN feature_attention.n_sentences IS 'Sentences with at least one word with the feature.';
COMMENT ON COLUMN feature_attention.n_words IS 'Words with the feature.';
COMMENT ON COLUMN feature_attention.mean_attention IS 'Mean over those sentences of the largest attention received by one of their feature words (0..1).';
COMMENT ON COLUMN feature_attention.per_word_attention IS 'Attention received, averaged over every feature word (0..1).';
COMMENT ON COLUMN feature_attention.uniform_attention IS 'mean_attention of a head spreading its weight evenly over all real tokens: the reference.';
COMMENT ON COLUMN feature_attention.uniform_per_word IS 'per_word_attention of the uniform head: the reference.';

-- pattern_types
COMMENT ON TABLE pattern_types IS 'The five attention pattern types (Kovaleva et al. 2019) and their codes (docs/metrics.md#pattern-features-and-types).';
COMMENT ON COLUMN pattern_types.pattern IS 'Type code: 0 heterogeneous, 1 vertical, 2 diagonal, 3 vertical+diagonal, 4 block.';
COMMENT ON COLUMN pattern_types.name IS 'Type name.';

-- pattern_thumbnails
COMMENT ON TABLE pattern_thumbnails IS 'Per statistics run, sampled example, layer and head: the attention map resized to 32 x 32 (attnwh ingest --thumbnails N).';
COMMENT ON COLUMN pattern_thumbnails.run_id IS 'The statistics run (runs.run_id).';
COMMENT ON COLUMN pattern_thumbnails.example_id IS 'The example (examples.example_id).';
COMMENT ON COLUMN pattern_thumbnails.layer IS 'Layer, 0-based.';
COMMENT ON COLUMN pattern_thumbnails.head IS 'Head within the layer, 0-based.';
COMMENT ON COLUMN pattern_thumbnails.n_tokens IS 'Real tokens of the map before resizing (n x n).';
COMMENT ON COLUMN pattern_thumbnails.thumbnail IS '1024 values: the map cropped to the real tokens and resized to 32 x 32 by adaptive average pooling, row-major (query rows).';
COMMENT ON COLUMN pattern_thumbnails.cnn_pattern IS 'Type given by a trained CNN (pattern_types.pattern); NULL until attnwh patterns reclassify --classifier cnn.';
COMMENT ON COLUMN pattern_thumbnails.cnn_model IS 'The CNN that gave cnn_pattern (pattern_models.model_id).';

-- pattern_labels
COMMENT ON TABLE pattern_labels IS 'Hand labels of maps, one type per map (attnwh patterns import-labels).';
COMMENT ON COLUMN pattern_labels.run_id IS 'The statistics run (runs.run_id).';
COMMENT ON COLUMN pattern_labels.example_id IS 'The example (examples.example_id).';
COMMENT ON COLUMN pattern_labels.layer IS 'Layer, 0-based.';
COMMENT ON COLUMN pattern_labels.head IS 'Head within the layer, 0-based.';
COMMENT ON COLUMN pattern_labels.pattern IS 'The labelled type (pattern_types.pattern).';
COMMENT ON COLUMN pattern_labels.source IS 'The CSV file the label came from.';
COMMENT ON COLUMN pattern_labels.imported_at IS 'When the label was imported.';

-- pattern_models
COMMENT ON TABLE pattern_models IS 'CNNs trained on thumbnails and hand labels (attnwh patterns train), with held-out scores of the CNN and of the rules on the same maps.';
COMMENT ON COLUMN pattern_models.model_id IS 'CNN id (pattern_thumbnails.cnn_model); not a models.model_id.';
COMMENT ON COLUMN pattern_models.created_at IS 'When the CNN was trained.';
COMMENT ON COLUMN pattern_models.seed IS 'Seed of the train/test split and of training.';
COMMENT ON COLUMN pattern_models.epochs IS 'Training epochs.';
COMMENT ON COLUMN pattern_models.n_train IS 'Labelled maps trained on.';
COMMENT ON COLUMN pattern_models.n_test IS 'Held-out labelled maps.';
COMMENT ON COLUMN pattern_models.f1_cnn IS 'Held-out macro F1 of the CNN against the labels (0..1).';
COMMENT ON COLUMN pattern_models.f1_rules IS 'Held-out macro F1 of the rules on the same maps (0..1).';
COMMENT ON COLUMN pattern_models.settings IS 'JSON: the training settings.';
COMMENT ON COLUMN pattern_models.weights IS 'torch.save of the CNN''s state dict.';

-- head_patterns (view)
COMMENT ON VIEW head_patterns IS 'head_stats rows that have a pattern type, with the type''s name and the features that decided it.';
COMMENT ON COLUMN head_patterns.run_id IS 'The statistics run (runs.run_id).';
COMMENT ON COLUMN head_patterns.example_id IS 'The example (examples.example_id).';
COMMENT ON COLUMN head_patterns.layer IS 'Layer, 0-based.';
COMMENT ON COLUMN head_patterns.head IS 'Head within the layer, 0-based.';
COMMENT ON COLUMN head_patterns.pattern IS 'Type code given by the rules (pattern_types.pattern).';
COMMENT ON COLUMN head_patterns.pattern_name IS 'Type name (pattern_types.name).';
COMMENT ON COLUMN head_patterns.col_cls IS 'Weight on the [CLS] column off the band (head_stats.col_cls).';
COMMENT ON COLUMN head_patterns.col_sep IS 'Weight on the [SEP] columns off the band (head_stats.col_sep).';
COMMENT ON COLUMN head_patterns.col_punct IS 'Weight on the punctuation columns off the band (head_stats.col_punct).';
COMMENT ON COLUMN head_patterns.col_other IS 'Weight on the heaviest other single column off the band (head_stats.col_other).';
COMMENT ON COLUMN head_patterns.band IS 'Weight on the diagonal band (head_stats.band).';
COMMENT ON COLUMN head_patterns.block IS 'Within-segment weight of sentence pairs (head_stats.block).';

-- ablation_configs
COMMENT ON TABLE ablation_configs IS 'The configurations of an ablation run: which heads were disabled and how (docs/metrics.md#ablation-modes). config_id 0 is the baseline.';
COMMENT ON COLUMN ablation_configs.run_id IS 'The ablation run (runs.run_id).';
COMMENT ON COLUMN ablation_configs.config_id IS 'Configuration within the run; 0 = baseline, nothing disabled.';
COMMENT ON COLUMN ablation_configs.kind IS 'baseline | head (one head) | layer (a whole layer) | helpful (every head whose own disabling helped) | top_k (the k heads that helped most).';
COMMENT ON COLUMN ablation_configs.mode IS 'uniform (weights 1/n over the real keys) | zero (head output 0).';
COMMENT ON COLUMN ablation_configs.layer IS 'Disabled layer, 0-based; for head and layer configurations, else NULL.';
COMMENT ON COLUMN ablation_configs.head IS 'Disabled head within the layer, 0-based; for head configurations, else NULL.';
COMMENT ON COLUMN ablation_configs.k IS 'top_k: the number of heads; helpful: their count; else NULL.';
COMMENT ON COLUMN ablation_configs.n_disabled IS 'Number of heads disabled.';
COMMENT ON COLUMN ablation_configs.disabled IS 'The disabled heads as layer-head, comma separated, 0-based (empty for the baseline).';

-- ablation_predictions
COMMENT ON TABLE ablation_predictions IS 'Per ablation configuration and example: the prediction, so any statistic can be recomputed in SQL.';
COMMENT ON COLUMN ablation_predictions.run_id IS 'The ablation run (runs.run_id).';
COMMENT ON COLUMN ablation_predictions.config_id IS 'The configuration (ablation_configs.config_id).';
COMMENT ON COLUMN ablation_predictions.example_id IS 'The example (examples.example_id).';
COMMENT ON COLUMN ablation_predictions.prediction IS 'Predicted class id (examples.label_id), or the predicted score for regression.';
COMMENT ON COLUMN ablation_predictions.correct IS 'Whether the prediction equals the gold label; NULL for regression.';

-- ablations
COMMENT ON TABLE ablations IS 'Per ablation configuration and metric: the score against the baseline on the same examples, with a bootstrap interval and a paired test (docs/metrics.md#significance-tests).';
COMMENT ON COLUMN ablations.run_id IS 'The ablation run (runs.run_id).';
COMMENT ON COLUMN ablations.config_id IS 'The configuration (ablation_configs.config_id).';
COMMENT ON COLUMN ablations.metric IS 'accuracy | f1 | mcc | pearson | spearman.';
COMMENT ON COLUMN ablations.value IS 'The score with the configuration''s heads disabled.';
COMMENT ON COLUMN ablations.baseline IS 'The score with nothing disabled (config 0).';
COMMENT ON COLUMN ablations.delta IS 'value - baseline (disabled minus baseline); > 0 means disabling helped.';
COMMENT ON COLUMN ablations.ci_low IS 'Lower end of the 95 % paired percentile bootstrap interval of delta.';
COMMENT ON COLUMN ablations.ci_high IS 'Upper end of the 95 % paired percentile bootstrap interval of delta.';
COMMENT ON COLUMN ablations.p_value IS 'Two-sided p-value of the paired test (see test).';
COMMENT ON COLUMN ablations.p_adjusted IS 'Benjamini-Hochberg adjusted p-value across the run''s head and layer configurations, per metric; NULL for the baseline and combinations.';
COMMENT ON COLUMN ablations.test IS 'mcnemar-exact (accuracy) | permutation (other metrics).';
COMMENT ON COLUMN ablations.n_examples IS 'Examples scored.';
COMMENT ON COLUMN ablations.n_resamples IS 'Bootstrap resamples (and permutations) used.';

-- head_importance
COMMENT ON TABLE head_importance IS 'Per ablation run, layer and head: gradient importance after Michel et al. 2019 (docs/metrics.md#gradient-importance).';
COMMENT ON COLUMN head_importance.run_id IS 'The ablation run (runs.run_id).';
COMMENT ON COLUMN head_importance.layer IS 'Layer, 0-based.';
COMMENT ON COLUMN head_importance.head IS 'Head within the layer, 0-based.';
COMMENT ON COLUMN head_importance.importance IS 'Mean over examples of |dL/d gate| for a gate on the head''s output, L the example''s loss.';
COMMENT ON COLUMN head_importance.importance_normalized IS 'importance divided by the l2 norm of its layer''s importances.';
COMMENT ON COLUMN head_importance.n_examples IS 'Examples averaged over.';

-- ablation_results (view)
COMMENT ON VIEW ablation_results IS 'Every ablation configuration''s scores with its run''s model, task and split: what the named ablation queries read. delta = disabled minus baseline, > 0 means disabling helped.';
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
COMMENT ON COLUMN ablation_results.delta IS 'value - baseline (disabled minus baseline); > 0 means disabling helped.';
COMMENT ON COLUMN ablation_results.ci_low IS 'Lower end of the 95 % bootstrap interval of delta.';
COMMENT ON COLUMN ablation_results.ci_high IS 'Upper end of the 95 % bootstrap interval of delta.';
COMMENT ON COLUMN ablation_results.p_value IS 'Two-sided p-value of the paired test.';
COMMENT ON COLUMN ablation_results.p_adjusted IS 'Benjamini-Hochberg adjusted p-value; NULL for the baseline and combinations.';
COMMENT ON COLUMN ablation_results.significant IS 'p_adjusted < 0.05; NULL where p_adjusted is NULL.';
COMMENT ON COLUMN ablation_results.test IS 'mcnemar-exact | permutation.';
COMMENT ON COLUMN ablation_results.examples IS 'Examples scored (ablations.n_examples).';
COMMENT ON COLUMN ablation_results.n_resamples IS 'Bootstrap resamples used.';
