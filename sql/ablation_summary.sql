-- name: ablation_summary
-- title: The headline of each ablation run per metric: baseline, best head and layer, helpful and significant heads
-- params: run, model, task, mode, metric
-- One row per ablation run and metric (what `attnwh ingest ablation` prints): the baseline
-- score; the head and the whole layer whose disabling raised the score most (delta, adjusted
-- p; ties go to the first configuration swept: the lower layer, then the lower head);
-- n_helpful = heads whose disabling raised the score (delta > 0), n_significant = those of
-- them with adjusted p < 0.05; helpful_delta = the delta with every helpful head disabled
-- together (NULL when none helped). run is a run_id; the other parameters as in
-- ablation_effect; NULL = all.
SELECT
    model, task, split, run_id, mode, metric,
    first(baseline ORDER BY config_id)                                         AS baseline,
    first(layer ORDER BY delta DESC, config_id) FILTER (WHERE kind = 'head')   AS best_head_layer,
    first(head ORDER BY delta DESC, config_id) FILTER (WHERE kind = 'head')    AS best_head,
    max(delta) FILTER (WHERE kind = 'head')                                    AS best_head_delta,
    first(p_adjusted ORDER BY delta DESC, config_id) FILTER (WHERE kind = 'head')
                                                                               AS best_head_p_adjusted,
    first(layer ORDER BY delta DESC, config_id) FILTER (WHERE kind = 'layer')  AS best_layer,
    max(delta) FILTER (WHERE kind = 'layer')                                   AS best_layer_delta,
    first(p_adjusted ORDER BY delta DESC, config_id) FILTER (WHERE kind = 'layer')
                                                                               AS best_layer_p_adjusted,
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
ORDER BY model, task, split, run_id, mode, metric;
