-- name: head_lenses
-- title: Each head through four lenses: attention weight, weight × value norm, after residual + LayerNorm, value zeroing
-- params: model, task, layer, head
-- One row per statistics run, layer, head and target ([CLS], [SEP], punctuation, self,
-- previous, next): the share of the head's attention (weight, head_stats), of its output
-- weighted by value norms (value_norm, Kobayashi et al. 2020; [CLS], [SEP] and punctuation
-- only), of its post-LayerNorm contribution with the residual counted (residual_ln,
-- Kobayashi et al. 2021; head_mixing.rn_*) and by value zeroing (value_zeroing, Mohebbi et
-- al. 2023): the head's own (head_mixing.vz_*, vz_scope 'head') when the run zeroed heads,
-- else its layer's (layer_mixing.vz_*, vz_scope 'layer'), NULL when it did neither.
-- residual_vs_head is head_mixing.rn_residual: how much the residual outweighs this head.
-- Every value is a mean over the run's examples (docs/metrics.md#context-mixing).
WITH weights AS (
    SELECT run_id, layer, head,
           avg(to_cls) AS w_cls, avg(to_sep) AS w_sep, avg(to_punct) AS w_punct,
           avg(to_self) AS w_self, avg(to_prev) AS w_prev, avg(to_next) AS w_next,
           avg(norm_to_cls) AS n_cls, avg(norm_to_sep) AS n_sep, avg(norm_to_punct) AS n_punct,
           count(*) AS examples
    FROM head_stats
    WHERE ($layer IS NULL OR layer = $layer) AND ($head IS NULL OR head = $head)
    GROUP BY ALL
),
mixed AS (
    SELECT run_id, layer, head,
           avg(rn_to_cls) AS r_cls, avg(rn_to_sep) AS r_sep, avg(rn_to_punct) AS r_punct,
           avg(rn_to_self) AS r_self, avg(rn_to_prev) AS r_prev, avg(rn_to_next) AS r_next,
           avg(rn_residual) AS residual_vs_head,
           avg(vz_to_cls) AS z_cls, avg(vz_to_sep) AS z_sep, avg(vz_to_punct) AS z_punct,
           avg(vz_to_self) AS z_self, avg(vz_to_prev) AS z_prev, avg(vz_to_next) AS z_next
    FROM head_mixing
    WHERE ($layer IS NULL OR layer = $layer) AND ($head IS NULL OR head = $head)
    GROUP BY ALL
),
zeroed_layers AS (
    SELECT run_id, layer,
           avg(vz_to_cls) AS z_cls, avg(vz_to_sep) AS z_sep, avg(vz_to_punct) AS z_punct,
           avg(vz_to_self) AS z_self, avg(vz_to_prev) AS z_prev, avg(vz_to_next) AS z_next
    FROM layer_mixing
    WHERE ($layer IS NULL OR layer = $layer) AND vz_to_cls IS NOT NULL
    GROUP BY ALL
),
joined AS (
    SELECT
        m.name AS model, r.task, r.split, w.*, x.* EXCLUDE (run_id, layer, head),
        z.z_cls AS l_cls, z.z_sep AS l_sep, z.z_punct AS l_punct,
        z.z_self AS l_self, z.z_prev AS l_prev, z.z_next AS l_next,
        CASE WHEN x.z_cls IS NOT NULL THEN 'head' WHEN z.z_cls IS NOT NULL THEN 'layer' END AS vz_scope
    FROM weights AS w
    JOIN runs AS r USING (run_id)
    JOIN models AS m USING (model_id)
    LEFT JOIN mixed AS x USING (run_id, layer, head)
    LEFT JOIN zeroed_layers AS z USING (run_id, layer)
    WHERE ($model IS NULL OR m.name = $model)
      AND ($task IS NULL OR r.task = $task)
),
lenses AS (
    SELECT *, '[CLS]' AS target, 1 AS target_order, w_cls AS weight, n_cls AS value_norm, r_cls AS residual_ln,
           coalesce(z_cls, l_cls) AS value_zeroing FROM joined
    UNION ALL
    SELECT *, '[SEP]', 2, w_sep, n_sep, r_sep, coalesce(z_sep, l_sep) FROM joined
    UNION ALL
    SELECT *, 'punctuation', 3, w_punct, n_punct, r_punct, coalesce(z_punct, l_punct) FROM joined
    UNION ALL
    SELECT *, 'self', 4, w_self, NULL, r_self, coalesce(z_self, l_self) FROM joined
    UNION ALL
    SELECT *, 'previous', 5, w_prev, NULL, r_prev, coalesce(z_prev, l_prev) FROM joined
    UNION ALL
    SELECT *, 'next', 6, w_next, NULL, r_next, coalesce(z_next, l_next) FROM joined
)
SELECT model, task, split, run_id, layer, head, target, weight, value_norm, residual_ln, value_zeroing, vz_scope,
       residual_vs_head, examples
FROM lenses
ORDER BY model, task, split, run_id, layer, head, target_order;
