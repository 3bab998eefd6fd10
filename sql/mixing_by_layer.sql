-- name: mixing_by_layer
-- title: Context mixing per layer: [CLS] and [SEP] shares under four lenses, mixing ratio and share, residual share
-- params: model, task
-- One row per statistics run, layer and target ([CLS], [SEP], punctuation, self). weight
-- and value_norm are head_stats' shares averaged over the layer's heads; heads_ln is
-- head_mixing's post-LayerNorm share averaged over the heads; layer_ln is the whole block's
-- (every head and the residual, layer_mixing.rn_*), value_zeroing the layer's
-- (layer_mixing.vz_*, NULL unless --value-zeroing layer). mixing_ratio, mixing_share and
-- residual_share are the layer's (Kobayashi et al. 2021): how much of each token's
-- post-LayerNorm output comes from other tokens (the paper's ratio of summed vectors, and the
-- larger share of summed norms), and the residual's share of the terms. Means over the run's
-- examples (docs/metrics.md#context-mixing).
WITH weights AS (
    SELECT run_id, layer,
           avg(to_cls) AS w_cls, avg(to_sep) AS w_sep, avg(to_punct) AS w_punct, avg(to_self) AS w_self,
           avg(norm_to_cls) AS n_cls, avg(norm_to_sep) AS n_sep, avg(norm_to_punct) AS n_punct,
           count(DISTINCT example_id) AS examples
    FROM head_stats GROUP BY ALL
),
heads AS (
    SELECT run_id, layer,
           avg(rn_to_cls) AS h_cls, avg(rn_to_sep) AS h_sep, avg(rn_to_punct) AS h_punct, avg(rn_to_self) AS h_self
    FROM head_mixing GROUP BY ALL
),
layers AS (
    SELECT run_id, layer,
           avg(rn_to_cls) AS l_cls, avg(rn_to_sep) AS l_sep, avg(rn_to_punct) AS l_punct, avg(rn_to_self) AS l_self,
           avg(vz_to_cls) AS z_cls, avg(vz_to_sep) AS z_sep, avg(vz_to_punct) AS z_punct, avg(vz_to_self) AS z_self,
           avg(mixing_ratio) AS mixing_ratio, avg(mixing_share) AS mixing_share,
           avg(residual_share) AS residual_share
    FROM layer_mixing GROUP BY ALL
),
joined AS (
    SELECT m.name AS model, r.task, r.split, w.*, h.* EXCLUDE (run_id, layer), l.* EXCLUDE (run_id, layer)
    FROM weights AS w
    JOIN runs AS r USING (run_id)
    JOIN models AS m USING (model_id)
    LEFT JOIN heads AS h USING (run_id, layer)
    LEFT JOIN layers AS l USING (run_id, layer)
    WHERE ($model IS NULL OR m.name = $model)
      AND ($task IS NULL OR r.task = $task)
),
lenses AS (
    SELECT *, '[CLS]' AS target, 1 AS target_order, w_cls AS weight, n_cls AS value_norm, h_cls AS heads_ln,
           l_cls AS layer_ln, z_cls AS value_zeroing FROM joined
    UNION ALL
    SELECT *, '[SEP]', 2, w_sep, n_sep, h_sep, l_sep, z_sep FROM joined
    UNION ALL
    SELECT *, 'punctuation', 3, w_punct, n_punct, h_punct, l_punct, z_punct FROM joined
    UNION ALL
    SELECT *, 'self', 4, w_self, NULL, h_self, l_self, z_self FROM joined
)
SELECT model, task, split, run_id, layer, target, weight, value_norm, heads_ln, layer_ln, value_zeroing,
       mixing_ratio, mixing_share, residual_share, examples
FROM lenses
ORDER BY model, task, split, run_id, layer, target_order;
