-- name: pattern_gallery
-- title: A few stored map thumbnails of each pattern type, with the scores that decided the type
-- params: model, task
-- Up to three thumbnails per pattern type (the rules' label), picked by a fixed hash of the map's
-- keys so the same warehouse always shows the same maps, from statistics runs; thumbnail is
-- the 32 x 32 map (row-major) of `attnwh ingest --thumbnails N`. vertical, diagonal and block
-- are the rules' scores V, D and B. model is a model name as stored; NULL = all.
SELECT
    m.name                                              AS model,
    r.task,
    r.run_id,
    p.example_id,
    p.layer,
    p.head,
    p.pattern_name                                      AS pattern,
    t.n_tokens,
    p.col_cls + p.col_sep + p.col_punct + p.col_other   AS vertical,
    p.band                                              AS diagonal,
    p.block,
    t.thumbnail
FROM head_patterns AS p
JOIN pattern_thumbnails AS t USING (run_id, example_id, layer, head)
JOIN runs AS r USING (run_id)
JOIN models AS m USING (model_id)
WHERE r.kind = 'statistics'
  AND ($model IS NULL OR m.name = $model)
  AND ($task IS NULL OR r.task = $task)
QUALIFY row_number() OVER (
    PARTITION BY p.pattern ORDER BY hash(p.run_id, p.example_id, p.layer, p.head), p.run_id, p.example_id, p.layer, p.head
) <= 3
ORDER BY p.pattern, hash(p.run_id, p.example_id, p.layer, p.head), p.run_id, p.example_id, p.layer, p.head;
