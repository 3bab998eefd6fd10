-- Head roles of decoders (`attnwh ingest roles`, docs/metrics.md#head-roles): a decoder read on
-- probe inputs built from a seed (repeated random tokens; a needle sentence in a haystack of
-- the user's text), one run per probe kind (runs.kind = 'roles', runs.task = the probe kind),
-- all its rows written in one transaction. role_probes holds each probe's exact tokens and
-- spans, so a probe can be read again; head_roles one row per probe, layer and query head.
-- Each probe is also an examples row (dataset 'probes', task = the kind, its decoded text) with
-- its token ids in run_examples, so `attnwh show --run R --example E` draws its maps.
-- Under grouped-query attention the head's key/value group is in the view head_groups.

CREATE TABLE role_settings (
    run_id          INTEGER PRIMARY KEY,
    kind            VARCHAR NOT NULL,    -- induction | needle
    local_window    INTEGER NOT NULL,
    repeat_length   INTEGER,             -- induction: m
    context_length  INTEGER,             -- needle: tokens per probe
    depths          DOUBLE[],            -- needle: the depths, taken in turn
    text_hash       VARCHAR              -- needle: blake2b-16 of the haystack's documents
);

CREATE TABLE role_probes (
    run_id      INTEGER NOT NULL,
    example_id  BIGINT NOT NULL,     -- examples.example_id of the probe
    position    INTEGER NOT NULL,    -- the probe's number in its run, 0-based
    kind        VARCHAR NOT NULL,    -- induction | needle
    seed        INTEGER NOT NULL,
    depth       DOUBLE,              -- needle: the depth asked for, 0..1; NULL for induction
    token_ids   INTEGER[] NOT NULL,
    segments    JSON NOT NULL,       -- {"name": [start, stop], ...}, half-open token ranges
    PRIMARY KEY (run_id, example_id)
);

CREATE TABLE head_roles (
    run_id          INTEGER NOT NULL,
    example_id      BIGINT NOT NULL,
    layer           SMALLINT NOT NULL,
    head            SMALLINT NOT NULL,
    previous_token  REAL NOT NULL,
    induction       REAL,            -- induction probes only
    duplicate       REAL,            -- induction probes only
    retrieval       REAL,            -- needle probes only
    sink            REAL NOT NULL,
    local_mass      REAL NOT NULL,
    PRIMARY KEY (run_id, example_id, layer, head)
);

COMMENT ON TABLE role_settings IS 'Per head-roles run: the settings its probes and scores were made with (part of the run''s identity).';
COMMENT ON COLUMN role_settings.run_id IS 'The head-roles run (runs.run_id).';
COMMENT ON COLUMN role_settings.kind IS 'The probe kind: induction or needle (runs.task).';
COMMENT ON COLUMN role_settings.local_window IS 'W of head_roles.local_mass: the keys i-W+1..i count as local (--local-window).';
COMMENT ON COLUMN role_settings.repeat_length IS 'Induction probes: m, the random tokens of each half (--repeat-length); NULL for needles.';
COMMENT ON COLUMN role_settings.context_length IS 'Needle probes: the tokens of each probe, haystack, needle, question and answer (--context-length); NULL for induction.';
COMMENT ON COLUMN role_settings.depths IS 'Needle probes: the depths asked for, probe i at depths[i % len] (--depths); NULL for induction.';
COMMENT ON COLUMN role_settings.text_hash IS 'Needle probes: blake2b-16 hex of the haystack text''s documents (runs.source names the text); NULL for induction.';

COMMENT ON TABLE role_probes IS 'Per head-roles run (runs.kind = ''roles'') and probe: the exact token ids the decoder read and the named spans within them (attnwh.ingest.sources.probes, docs/metrics.md#head-roles). Built from the seed, the settings and (needles) the text, so a rerun builds the same probes.';
COMMENT ON COLUMN role_probes.run_id IS 'The head-roles run (runs.run_id); runs.task is the probe kind.';
COMMENT ON COLUMN role_probes.example_id IS 'The probe as an example (examples.example_id, dataset ''probes''; its run_examples row holds the token ids), so attnwh show draws its maps; head_roles.example_id.';
COMMENT ON COLUMN role_probes.position IS 'The probe''s number within its run, 0-based, in the order drawn from the seed (needles: depth = depths[position % len(depths)]).';
COMMENT ON COLUMN role_probes.kind IS 'induction: BOS where the tokenizer adds one, m random ordinary tokens, the same m again (Olsson et al. 2022); needle: a haystack of the text with a needle sentence at a depth, a question and its answer teacher-forced (Wu et al. 2025).';
COMMENT ON COLUMN role_probes.seed IS 'The seed the run drew its probes with (numpy default_rng); the run''s probes are drawn one after the other.';
COMMENT ON COLUMN role_probes.depth IS 'Needle probes: the depth asked for, 0 (before the haystack) to 1 (after it); the needle_sentence span says where the needle landed (the nearest sentence boundary within 5 % of the haystack and 32 tokens, else the exact token). NULL for induction probes.';
COMMENT ON COLUMN role_probes.token_ids IS 'The token ids the model read, special tokens included (a probe is never re-tokenized).';
COMMENT ON COLUMN role_probes.segments IS 'Named half-open token ranges [start, stop) into token_ids: first and repeat (induction); needle (the payload words to retrieve), needle_sentence, question and answer (the payload''s tokens again, ending the probe) for needles.';

COMMENT ON TABLE head_roles IS 'Per head-roles run, probe, layer and query head: role scores read from the head''s attention on the probe (docs/metrics.md#head-roles). A row sees keys 0..i (its window on a sliding-window layer); NULL where the probe does not define a score. Join head_groups (on the run''s model_id and head) for the key/value group.';
COMMENT ON COLUMN head_roles.run_id IS 'The head-roles run (runs.run_id).';
COMMENT ON COLUMN head_roles.example_id IS 'The probe (role_probes.example_id, examples.example_id).';
COMMENT ON COLUMN head_roles.layer IS 'Layer, 0-based.';
COMMENT ON COLUMN head_roles.head IS 'Query head within the layer, 0-based.';
COMMENT ON COLUMN head_roles.previous_token IS 'Previous-token score: the mean over rows i >= 1 of A[i, i-1] (the previous-token heads that feed induction heads; Olsson et al. 2022).';
COMMENT ON COLUMN head_roles.induction IS 'Induction (prefix-matching) score (Olsson et al. 2022): on an induction probe with halves of m tokens, the mean over the repeat''s rows r of A[r, r-m+1], the token that followed the earlier occurrence of r''s token. NULL on needle probes.';
COMMENT ON COLUMN head_roles.duplicate IS 'Duplicate-token score: on an induction probe, the mean over the repeat''s rows r of A[r, r-m], the earlier occurrence of the same token. NULL on needle probes.';
COMMENT ON COLUMN head_roles.retrieval IS 'Retrieval score (Wu et al. 2025): on a needle probe, at each answer step (the row before answer token w, teacher-forced) the head retrieves when the key of its largest weight is a payload position holding w not retrieved at an earlier step; the score is the steps that retrieve over the payload''s length (0..1). NULL on induction probes.';
COMMENT ON COLUMN head_roles.sink IS 'Sink share: the mean over rows of A[i, 0], the weight on the first token (BOS, or the first real token where the tokenizer adds none).';
COMMENT ON COLUMN head_roles.local_mass IS 'Local mass: the mean over rows of the weight on keys i-W+1..i, the last W tokens with the row''s own (W: role_settings.local_window, --local-window, default 64). Near 1: a head a window of W recent tokens would serve.';

-- Per head-roles run, layer and query head: each score's mean over the run's probes, the
-- grain of every role query and of the report.
CREATE VIEW head_role_means AS
SELECT
    m.name                 AS model,
    r.task                 AS probe,
    h.run_id,
    h.layer,
    h.head,
    g.kv_group,
    count(*)               AS probes,
    avg(h.previous_token)  AS previous_token,
    avg(h.induction)       AS induction,
    avg(h.duplicate)       AS duplicate,
    avg(h.retrieval)       AS retrieval,
    avg(h.sink)            AS sink,
    avg(h.local_mass)      AS local_mass
FROM head_roles AS h
JOIN runs AS r USING (run_id)
JOIN models AS m USING (model_id)
LEFT JOIN head_groups AS g ON g.model_id = r.model_id AND g.head = h.head
WHERE r.kind = 'roles'
GROUP BY ALL;

COMMENT ON VIEW head_role_means IS 'Per head-roles run, layer and query head: the mean of each head_roles score over the run''s probes (NULL where the probe kind does not define it), with the model''s name, the probe kind (runs.task) and the head''s key/value group (head_groups). The queries head_roles, head_roles_top and findings_roles read it.';
COMMENT ON COLUMN head_role_means.model IS 'The model''s name as stored (models.name).';
COMMENT ON COLUMN head_role_means.probe IS 'The run''s probe kind: induction or needle (runs.task).';
COMMENT ON COLUMN head_role_means.run_id IS 'The head-roles run (runs.run_id).';
COMMENT ON COLUMN head_role_means.layer IS 'Layer, 0-based.';
COMMENT ON COLUMN head_role_means.head IS 'Query head within the layer, 0-based.';
COMMENT ON COLUMN head_role_means.kv_group IS 'The key/value group the head reads under grouped-query attention (head_groups.kv_group).';
COMMENT ON COLUMN head_role_means.probes IS 'Probes the means are over.';
COMMENT ON COLUMN head_role_means.previous_token IS 'Mean of head_roles.previous_token.';
COMMENT ON COLUMN head_role_means.induction IS 'Mean of head_roles.induction (NULL on needle runs).';
COMMENT ON COLUMN head_role_means.duplicate IS 'Mean of head_roles.duplicate (NULL on needle runs).';
COMMENT ON COLUMN head_role_means.retrieval IS 'Mean of head_roles.retrieval (NULL on induction runs).';
COMMENT ON COLUMN head_role_means.sink IS 'Mean of head_roles.sink.';
COMMENT ON COLUMN head_role_means.local_mass IS 'Mean of head_roles.local_mass.';
