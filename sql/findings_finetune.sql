-- name: findings_finetune
-- title: Findings per fine-tuning run and metric: the tuned model's score with the settings that made it
-- params: model, task
-- One row per fine-tuning run (`attnwh finetune`) and metric scored on its evaluation split
-- (the report's "Findings" list): the tuned and the base model, from scratch or not, training
-- examples, epochs, learning rate, and the score with the number of examples it was measured
-- on and its split (eval_split; NULL for runs recorded before attnwh stored it; split is the
-- split it was trained on); metric, value and n_examples are NULL for a run that stored no
-- score. model is the
-- tuned model's name as stored; NULL = all.
SELECT
    m.name              AS model,
    b.name              AS base_model,
    r.task,
    r.split,
    r.run_id,
    f.from_scratch,
    f.train_examples,
    f.epochs,
    f.learning_rate,
    s.metric,
    s.value,
    s.n_examples,
    f.eval_split
FROM finetunes AS f
JOIN runs AS r USING (run_id)
JOIN models AS m ON m.model_id = r.model_id
LEFT JOIN models AS b ON b.model_id = r.base_model_id
LEFT JOIN scores AS s ON s.run_id = r.run_id
WHERE ($model IS NULL OR m.name = $model)
  AND ($task IS NULL OR r.task = $task)
ORDER BY model, r.task, r.run_id, s.metric;
