-- name: pattern_gallery
-- title: Typical and borderline stored map thumbnails of each pattern type, with the rules' scores
-- params: model, task
-- Per pattern type (the stored type, head_stats.pattern) among the stored thumbnails of
-- statistics runs: the map the classifier that gave the types was surest of (kind 'typical',
-- the largest pattern_margin, the gap between its two likeliest types) among maps of 12 to 64
-- tokens, which a 16 x 16 drawing shows as they are (any length where a type has none), and
-- the next one where the classifier is as sure (margin at least 0.8: the type at least 0.9
-- likely), then the two it was least sure of (kind 'borderline', the smallest), ties broken by a
-- fixed hash of the map's keys so the same warehouse always shows the same maps; a type with
-- fewer than four maps shows what it has, typical first. thumbnail is the 32 x 32 map
-- (row-major) of `attnwh ingest --thumbnails N`; vertical, diagonal and block are the rules'
-- scores V, D and B; slot the map's place among its type's maps of that kind (1, 2); margin is
-- head_stats.pattern_margin (NULL for rows written before margins were kept, which then
-- count as borderline); tokens the example's real tokens (example_tokens: kept for examples
-- of at most 64 real tokens or --map-tokens, NULL for longer ones). model is a model name as stored; NULL = all.
WITH maps AS (
    SELECT
        m.name                                              AS model,
        r.task,
        r.run_id,
        p.example_id,
        p.layer,
        p.head,
        p.pattern,
        p.pattern_name                                      AS pattern_name,
        t.n_tokens,
        p.col_cls + p.col_sep + p.col_punct + p.col_other   AS vertical,
        p.band                                              AS diagonal,
        p.block,
        s.pattern_margin                                    AS margin,
        t.thumbnail,
        k.tokens,
        hash(p.run_id, p.example_id, p.layer, p.head)       AS tiebreak
    FROM head_patterns AS p
    JOIN head_stats AS s USING (run_id, example_id, layer, head)
    JOIN pattern_thumbnails AS t USING (run_id, example_id, layer, head)
    LEFT JOIN example_tokens AS k USING (run_id, example_id)
    JOIN runs AS r USING (run_id)
    JOIN models AS m USING (model_id)
    WHERE r.kind = 'statistics'
      AND ($model IS NULL OR m.name = $model)
      AND ($task IS NULL OR r.task = $task)
),
typical AS (
    SELECT *, 'typical' AS kind,
           row_number() OVER (
               PARTITION BY pattern
               ORDER BY n_tokens BETWEEN 12 AND 64 DESC, margin DESC NULLS LAST, tiebreak, run_id, example_id, layer, head
           ) AS slot
    FROM maps
    -- A second typical map only where the classifier is sure of it: people label a map shown
    -- as typical as that type (tests/fixtures/gallery_typical.csv, docs/pattern_labels.md).
    QUALIFY slot = 1 OR (slot = 2 AND margin >= 0.8)
),
borderline AS (
    SELECT *, 'borderline' AS kind,
           row_number() OVER (PARTITION BY pattern ORDER BY margin ASC NULLS FIRST, tiebreak, run_id, example_id, layer, head) AS slot
    FROM maps
    WHERE (run_id, example_id, layer, head) NOT IN (SELECT (run_id, example_id, layer, head) FROM typical)
    QUALIFY slot <= 2
)
SELECT model, task, run_id, example_id, layer, head, pattern_name AS pattern, kind, slot, n_tokens,
       vertical, diagonal, block, margin, thumbnail, tokens
FROM (SELECT * FROM typical UNION ALL SELECT * FROM borderline)
ORDER BY pattern, kind DESC, slot;
