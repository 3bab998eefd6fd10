-- name: run_models
-- title: Every run's model as an attention reader needs it: encoder or decoder, heads and key/value heads
-- params: model, task
-- One row per run. causal: the model is a decoder (causal language model), whose maps are
-- triangles, whose first token takes [CLS]'s place (sink_token says which it is) and whose
-- to_sep, norm_to_sep and to_next are NULL (docs/decoders.md). num_key_value_heads < num_heads
-- under grouped-query attention (head_groups gives each head's group). Rows written before
-- migration 16 are encoders'. The report and `attnwh show` read it to label and lay out runs.
SELECT
    r.run_id,
    r.kind,
    m.name                                                    AS model,
    m.family,
    r.task,
    coalesce(m.causal, false)                                 AS causal,
    CASE WHEN coalesce(m.causal, false) THEN 'first token' ELSE '[CLS]' END AS sink_token,
    m.num_layers,
    m.num_heads,
    coalesce(m.num_key_value_heads, m.num_heads)              AS num_key_value_heads,
    m.sliding_window
FROM runs AS r
JOIN models AS m USING (model_id)
WHERE ($model IS NULL OR m.name = $model)
  AND ($task IS NULL OR r.task = $task)
ORDER BY r.run_id;
