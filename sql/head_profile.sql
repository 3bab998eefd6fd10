-- name: head_profile
-- title: Everything the warehouse knows about one head: every lens, pattern shares, fine-tuning change, ablation, importance, relations, head roles
-- params: model, task, layer, head
-- One row per (report section, run, subject, measure) for each layer and head (0-based):
-- the statistics through each lens (attention weight, norm-weighted; means over the run's
-- examples), the shares of the five pattern types, the fine-tuning change (cosine of base and
-- tuned maps, 1 = unchanged), the ablation Δ = score with the head disabled − score with
-- nothing disabled (negative: disabling hurt) with its 95 % interval, p and Benjamini–Hochberg
-- adjusted p, the gradient importance, and the relation scores (the head's three best
-- dependency relations, frame links, feature words ÷ a uniform head, and a decoder's head-role
-- scores, the mean over a roles run's probes). `section` is the id of
-- the report section the number comes from; `subject` says what a row is about within its
-- run (a mode and metric, a relation, a feature). model is a model name as stored (for
-- compare runs, the tuned model); task filters runs of a task (relations runs are not tied to
-- a task and are kept); layer, head NULL = all. This is the data of the report's head panel.
WITH named_runs AS (
    SELECT r.run_id, r.kind, r.task, r.split, m.name AS model
    FROM runs AS r
    JOIN models AS m USING (model_id)
    WHERE ($model IS NULL OR m.name = $model)
),
stats AS (
    -- The view head_means is the one definition of a head's mean statistics (head_summary reads it too).
    SELECT s.run_id, s.layer, s.head, s.to_cls, s.norm_to_cls, s.to_sep, s.norm_to_sep, s.to_punct,
           s.norm_to_punct, s.to_self, s.to_prev, s.to_next, s.entropy, s.examples
    FROM head_means AS s
    JOIN named_runs AS r USING (run_id)
    WHERE ($task IS NULL OR r.task = $task)
      AND ($layer IS NULL OR s.layer = $layer)
      AND ($head IS NULL OR s.head = $head)
),
-- Readable measure names, in the order the panel shows them.
stat_measures(position, column_name, measure) AS (
    VALUES (1, 'to_cls', 'to [CLS]'), (2, 'norm_to_cls', 'to [CLS], norm-weighted'),
           (3, 'to_sep', 'to [SEP]'), (4, 'norm_to_sep', 'to [SEP], norm-weighted'),
           (5, 'to_punct', 'to punctuation'), (6, 'norm_to_punct', 'to punctuation, norm-weighted'),
           (7, 'to_self', 'to itself'), (8, 'to_prev', 'to previous token'), (9, 'to_next', 'to next token'),
           (10, 'entropy', 'entropy (nats)')
),
stat_rows AS (
    SELECT u.run_id, u.layer, u.head, u.examples, u.column_name, u.value
    FROM (UNPIVOT stats ON to_cls, norm_to_cls, to_sep, norm_to_sep, to_punct, norm_to_punct, to_self, to_prev,
          to_next, entropy INTO NAME column_name VALUE value) AS u
),
patterns AS (
    SELECT s.run_id, s.layer, s.head, t.pattern, t.name,
           count(*) FILTER (WHERE s.pattern = t.pattern) / count(*)::DOUBLE AS share, count(*) AS examples
    FROM head_stats AS s
    JOIN named_runs AS r USING (run_id)
    CROSS JOIN pattern_types AS t
    WHERE r.kind = 'statistics' AND s.pattern IS NOT NULL
      AND ($task IS NULL OR r.task = $task)
      AND ($layer IS NULL OR s.layer = $layer)
      AND ($head IS NULL OR s.head = $head)
    GROUP BY ALL
),
dependencies AS (
    SELECT d.*, row_number() OVER (PARTITION BY d.run_id, d.layer, d.head ORDER BY d.accuracy DESC, d.relation,
                                   d.direction) AS rank
    FROM dependency_heads AS d
    JOIN named_runs AS r USING (run_id)
    WHERE d.total > 0  -- a decoder's direction that saw no dependency of the relation: no accuracy
      AND ($layer IS NULL OR d.layer = $layer)
      AND ($head IS NULL OR d.head = $head)
),
profile AS (
    SELECT 'special-tokens' AS section, 1 AS section_order, s.run_id, s.layer, s.head, '' AS subject,
           m.position, m.measure, s.value, NULL::DOUBLE AS ci_low, NULL::DOUBLE AS ci_high,
           NULL::DOUBLE AS p_value, NULL::DOUBLE AS p_adjusted, s.examples
    FROM stat_rows AS s
    JOIN stat_measures AS m USING (column_name)
    UNION ALL
    SELECT 'pattern-types', 2, run_id, layer, head, '', pattern, name, share, NULL, NULL, NULL, NULL, examples
    FROM patterns
    UNION ALL
    SELECT 'finetuning-change', 3, c.run_id, c.layer, c.head, '', 1, 'mean cosine (1 = unchanged)', avg(c.cosine),
           NULL, NULL, NULL, NULL, count(*)
    FROM attention_change AS c
    JOIN named_runs AS r USING (run_id)
    WHERE r.kind = 'compare'
      AND ($task IS NULL OR r.task = $task)
      AND ($layer IS NULL OR c.layer = $layer)
      AND ($head IS NULL OR c.head = $head)
    GROUP BY ALL
    UNION ALL
    SELECT 'ablation', 4, a.run_id, a.layer, a.head, a.mode || ' · ' || a.metric, 1, 'Δ score (disabled − baseline)',
           a.delta, a.ci_low, a.ci_high, a.p_value, a.p_adjusted, a.examples
    FROM ablation_results AS a
    JOIN named_runs AS r USING (run_id)
    WHERE a.kind = 'head'
      AND ($task IS NULL OR r.task = $task)
      AND ($layer IS NULL OR a.layer = $layer)
      AND ($head IS NULL OR a.head = $head)
    UNION ALL
    SELECT 'importance', 5, i.run_id, i.layer, i.head, '', 1, 'gradient importance', i.importance,
           NULL, NULL, NULL, NULL, NULL
    FROM head_importance AS i
    JOIN named_runs AS r USING (run_id)
    WHERE ($task IS NULL OR r.task = $task)
      AND ($layer IS NULL OR i.layer = $layer)
      AND ($head IS NULL OR i.head = $head)
    UNION ALL
    SELECT 'relations-dependencies', 6, run_id, layer, head,
           relation || CASE direction WHEN 'dep_to_head' THEN ' · dependent → head' ELSE ' · head → dependent' END,
           rank, 'accuracy', accuracy, NULL, NULL, NULL, NULL, total
    FROM dependencies
    WHERE rank <= 3
    UNION ALL
    SELECT 'relations-frames', 7, f.run_id, f.layer, f.head, CASE f.direction WHEN 'target_to_element' THEN 'target → element' WHEN 'element_to_target' THEN 'element → target' ELSE 'either direction' END, 1, 'mean largest attention',
           f.mean_max_attention, NULL, NULL, NULL, NULL, f.n_annotations
    FROM frame_heads AS f
    JOIN named_runs AS r USING (run_id)
    WHERE ($layer IS NULL OR f.layer = $layer)
      AND ($head IS NULL OR f.head = $head)
    UNION ALL
    SELECT 'relations-frames', 7, f.run_id, f.layer, f.head, CASE f.direction WHEN 'target_to_element' THEN 'target → element' WHEN 'element_to_target' THEN 'element → target' ELSE 'either direction' END, 2, 'percentile among heads',
           f.percentile, NULL, NULL, NULL, NULL, f.n_annotations
    FROM frame_heads AS f
    JOIN named_runs AS r USING (run_id)
    WHERE ($layer IS NULL OR f.layer = $layer)
      AND ($head IS NULL OR f.head = $head)
    UNION ALL
    SELECT 'relations-features', 8, x.run_id, x.layer, x.head, x.feature, 1, '× uniform head',
           x.mean_attention / nullif(x.uniform_attention, 0), NULL, NULL, NULL, NULL, x.n_sentences
    FROM feature_attention AS x
    JOIN named_runs AS r USING (run_id)
    WHERE ($layer IS NULL OR x.layer = $layer)
      AND ($head IS NULL OR x.head = $head)
    UNION ALL
    -- Head roles (a decoder's probes; runs.task is the probe kind, so the task filter keeps them
    -- as it keeps relations runs): each score the probe defines, its mean over the run's probes.
    SELECT 'head-roles', 9, u.run_id, u.layer, u.head, '', m.position, m.measure, u.value,
           NULL, NULL, NULL, NULL, u.examples
    FROM (
        UNPIVOT (
            SELECT h.run_id, h.layer, h.head, h.probes AS examples, h.previous_token, h.induction, h.duplicate,
                   h.retrieval, h.sink, h.local_mass
            FROM head_role_means AS h
            WHERE ($layer IS NULL OR h.layer = $layer)
              AND ($head IS NULL OR h.head = $head)
        )
        ON previous_token, induction, duplicate, retrieval, sink, local_mass INTO NAME column_name VALUE value
    ) AS u
    JOIN named_runs AS r USING (run_id)
    JOIN (VALUES (1, 'previous_token', 'previous-token score'), (2, 'induction', 'induction score'),
                 (3, 'duplicate', 'duplicate-token score'), (4, 'retrieval', 'retrieval score'),
                 (5, 'sink', 'sink share (first token)'), (6, 'local_mass', 'local mass'))
        AS m(position, column_name, measure) USING (column_name)
)
SELECT p.section, r.model, r.task, r.split, p.run_id, p.layer, p.head, p.subject, p.measure, p.value,
       p.ci_low, p.ci_high, p.p_value, p.p_adjusted, p.examples
FROM profile AS p
JOIN named_runs AS r USING (run_id)
ORDER BY p.layer, p.head, p.section_order, r.model, r.task, p.run_id, p.subject, p.position;
