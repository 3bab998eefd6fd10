-- name: label_maps
-- title: Stored maps to label by eye, each with its tokens, stored type and the rules' scores
-- params: run, task, layer, pattern
-- Every head's map of each statistics run's thumbnail sample (`attnwh ingest --thumbnails N`),
-- what `attnwh patterns label` draws. attention is the whole n x n map (row-major, row = query)
-- for examples of at most 64 real tokens (`attnwh ingest --map-tokens N`), NULL for longer ones and for runs ingested before
-- whole maps were kept; thumbnail is the 32 x 32 map; tokens the real tokens, NULL where no
-- whole map was kept. pattern is the stored type (head_stats.pattern); col_* / band / block the
-- rules' features; margin how near it is to another type (head_stats.pattern_margin). run is a run_id,
-- pattern a type name; NULL = all.
SELECT
    r.run_id,
    m.name          AS model,
    r.task,
    t.example_id,
    t.layer,
    t.head,
    p.pattern_name  AS pattern,
    p.col_cls, p.col_sep, p.col_punct, p.col_other, p.band, p.block,
    s.pattern_margin AS margin,
    t.n_tokens,
    w.attention,
    t.thumbnail,
    k.tokens
FROM pattern_thumbnails AS t
JOIN head_patterns AS p USING (run_id, example_id, layer, head)
JOIN head_stats AS s USING (run_id, example_id, layer, head)
JOIN runs AS r USING (run_id)
JOIN models AS m USING (model_id)
LEFT JOIN pattern_maps AS w USING (run_id, example_id, layer, head)
LEFT JOIN example_tokens AS k USING (run_id, example_id)
WHERE r.kind = 'statistics'
  AND ($run IS NULL OR r.run_id = $run)
  AND ($task IS NULL OR r.task = $task)
  AND ($layer IS NULL OR t.layer = $layer)
  AND ($pattern IS NULL OR p.pattern_name = $pattern)
ORDER BY r.run_id, t.example_id, t.layer, t.head;
