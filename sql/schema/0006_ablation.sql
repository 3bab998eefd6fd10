-- Disabling heads and layers (issue: disabling heads and layers, exact, fast and tested for
-- significance). One `attnwh ingest ablation` run (runs.kind = 'ablation') is one fine-tuned
-- classifier, task split and mode; it keeps every configuration's per-example predictions, so
-- any later statistic can be computed in SQL.

-- The configurations of a run. config_id 0 is the baseline (nothing disabled).
CREATE TABLE ablation_configs (
    run_id        INTEGER NOT NULL,
    config_id     INTEGER NOT NULL,
    kind          VARCHAR NOT NULL,   -- baseline | head | layer | helpful | top_k
    mode          VARCHAR NOT NULL,   -- uniform (weights 1/n over real keys) | zero (head output 0)
    layer         SMALLINT,           -- head and layer configurations
    head          SMALLINT,           -- head configurations
    k             SMALLINT,           -- top_k: the k heads whose own disabling helped most; helpful: their count
    n_disabled    SMALLINT NOT NULL,
    disabled      VARCHAR NOT NULL,   -- the disabled heads as 'layer-head', comma separated
    PRIMARY KEY (run_id, config_id)
);

-- Per configuration and example: the predicted class id (or score, for regression) and
-- whether it equals the gold label (NULL for regression).
CREATE TABLE ablation_predictions (
    run_id        INTEGER NOT NULL,
    config_id     INTEGER NOT NULL,
    example_id    BIGINT NOT NULL,
    prediction    DOUBLE NOT NULL,
    correct       BOOLEAN,
    PRIMARY KEY (run_id, config_id, example_id)
);

-- Per configuration and metric: the score, the paired delta against the baseline with its
-- bootstrap interval, the p-value of a paired test (exact McNemar for accuracy, permutation
-- otherwise) and, for head and layer configurations, its Benjamini–Hochberg adjustment
-- across the run's head and layer configurations (NULL for the baseline and combinations).
CREATE TABLE ablations (
    run_id        INTEGER NOT NULL,
    config_id     INTEGER NOT NULL,
    metric        VARCHAR NOT NULL,   -- accuracy | f1 | mcc | pearson | spearman
    value         DOUBLE NOT NULL,
    baseline      DOUBLE NOT NULL,
    delta         DOUBLE NOT NULL,    -- value - baseline; > 0: disabling helped
    ci_low        DOUBLE NOT NULL,    -- 95 % paired percentile bootstrap interval of delta
    ci_high       DOUBLE NOT NULL,
    p_value       DOUBLE NOT NULL,
    p_adjusted    DOUBLE,
    test          VARCHAR NOT NULL,   -- mcnemar-exact | permutation
    n_examples    INTEGER NOT NULL,
    n_resamples   INTEGER NOT NULL,
    PRIMARY KEY (run_id, config_id, metric)
);

-- Gradient importance (Michel et al. 2019): mean over the examples of |dL/d gate| for a gate
-- on the head's output, L the example's loss; normalized = divided by the layer's l2 norm.
CREATE TABLE head_importance (
    run_id        INTEGER NOT NULL,
    layer         SMALLINT NOT NULL,
    head          SMALLINT NOT NULL,
    importance    DOUBLE NOT NULL,
    importance_normalized DOUBLE NOT NULL,
    n_examples    INTEGER NOT NULL,
    PRIMARY KEY (run_id, layer, head)
);

-- Every configuration's scores with its run's model, task and split: what the named ablation
-- queries (and ad hoc SQL) read. significant = adjusted p < 0.05.
CREATE VIEW ablation_results AS
SELECT
    m.name                       AS model,
    r.task,
    r.split,
    a.run_id,
    a.config_id,
    c.kind,
    c.mode,
    c.layer,
    c.head,
    c.k,
    c.n_disabled,
    c.disabled,
    a.metric,
    a.baseline,
    a.value,
    a.delta,
    a.ci_low,
    a.ci_high,
    a.p_value,
    a.p_adjusted,
    a.p_adjusted < 0.05          AS significant,
    a.test,
    a.n_examples                 AS examples,
    a.n_resamples
FROM ablations AS a
JOIN ablation_configs AS c USING (run_id, config_id)
JOIN runs AS r USING (run_id)
JOIN models AS m USING (model_id);
