-- name: finetune_runs
-- title: Every fine-tuning run with its base model, training settings, final loss and dev scores
-- params: model, task
-- One row per fine-tuning run (`attnwh finetune`): the tuned and the base model, how it was
-- trained (examples, epochs, learning rate, warm-up, from scratch or not), the loss of its
-- last step and its scores on the evaluation split (metric=value pairs, by metric name;
-- eval_split names that split, split the one it was trained on).
-- model is the tuned model's name as stored; NULL = all.
SELECT
    r.run_id,
    m.name                                    AS model,
    b.name                                    AS base_model,
    r.task,
    r.split,
    f.from_scratch,
    f.train_examples,
    f.epochs,
    f.learning_rate,
    f.warmup,
    round(f.train_seconds, 1)                 AS train_seconds,
    round(f.final_loss, 4)                    AS final_loss,
    (SELECT string_agg(s.metric || '=' || printf('%.4f', s.value), ', ' ORDER BY s.metric)
       FROM scores AS s WHERE s.run_id = r.run_id) AS scores,
    (SELECT max(s.n_examples) FROM scores AS s WHERE s.run_id = r.run_id) AS scored_examples,
    f.eval_split
FROM finetunes AS f
JOIN runs AS r USING (run_id)
JOIN models AS m ON m.model_id = r.model_id
LEFT JOIN models AS b ON b.model_id = r.base_model_id
WHERE ($model IS NULL OR m.name = $model)
  AND ($task IS NULL OR r.task = $task)
ORDER BY r.run_id;
