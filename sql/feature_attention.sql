-- name: feature_attention
-- title: Attention received by nouns, verbs, pronouns, subjects, objects and negation words, per head, best first
-- params: model, feature, run
-- One row per relations run with feature words (`attnwh ingest relations --conllu`), feature
-- and head (Kovaleva et al. 2019 §4.4): for each sentence with the feature, the largest mean
-- attention (over the sentence's words, word level) that one of its feature words receives,
-- averaged over those sentences; per_word_attention averages over every feature word instead.
-- uniform_attention is the same score for a head attending evenly to all tokens, and
-- vs_uniform the ratio. rank 1 = the head giving the feature most attention. model is a model
-- name as stored, feature one of noun, verb, pronoun, subject, object, negation; run a
-- run_id; NULL = all.
SELECT
    m.name                                          AS model,
    r.dataset,
    r.run_id,
    a.feature,
    row_number() OVER (
        PARTITION BY a.run_id, a.feature ORDER BY a.mean_attention DESC, a.layer, a.head
    )                                               AS rank,
    a.layer,
    a.head,
    round(a.mean_attention, 4)                      AS mean_attention,
    round(a.per_word_attention, 4)                  AS per_word_attention,
    round(a.uniform_attention, 4)                   AS uniform_attention,
    round(a.mean_attention / a.uniform_attention, 3) AS vs_uniform,
    a.n_sentences                                   AS sentences,
    a.n_words                                       AS words
FROM feature_attention AS a
JOIN runs AS r USING (run_id)
JOIN models AS m USING (model_id)
WHERE r.kind = 'relations'
  AND ($model IS NULL OR m.name = $model)
  AND ($feature IS NULL OR a.feature = $feature)
  AND ($run IS NULL OR a.run_id = $run)
ORDER BY model, r.dataset, r.run_id, a.feature, rank;
