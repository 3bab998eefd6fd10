-- Fine-tuning (issue: fine-tuning and how it changes attention): which model was tuned from
-- which, the fine-tuning runs with their settings and scores, and the per-head change of
-- attention between a base and a tuned model on the same examples.

-- The model a checkpoint was fine-tuned from, and on which task (NULL for pre-trained ones).
ALTER TABLE models ADD COLUMN base_model_id INTEGER;
ALTER TABLE models ADD COLUMN finetuned_task VARCHAR;

-- For runs that involve two models (kind 'finetune': the starting model; kind 'compare':
-- the base of the comparison); model_id is then the tuned model.
ALTER TABLE runs ADD COLUMN base_model_id INTEGER;

-- One row per `attnwh finetune` run (runs.kind = 'finetune').
CREATE TABLE finetunes (
    run_id          INTEGER PRIMARY KEY,
    from_scratch    BOOLEAN NOT NULL,  -- same architecture, random weights (Kovaleva Table 1)
    train_examples  INTEGER NOT NULL,
    epochs          DOUBLE NOT NULL,
    learning_rate   DOUBLE NOT NULL,
    warmup          DOUBLE NOT NULL,   -- share of steps with a linear warm-up
    train_seconds   DOUBLE NOT NULL,
    final_loss      DOUBLE,
    out_dir         VARCHAR NOT NULL   -- where save_pretrained wrote the model
);

-- Task scores of a run on its evaluation split: accuracy, f1, mcc, pearson, spearman.
CREATE TABLE scores (
    run_id          INTEGER NOT NULL,
    metric          VARCHAR NOT NULL,
    value           DOUBLE NOT NULL,
    n_examples      INTEGER NOT NULL,
    PRIMARY KEY (run_id, metric)
);

-- Per (compare run, example, layer, head): cosine similarity of the base and tuned model's
-- attention maps, each cropped to the real tokens and flattened.
CREATE TABLE attention_change (
    run_id          INTEGER NOT NULL,
    example_id      BIGINT NOT NULL,
    layer           SMALLINT NOT NULL,
    head            SMALLINT NOT NULL,
    cosine          REAL NOT NULL
);
