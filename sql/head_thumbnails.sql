-- name: head_thumbnails
-- title: A few stored maps of one head, with the stored pattern type of each
-- params: model, task, layer, head, per_head
-- Up to per_head (default 2) thumbnails per statistics run, layer and head (0-based), picked
-- by the same fixed hash as pattern_gallery so a warehouse always shows the same maps;
-- thumbnail is the 32 x 32 map (row-major) of `attnwh ingest --thumbnails N`, cropped to the
-- n_tokens real tokens before pooling. model is a model name as stored; NULL = all.
SELECT
    m.name                AS model,
    r.task,
    r.split,
    r.run_id,
    p.layer,
    p.head,
    p.example_id,
    p.pattern_name        AS pattern,
    t.n_tokens,
    t.thumbnail
FROM head_patterns AS p
JOIN pattern_thumbnails AS t USING (run_id, example_id, layer, head)
JOIN runs AS r USING (run_id)
JOIN models AS m USING (model_id)
WHERE r.kind = 'statistics'
  AND ($model IS NULL OR m.name = $model)
  AND ($task IS NULL OR r.task = $task)
  AND ($layer IS NULL OR p.layer = $layer)
  AND ($head IS NULL OR p.head = $head)
QUALIFY row_number() OVER (
    PARTITION BY p.run_id, p.layer, p.head ORDER BY hash(p.run_id, p.example_id, p.layer, p.head), p.example_id
) <= coalesce($per_head::INTEGER, 2)
ORDER BY p.layer, p.head, m.name, r.task, p.run_id, hash(p.run_id, p.example_id, p.layer, p.head), p.example_id;
