-- name: head_examples
-- title: One head's examples ranked by a statistic (most attention to [SEP], most diagonal, most changed by fine-tuning), with their text
-- params: run, layer, head, statistic, order, top
-- From a head's finding to the examples behind it. run is a statistics run (statistic: any
-- column of head_stats, such as to_sep, to_self, entropy, norm_to_cls, pattern_margin, or of
-- head_mixing, such as rn_to_sep) or a compare run (statistic: cosine, how alike the base and
-- tuned model's maps of the example are; order asc puts the most changed first). layer and
-- head are 0-based. statistic NULL ranks by every statistic the run holds, each on its own;
-- order is desc (default: largest first) or asc; top is the number of examples per statistic
-- (default 10). Ties go to the lower example_id. n_tokens is the example's length as the
-- model saw it; label the gold label as written in the source.
WITH p AS (
    SELECT
        CAST($run AS INTEGER)                      AS run,
        CAST($layer AS SMALLINT)                   AS layer,
        CAST($head AS SMALLINT)                    AS head,
        CAST($statistic AS VARCHAR)                AS statistic,
        lower(coalesce(CAST($order AS VARCHAR), 'desc')) = 'asc' AS ascending,
        coalesce(CAST($top AS INTEGER), 10)        AS top
),
stats AS (
    UNPIVOT (
        SELECT s.* EXCLUDE (pattern) FROM head_stats AS s, p
        WHERE s.run_id = p.run AND s.layer = p.layer AND s.head = p.head
    )
    ON COLUMNS(* EXCLUDE (run_id, example_id, layer, head)) INTO NAME statistic VALUE value
),
mixing AS (
    UNPIVOT (
        SELECT x.* FROM head_mixing AS x, p
        WHERE x.run_id = p.run AND x.layer = p.layer AND x.head = p.head
    )
    ON COLUMNS(* EXCLUDE (run_id, example_id, layer, head)) INTO NAME statistic VALUE value
),
change AS (
    SELECT c.run_id, c.example_id, c.layer, c.head, 'cosine' AS statistic, c.cosine AS value
    FROM attention_change AS c, p
    WHERE c.run_id = p.run AND c.layer = p.layer AND c.head = p.head
),
ranked AS (
    SELECT
        v.*,
        row_number() OVER (
            PARTITION BY v.statistic
            ORDER BY CASE WHEN p.ascending THEN v.value ELSE -v.value END, v.example_id
        ) AS rank,
        p.top
    FROM (
        SELECT run_id, example_id, layer, head, statistic, CAST(value AS DOUBLE) AS value FROM stats
        UNION ALL
        SELECT run_id, example_id, layer, head, statistic, CAST(value AS DOUBLE) FROM mixing
        UNION ALL
        SELECT * FROM change
    ) AS v, p
    WHERE v.value IS NOT NULL AND (p.statistic IS NULL OR v.statistic = p.statistic)
)
SELECT
    r.run_id, r.layer, r.head, r.statistic, r.rank, r.value, r.example_id,
    e.text_a, e.text_b, e.label, x.n_tokens
FROM ranked AS r
JOIN examples AS e USING (example_id)
LEFT JOIN run_examples AS x USING (run_id, example_id)
WHERE r.rank <= r.top
ORDER BY r.statistic, r.rank;
