-- name: frame_heads
-- title: Heads that link frame-evoking words to their frame elements: mean max attention on the links, with percentile among all heads
-- params: model, run
-- One row per frames run (`attnwh ingest relations --framenet`), direction and head, best
-- first (Kovaleva et al. 2019 §4.2): per annotation the largest word-level attention weight
-- on its target–frame-element links, averaged over the annotations that passed the filters.
-- direction: target_to_element, element_to_target or either (the larger). percentile: share
-- of the run's heads with a mean <= this one (100 = best). model is a model name as stored;
-- run a run_id; NULL = all.
SELECT
    m.name                              AS model,
    r.dataset,
    r.run_id,
    h.direction,
    h.rank,
    h.layer,
    h.head,
    round(h.mean_max_attention, 4)      AS mean_max_attention,
    round(h.percentile, 2)              AS percentile,
    h.n_annotations                     AS annotations,
    f.sentences
FROM frame_heads AS h
JOIN runs AS r USING (run_id)
JOIN models AS m USING (model_id)
LEFT JOIN frame_filters AS f USING (run_id)
WHERE r.kind = 'relations'
  AND ($model IS NULL OR m.name = $model)
  AND ($run IS NULL OR h.run_id = $run)
ORDER BY model, r.dataset, r.run_id, h.direction, h.rank;
