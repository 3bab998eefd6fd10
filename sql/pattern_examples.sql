-- name: pattern_examples
-- title: Per head and pattern type, the examples whose maps are most typically of that type, with their text
-- params: run, layer, head, pattern, top
-- From a head's pattern share to the maps behind it. run is a statistics run; layer and head
-- are 0-based, NULL for every head; pattern is a type name (vertical, diagonal,
-- vertical+diagonal, block, heterogeneous), NULL for every type. Per head and type: the top
-- examples (default 3) the head's map was given that type with the largest margin (the
-- classifier's surest; ties go to the lower example_id). has_map says whether the example's
-- whole map is stored (pattern_maps, with its tokens in example_tokens) and has_thumbnail
-- its 32 x 32 thumbnail (pattern_thumbnails); `attnwh show` draws any of them token by token.
WITH p AS (
    SELECT
        CAST($run AS INTEGER)    AS run,
        CAST($layer AS SMALLINT) AS layer,
        CAST($head AS SMALLINT)  AS head,
        CAST($pattern AS VARCHAR) AS pattern,
        coalesce(CAST($top AS INTEGER), 3) AS top
),
ranked AS (
    SELECT
        s.run_id, s.layer, s.head, t.name AS pattern, s.pattern_margin AS margin, s.example_id,
        row_number() OVER (
            PARTITION BY s.layer, s.head, s.pattern ORDER BY s.pattern_margin DESC NULLS LAST, s.example_id
        ) AS rank,
        p.top
    FROM head_stats AS s
    JOIN pattern_types AS t ON t.pattern = s.pattern, p
    WHERE s.run_id = p.run
      AND (p.layer IS NULL OR s.layer = p.layer)
      AND (p.head IS NULL OR s.head = p.head)
      AND (p.pattern IS NULL OR t.name = p.pattern)
)
SELECT
    r.run_id, r.layer, r.head, r.pattern, r.rank, r.margin, r.example_id,
    e.text_a, e.text_b, x.n_tokens,
    m.example_id IS NOT NULL AS has_map,
    th.example_id IS NOT NULL AS has_thumbnail
FROM ranked AS r
JOIN examples AS e USING (example_id)
LEFT JOIN run_examples AS x USING (run_id, example_id)
LEFT JOIN pattern_maps AS m USING (run_id, example_id, layer, head)
LEFT JOIN pattern_thumbnails AS th USING (run_id, example_id, layer, head)
WHERE r.rank <= r.top
ORDER BY r.layer, r.head, r.pattern, r.rank;
