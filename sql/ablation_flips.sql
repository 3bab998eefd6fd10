-- name: ablation_flips
-- title: The examples whose predicted class changes when a head or a layer is disabled, with the gold label
-- params: run, layer, head, kind, mode
-- From a head's ablation effect to the examples behind it, read from the predictions every
-- ablation run stores (ablation_predictions). run is an ablation run; kind is head (default
-- when head is given), layer, or any configuration kind (top_k, helpful, sinks); layer and
-- head are 0-based, NULL for all. One row per configuration and example whose prediction
-- differs from the baseline's (config 0, nothing disabled), for classification tasks (a
-- regression's prediction moves on every example; ablation_effect holds its score change).
-- flip is 'fixed' when the prediction became correct, 'broken' when it stopped being correct,
-- 'changed' when it is wrong either way (three classes or more). label is the gold label
-- as written in the source; predicted and baseline_predicted are labels too where the task's
-- examples name them, else class ids.
WITH p AS (
    SELECT
        CAST($run AS INTEGER)   AS run,
        CAST($layer AS SMALLINT) AS layer,
        CAST($head AS SMALLINT) AS head,
        coalesce(CAST($kind AS VARCHAR), CASE WHEN $head IS NOT NULL THEN 'head' END) AS kind,
        CAST($mode AS VARCHAR)  AS mode
),
configs AS (
    SELECT c.* FROM ablation_configs AS c, p
    WHERE c.run_id = p.run AND c.config_id <> 0
      AND (p.kind IS NULL OR c.kind = p.kind)
      AND (p.layer IS NULL OR c.layer = p.layer)
      AND (p.head IS NULL OR c.head = p.head)
      AND (p.mode IS NULL OR c.mode = p.mode)
),
names AS (  -- class id -> label as written, from the run's task's own examples
    SELECT DISTINCT e.label_id, e.label
    FROM examples AS e JOIN runs AS r ON r.dataset = e.dataset AND r.task = e.task AND r.split = e.split, p
    WHERE r.run_id = p.run AND e.label_id IS NOT NULL
)
SELECT
    c.run_id, c.config_id, c.kind, c.mode, c.layer, c.head,
    a.example_id,
    CASE WHEN a.correct THEN 'fixed' WHEN b.correct THEN 'broken' ELSE 'changed' END AS flip,
    e.label,
    coalesce(np.label, CAST(CAST(a.prediction AS INTEGER) AS VARCHAR)) AS predicted,
    coalesce(nb.label, CAST(CAST(b.prediction AS INTEGER) AS VARCHAR)) AS baseline_predicted,
    e.text_a, e.text_b
FROM configs AS c
JOIN ablation_predictions AS a ON a.run_id = c.run_id AND a.config_id = c.config_id
JOIN ablation_predictions AS b ON b.run_id = c.run_id AND b.config_id = 0 AND b.example_id = a.example_id
JOIN examples AS e ON e.example_id = a.example_id
LEFT JOIN names AS np ON np.label_id = CAST(a.prediction AS INTEGER)
LEFT JOIN names AS nb ON nb.label_id = CAST(b.prediction AS INTEGER)
WHERE a.correct IS NOT NULL AND a.prediction <> b.prediction
ORDER BY c.config_id, flip, a.example_id;
