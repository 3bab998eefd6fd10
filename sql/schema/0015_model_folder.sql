-- models.folder: the folder a local model was loaded from, made absolute when the run was
-- written. models.name keeps what was given (often a folder relative to where the command ran,
-- such as the study's attnwh-models/sst2), which names nothing from another folder; the
-- absolute folder lets `attnwh show`, `attnwh report` and Warehouse.example_maps load a run's
-- model again from anywhere (attnwh.ingest.runs.maps.run_model).
-- Rows written before this migration: a fine-tuned model's folder is the absolute out_dir its
-- fine-tuning run recorded; other local models' folders are not known (NULL).

ALTER TABLE models ADD COLUMN folder VARCHAR;

UPDATE models SET folder = tuned.out_dir
FROM (
    SELECT r.model_id, max(f.out_dir) AS out_dir
    FROM runs AS r JOIN finetunes AS f USING (run_id)
    WHERE r.kind = 'finetune'
    GROUP BY r.model_id
) AS tuned
WHERE tuned.model_id = models.model_id;

COMMENT ON COLUMN models.folder IS 'Absolute folder the model was loaded from when a run last recorded it; NULL for hub models and the bundled MiniLM. attnwh loads a run''s model from here first, then from name as a folder beside the warehouse and from the current folder.';
