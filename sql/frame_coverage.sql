-- name: frame_coverage
-- title: How many FrameNet annotations each frames run read, kept after its filters and measured
-- params: model
-- One row per frames run (`attnwh ingest relations --framenet`) from frame_filters: the
-- annotations read, those dropped by each filter, those kept and measured, and the filter
-- settings; the frame-link heatmap of the report says on how many annotations it rests.
SELECT
    r.run_id,
    m.name                                    AS model,
    r.dataset,
    f.annotations_read,
    f.no_elements,
    f.long_sentence,
    f.long_element,
    f.too_close,
    f.kept,
    f.measured,
    f.sentences,
    f.max_sentence_words,
    f.max_element_words,
    f.min_distance
FROM frame_filters AS f
JOIN runs AS r USING (run_id)
JOIN models AS m USING (model_id)
WHERE ($model IS NULL OR m.name = $model)
ORDER BY r.run_id;
