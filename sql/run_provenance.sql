-- name: run_provenance
-- title: Every run with its model checkpoint, data, size, parameters, software versions and dates
-- params: model, task
-- The provenance table of `attnwh report`: enough to say exactly which weights, which
-- examples and which software produced each number. sample_text is the run's first
-- example (by position in its source), to show what the data looks like; it and mean_tokens
-- are NULL for a fine-tuning run, which stores no per-example rows.
SELECT
    r.run_id,
    r.kind,
    m.name                                    AS model,
    m.family,
    m.architecture,
    m.num_layers,
    m.num_heads,
    -- A hybrid model's layers that are no softmax attention, by kind ("linear attention:
    -- 0, 1, 2"); NULL where attnwh reads every layer (or the model predates model_layers).
    (SELECT string_agg(o.kind || ': ' || o.layers, '; ' ORDER BY o.kind)
       FROM (SELECT l.kind, string_agg(l.layer::VARCHAR, ', ' ORDER BY l.layer) AS layers
               FROM model_layers AS l WHERE l.model_id = m.model_id AND NOT l.read GROUP BY l.kind) AS o
    ) AS other_layers,
    m.revision,
    left(m.weights_hash, 12)                  AS weights_hash,
    r.dataset,
    r.task,
    r.split,
    r.source,
    r.n_examples,
    r.example_limit,
    r.seed,
    r.max_length,
    r.n_truncated,
    (SELECT round(avg(re.n_tokens), 1) FROM run_examples AS re WHERE re.run_id = r.run_id) AS mean_tokens,
    r.device,
    r.dtype,
    r.batch_size,
    CAST(r.versions AS VARCHAR)               AS versions,
    r.command,
    r.status,
    r.started_at,
    r.finished_at,
    round(r.seconds, 2)                       AS seconds,
    (SELECT e.text_a FROM run_examples AS re JOIN examples AS e USING (example_id)
      WHERE re.run_id = r.run_id ORDER BY e.position LIMIT 1) AS sample_text
FROM runs AS r
JOIN models AS m USING (model_id)
WHERE ($model IS NULL OR m.name = $model)
  AND ($task IS NULL OR r.task = $task)
ORDER BY r.run_id;
