-- name: model_lineage
-- title: Each model with the model it was fine-tuned from and the task, if any
-- params:
-- One row per model: its base model's name and the task it was fine-tuned on when attnwh
-- fine-tuned it (models.base_model_id, finetuned_task); both NULL for a pre-trained model.
-- The report labels runs with it ("fine-tuned on sst2 from bert-base" or "pre-trained").
SELECT
    m.model_id,
    m.name                                    AS model,
    b.name                                    AS base_model,
    m.finetuned_task
FROM models AS m
LEFT JOIN models AS b ON b.model_id = m.base_model_id
ORDER BY m.model_id;
