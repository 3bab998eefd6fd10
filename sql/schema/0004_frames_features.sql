-- Frame links and feature words (issue: which heads track linguistic relations; Kovaleva et
-- al. 2019 §4.2 and §4.4). `attnwh ingest relations --framenet F` writes a run (kind
-- 'relations', task 'frames') with frame_heads and frame_filters; `--conllu F` writes
-- feature_attention into its run (task 'dependencies') beside the dependency tables.

-- Per frames run, direction, layer and head: the mean over the kept annotations of the
-- largest word-level attention weight on the annotated target–frame-element links.
-- direction: target_to_element (rows = target words), element_to_target, or either (the
-- larger of the two). percentile: share (0..100) of the run's layer × head means, in the same
-- direction, that are <= this head's (scipy's percentileofscore kind='weak'); rank 1 = best.
CREATE TABLE frame_heads (
    run_id              INTEGER NOT NULL,
    direction           VARCHAR NOT NULL,
    layer               SMALLINT NOT NULL,
    head                SMALLINT NOT NULL,
    n_annotations       INTEGER NOT NULL,   -- annotations measured
    mean_max_attention  DOUBLE NOT NULL,
    percentile          DOUBLE NOT NULL,
    rank                INTEGER NOT NULL,
    PRIMARY KEY (run_id, direction, layer, head)
);

-- Per frames run: how many annotations (file blocks) each filter dropped, in order, and the
-- filter settings. kept = annotations_read - no_elements - long_sentence - long_element -
-- too_close; sentences = distinct sentences among the measured annotations (after --limit);
-- measured = annotations that had a link word with word pieces and fit the model.
CREATE TABLE frame_filters (
    run_id              INTEGER NOT NULL PRIMARY KEY,
    annotations_read    INTEGER NOT NULL,
    no_elements         INTEGER NOT NULL,
    long_sentence       INTEGER NOT NULL,
    long_element        INTEGER NOT NULL,
    too_close           INTEGER NOT NULL,
    kept                INTEGER NOT NULL,
    sentences           INTEGER NOT NULL,
    measured            INTEGER NOT NULL,
    max_sentence_words  SMALLINT NOT NULL,
    max_element_words   SMALLINT NOT NULL,
    min_distance        SMALLINT NOT NULL
);

-- Per dependencies run, feature (noun, verb, pronoun, subject, object, negation), layer and
-- head: attention received by words with the feature. For one sentence and word w, the
-- attention w receives is the mean over the sentence's words i of the word-level A[i, w];
-- mean_attention = mean over sentences with the feature of the largest such value among its
-- feature words (Kovaleva et al.); per_word_attention = mean over all feature words.
-- uniform_* = the same for a head spreading its attention evenly over all real tokens.
CREATE TABLE feature_attention (
    run_id              INTEGER NOT NULL,
    feature             VARCHAR NOT NULL,
    layer               SMALLINT NOT NULL,
    head                SMALLINT NOT NULL,
    n_sentences         INTEGER NOT NULL,
    n_words             INTEGER NOT NULL,
    mean_attention      DOUBLE NOT NULL,
    per_word_attention  DOUBLE NOT NULL,
    uniform_attention   DOUBLE NOT NULL,
    uniform_per_word    DOUBLE NOT NULL,
    PRIMARY KEY (run_id, feature, layer, head)
);
