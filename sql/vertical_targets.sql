-- name: vertical_targets
-- title: Where the column mass of vertical maps lands: [CLS], [SEP], punctuation or elsewhere
-- params: model, task
-- One row per statistics run and type (vertical, vertical+diagonal, as stored in
-- head_stats.pattern): of the maps' column mass (off the diagonal band; head_stats.col_*), the share on
-- [CLS], on the [SEP]s, on punctuation, and on the heaviest other single token ("elsewhere"),
-- as ratios of sums over the maps; mean_column_mass is the mean per map. Kovaleva et al.
-- call vertical attention "predominantly, if not exclusively" special tokens.
SELECT
    m.name                                                     AS model,
    r.task,
    r.split,
    r.run_id,
    t.name                                                     AS pattern,
    count(*)                                                   AS maps,
    avg(s.col_cls + s.col_sep + s.col_punct + s.col_other)     AS mean_column_mass,
    sum(s.col_cls) / sum(s.col_cls + s.col_sep + s.col_punct + s.col_other)   AS to_cls,
    sum(s.col_sep) / sum(s.col_cls + s.col_sep + s.col_punct + s.col_other)   AS to_sep,
    sum(s.col_punct) / sum(s.col_cls + s.col_sep + s.col_punct + s.col_other) AS to_punct,
    sum(s.col_other) / sum(s.col_cls + s.col_sep + s.col_punct + s.col_other) AS elsewhere
FROM head_stats AS s
JOIN pattern_types AS t USING (pattern)
JOIN runs AS r USING (run_id)
JOIN models AS m USING (model_id)
WHERE r.kind = 'statistics'
  AND t.name IN ('vertical', 'vertical+diagonal')
  AND ($model IS NULL OR m.name = $model)
  AND ($task IS NULL OR r.task = $task)
GROUP BY ALL
ORDER BY model, r.task, r.split, r.run_id, min(s.pattern);
