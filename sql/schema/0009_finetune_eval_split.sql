-- The split a fine-tuning run's scores were measured on. runs.split names the split the model
-- was trained on; the scores come from another one (dev), which the report's findings and
-- the fine-tuning table name. NULL for runs recorded before this migration.
ALTER TABLE finetunes ADD COLUMN eval_split VARCHAR;
COMMENT ON COLUMN finetunes.eval_split IS 'The split the run''s scores (table scores) were measured on, e.g. dev; runs.split is the split it was trained on. NULL for runs recorded before attnwh stored it.';
