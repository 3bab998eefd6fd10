-- name: findings_patterns
-- title: Findings per statistics run: the share of each of the five attention pattern types among its maps
-- params: model, task
-- One row per statistics run with typed maps (the report's "Findings" list; Kovaleva et al.
-- Fig. 2): how many (example, layer, head) maps have a type, and the share of each type,
-- as pattern_frequency computes them with its default classifier 'stored' (head_stats.pattern),
-- one column per type. The paper's shares for fine-tuned bert-base: vertical 22–42 %,
-- diagonal 4–7 %, vertical+diagonal 7–23 %, block 3–6 %, heterogeneous 32–61 %. causal: the
-- run is a decoder's, whose types come from a classifier trained on encoders' maps and are not
-- validated against people's labels on decoders. model is a model name as stored; NULL = all.
SELECT
    m.name                                                                      AS model,
    r.task,
    r.split,
    r.run_id,
    count(*)                                                                    AS maps,
    count(*) FILTER (WHERE p.pattern_name = 'vertical') / count(*)              AS vertical,
    count(*) FILTER (WHERE p.pattern_name = 'diagonal') / count(*)              AS diagonal,
    count(*) FILTER (WHERE p.pattern_name = 'vertical+diagonal') / count(*)     AS vertical_diagonal,
    count(*) FILTER (WHERE p.pattern_name = 'block') / count(*)                 AS block,
    count(*) FILTER (WHERE p.pattern_name = 'heterogeneous') / count(*)         AS heterogeneous,
    coalesce(m.causal, false)                                                   AS causal
FROM head_patterns AS p
JOIN runs AS r USING (run_id)
JOIN models AS m USING (model_id)
WHERE r.kind = 'statistics'
  AND ($model IS NULL OR m.name = $model)
  AND ($task IS NULL OR r.task = $task)
GROUP BY m.name, r.task, r.split, r.run_id, m.causal
ORDER BY model, r.task, r.split, r.run_id;
