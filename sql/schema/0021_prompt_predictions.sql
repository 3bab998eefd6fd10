-- A statistics run that read a causal language model through a prompt (`attnwh ingest
-- --prompt`, docs/prompts.md) also reads the prompt's answer in the same forward pass: the
-- label words' logits at each example's last real token, the class of the largest being the
-- prediction. One row per run and example; the run's accuracy goes into scores when it
-- completes. (The ablation sweep stores its prompted predictions in ablation_predictions.)

CREATE TABLE prompt_predictions (
    run_id      INTEGER NOT NULL,
    example_id  BIGINT NOT NULL,
    prediction  SMALLINT NOT NULL,  -- label id (the template's label-word order)
    correct     BOOLEAN,            -- NULL for an unlabelled example
    logits      REAL[] NOT NULL,    -- the label words' logits, in label-id order
    PRIMARY KEY (run_id, example_id)
);

COMMENT ON TABLE prompt_predictions IS 'Per statistics run read through a prompt (runs.prompt) and example: the prompt''s answer, read from the label words'' logits at the last real token in the pass that measured the statistics (docs/prompts.md).';
COMMENT ON COLUMN prompt_predictions.run_id IS 'The statistics run (runs.run_id); runs.prompt holds its template and label words.';
COMMENT ON COLUMN prompt_predictions.example_id IS 'The example (examples.example_id).';
COMMENT ON COLUMN prompt_predictions.prediction IS 'The predicted label id: the label word with the largest logit (runs.prompt->label_words, in label-id order).';
COMMENT ON COLUMN prompt_predictions.correct IS 'Whether the prediction is the gold label; NULL for an unlabelled example (a GLUE test split).';
COMMENT ON COLUMN prompt_predictions.logits IS 'The label words'' next-token logits at the example''s last real token, in label-id order.';


-- A prompted ablation sweep's sink heads come from the statistics of the same prompts: the
-- view ablation_sink_scores prefers a statistics run read through the ablation run's own
-- prompt (and, for a run that read none, one that read none) before its other preferences.
CREATE OR REPLACE VIEW ablation_sink_scores AS
WITH wanted AS (
    SELECT a.run_id, a.max_length, a.prompt, m.weights_hash, e.example_id
    FROM runs AS a
    JOIN models AS m USING (model_id)
    JOIN run_examples AS e USING (run_id)
    WHERE a.kind = 'ablation'
),
sizes AS (
    SELECT run_id, max_length, CAST(prompt AS VARCHAR) AS prompt, weights_hash, count(*) AS n
    FROM wanted GROUP BY ALL
),
candidates AS (
    SELECT
        z.run_id AS ablation_run,
        s.run_id AS statistics_run,
        row_number() OVER (
            PARTITION BY z.run_id
            ORDER BY (CAST(s.prompt AS VARCHAR) IS NOT DISTINCT FROM z.prompt) DESC,
                (s.max_length = z.max_length) DESC, (s.status = 'complete') DESC, s.run_id DESC
        ) AS preference
    FROM sizes AS z
    JOIN models AS m ON m.weights_hash = z.weights_hash
    JOIN runs AS s ON s.model_id = m.model_id AND s.kind = 'statistics'
    JOIN run_examples AS e ON e.run_id = s.run_id
    JOIN wanted AS w ON w.run_id = z.run_id AND w.example_id = e.example_id
    GROUP BY z.run_id, z.max_length, z.prompt, z.n, s.run_id, s.max_length, s.prompt, s.status
    HAVING count(*) = z.n
),
means AS (
    SELECT
        c.ablation_run,
        c.statistics_run,
        h.layer,
        h.head,
        count(*)         AS examples,
        avg(h.to_cls)    AS to_cls,
        avg(h.to_sep)    AS to_sep,
        avg(h.to_punct)  AS to_punct
    FROM candidates AS c
    JOIN head_stats AS h ON h.run_id = c.statistics_run
    JOIN wanted AS w ON w.run_id = c.ablation_run AND w.example_id = h.example_id
    WHERE c.preference = 1
    GROUP BY c.ablation_run, c.statistics_run, h.layer, h.head
)
SELECT
    *,
    greatest(to_cls, to_sep, to_punct) AS sink_score,
    CASE greatest(to_cls, to_sep, to_punct)
        WHEN to_cls THEN '[CLS]' WHEN to_sep THEN '[SEP]' ELSE 'punctuation' END AS sink_kind
FROM means;

COMMENT ON VIEW ablation_sink_scores IS 'Per ablation run, layer and head: mean attention to [CLS], [SEP] and punctuation of the run''s model over exactly the run''s examples, from a statistics run of the same weights that holds them all, and the sink score (Gu et al. 2025). docs/metrics.md#attention-sinks.';
COMMENT ON COLUMN ablation_sink_scores.ablation_run IS 'The ablation run (runs.run_id).';
COMMENT ON COLUMN ablation_sink_scores.statistics_run IS 'The statistics run the means come from: same weights, holds every example of the ablation run; first one read through the same prompt (runs.prompt; for a run that read none, one that read none), then the ablation run''s max_length, then a complete run, then the latest.';
COMMENT ON COLUMN ablation_sink_scores.layer IS 'Layer, 0-based.';
COMMENT ON COLUMN ablation_sink_scores.head IS 'Head, 0-based.';
COMMENT ON COLUMN ablation_sink_scores.examples IS 'Examples averaged over: the ablation run''s.';
COMMENT ON COLUMN ablation_sink_scores.to_cls IS 'Mean of head_stats.to_cls over the ablation run''s examples.';
COMMENT ON COLUMN ablation_sink_scores.to_sep IS 'Mean of head_stats.to_sep over the ablation run''s examples.';
COMMENT ON COLUMN ablation_sink_scores.to_punct IS 'Mean of head_stats.to_punct over the ablation run''s examples.';
COMMENT ON COLUMN ablation_sink_scores.sink_score IS 'The largest of to_cls, to_sep and to_punct: the head is a sink head at eps when this exceeds eps.';
COMMENT ON COLUMN ablation_sink_scores.sink_kind IS 'Which of the three is largest: [CLS], [SEP] or punctuation (ties: [CLS], then [SEP]).';
