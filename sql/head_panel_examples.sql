-- name: head_panel_examples
-- title: Per head, the examples behind its numbers: the top examples of its main statistics, the predictions its disabling flips and its top role probes
-- params: model, task, layer, head, top
-- What the report's head panel lists under "Examples" (head_examples and ablation_flips give
-- the same rows for one head, with any statistic). Per run of the model/task filters, layer
-- and head (0-based; NULL = all): in a statistics run, the top (default 3) examples by to_cls,
-- to_sep, to_punct and to_self, largest first; in a compare run, by cosine, smallest first
-- (changed most by fine-tuning); in an ablation run, up to top examples whose predicted class
-- changes when the head alone is disabled (statistic 'flip', value 1 when the change fixed the
-- prediction, -1 when it broke it, 0 otherwise; ties to the lower example_id). text joins the
-- pair with ' ‖ '; label is the gold label as written, predicted the class after disabling.
-- In a head-roles run (a decoder's probes, whatever the task filter), the top probes by the
-- score the run's probe kind is for: statistic 'induction' (induction probes) or 'retrieval'
-- (needle probes), largest first; text is the probe's decoded tokens, label a needle's answer.
WITH scope AS (
    SELECT r.run_id, r.kind
    FROM runs AS r JOIN models AS m USING (model_id)
    WHERE ($model IS NULL OR m.name = $model) AND ($task IS NULL OR r.task = $task)
),
stats AS (
    UNPIVOT (
        SELECT s.run_id, s.example_id, s.layer, s.head, s.to_cls, s.to_sep, s.to_punct, s.to_self
        FROM head_stats AS s JOIN scope USING (run_id)
        WHERE scope.kind = 'statistics'
          AND ($layer IS NULL OR s.layer = $layer) AND ($head IS NULL OR s.head = $head)
    )
    ON to_cls, to_sep, to_punct, to_self INTO NAME statistic VALUE value
),
ranked AS (
    SELECT run_id, example_id, layer, head, statistic, CAST(value AS DOUBLE) AS value, NULL AS predicted,
           row_number() OVER (PARTITION BY run_id, layer, head, statistic ORDER BY value DESC, example_id) AS rank
    FROM stats
    UNION ALL
    SELECT c.run_id, c.example_id, c.layer, c.head, 'cosine', CAST(c.cosine AS DOUBLE), NULL,
           row_number() OVER (PARTITION BY c.run_id, c.layer, c.head ORDER BY c.cosine, c.example_id)
    FROM attention_change AS c JOIN scope USING (run_id)
    WHERE ($layer IS NULL OR c.layer = $layer) AND ($head IS NULL OR c.head = $head)
    UNION ALL
    SELECT g.run_id, a.example_id, g.layer, g.head, 'flip',
           CASE WHEN a.correct THEN 1 WHEN b.correct THEN -1 ELSE 0 END,
           CAST(CAST(a.prediction AS INTEGER) AS VARCHAR),
           row_number() OVER (PARTITION BY g.run_id, g.layer, g.head ORDER BY a.example_id)
    FROM ablation_configs AS g
    JOIN scope USING (run_id)
    JOIN ablation_predictions AS a ON a.run_id = g.run_id AND a.config_id = g.config_id
    JOIN ablation_predictions AS b ON b.run_id = g.run_id AND b.config_id = 0 AND b.example_id = a.example_id
    WHERE g.kind = 'head' AND a.correct IS NOT NULL AND a.prediction <> b.prediction
      AND ($layer IS NULL OR g.layer = $layer) AND ($head IS NULL OR g.head = $head)
    UNION ALL
    -- A head-roles run (a decoder's probes): its probes by the score its kind is for.
    SELECT h.run_id, h.example_id, h.layer, h.head, CASE r.task WHEN 'induction' THEN 'induction' ELSE 'retrieval' END,
           CAST(CASE r.task WHEN 'induction' THEN h.induction ELSE h.retrieval END AS DOUBLE), NULL,
           row_number() OVER (PARTITION BY h.run_id, h.layer, h.head
                              ORDER BY CASE r.task WHEN 'induction' THEN h.induction ELSE h.retrieval END DESC,
                                       h.example_id)
    FROM head_roles AS h
    JOIN runs AS r USING (run_id)
    WHERE r.kind = 'roles' AND r.model_id IN (SELECT m.model_id FROM models AS m WHERE $model IS NULL OR m.name = $model)
      AND ($layer IS NULL OR h.layer = $layer) AND ($head IS NULL OR h.head = $head)
)
SELECT
    r.run_id, r.layer, r.head, r.statistic, r.rank, r.value, r.example_id,
    CASE WHEN e.text_b IS NULL THEN e.text_a ELSE e.text_a || ' ‖ ' || e.text_b END AS text,
    e.label,
    coalesce(n.label, r.predicted) AS predicted
FROM ranked AS r
JOIN examples AS e USING (example_id)
LEFT JOIN (SELECT DISTINCT dataset, task, split, label_id, label FROM examples WHERE label_id IS NOT NULL) AS n
    ON r.predicted IS NOT NULL AND n.label_id = CAST(r.predicted AS INTEGER)
   AND (n.dataset, n.task, n.split) = (e.dataset, e.task, e.split)
WHERE r.rank <= coalesce(CAST($top AS INTEGER), 3)
ORDER BY r.layer, r.head, r.run_id, r.statistic, r.rank;
