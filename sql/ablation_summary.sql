-- name: ablation_summary
-- title: The headline of each ablation run per metric: baseline, best head (or none helped) and layer, helpful and significant heads
-- params: run, model, task, mode, metric
-- One row per ablation run and metric (what `attnwh ingest ablation` prints): the baseline
-- score; the head and the whole layer whose disabling raised the score most (delta, adjusted
-- p; ties go to the first configuration swept: the lower layer, then the lower head). A head
-- is only named when its disabling raised the score (delta > 0), as in study_summary: when
-- none did, best_head_layer, best_head and best_head_p_adjusted are NULL, best_head_name is
-- 'none helped' and best_head_delta is still the largest delta of any head (<= 0, the head
-- whose disabling hurt least). best_head_name is 'layer-head' ('3-7') otherwise. The same for
-- the whole layers: best_layer and best_layer_p_adjusted NULL and best_layer_name 'none helped'
-- when no layer's disabling raised the score.
-- n_helpful = heads whose disabling raised the score (delta > 0), n_significant = those of
-- them with adjusted p < 0.05; helpful_delta = the delta with every helpful head disabled
-- together (NULL when fewer than two helped). run is a run_id; the other parameters as in
-- ablation_effect; NULL = all.
WITH summary AS (
    SELECT
        model, task, split, run_id, mode, metric,
        first(baseline ORDER BY config_id)                                         AS baseline,
        first(layer ORDER BY delta DESC, config_id) FILTER (WHERE kind = 'head')   AS top_head_layer,
        first(head ORDER BY delta DESC, config_id) FILTER (WHERE kind = 'head')    AS top_head,
        max(delta) FILTER (WHERE kind = 'head')                                    AS best_head_delta,
        first(p_adjusted ORDER BY delta DESC, config_id) FILTER (WHERE kind = 'head')
                                                                                   AS top_head_p_adjusted,
        first(layer ORDER BY delta DESC, config_id) FILTER (WHERE kind = 'layer')  AS top_layer,
        max(delta) FILTER (WHERE kind = 'layer')                                   AS best_layer_delta,
        first(p_adjusted ORDER BY delta DESC, config_id) FILTER (WHERE kind = 'layer')
                                                                                   AS top_layer_p_adjusted,
        count(*) FILTER (WHERE kind = 'head' AND delta > 0)                        AS n_helpful,
        count(*) FILTER (WHERE kind = 'head' AND delta > 0 AND p_adjusted < 0.05)  AS n_significant,
        first(delta ORDER BY config_id) FILTER (WHERE kind = 'helpful')            AS helpful_delta
    FROM ablation_results
    WHERE ($run IS NULL OR run_id = $run)
      AND ($model IS NULL OR model = $model)
      AND ($task IS NULL OR task = $task)
      AND ($mode IS NULL OR mode = $mode)
      AND ($metric IS NULL OR metric = $metric)
    GROUP BY model, task, split, run_id, mode, metric
)
SELECT
    model, task, split, run_id, mode, metric, baseline,
    CASE WHEN best_head_delta > 0 THEN top_head_layer END                    AS best_head_layer,
    CASE WHEN best_head_delta > 0 THEN top_head END                          AS best_head,
    best_head_delta,
    CASE WHEN best_head_delta > 0 THEN top_head_p_adjusted END               AS best_head_p_adjusted,
    CASE WHEN best_head_delta > 0 THEN top_head_layer || '-' || top_head
         WHEN best_head_delta IS NOT NULL THEN 'none helped' END             AS best_head_name,
    CASE WHEN best_layer_delta > 0 THEN top_layer END                        AS best_layer,
    best_layer_delta,
    CASE WHEN best_layer_delta > 0 THEN top_layer_p_adjusted END             AS best_layer_p_adjusted,
    CASE WHEN best_layer_delta > 0 THEN CAST(top_layer AS VARCHAR)
         WHEN best_layer_delta IS NOT NULL THEN 'none helped' END            AS best_layer_name,
    n_helpful, n_significant, helpful_delta
FROM summary
ORDER BY model, task, split, run_id, mode, metric;
