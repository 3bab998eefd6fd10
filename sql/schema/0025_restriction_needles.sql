-- Needle probes in a restriction run (`attnwh ingest restriction --needles N`): every
-- restriction set is also scored on N needle-in-a-haystack probes of the run's context length
-- built from the same text (a needle sentence at a depth, the question, the answer
-- teacher-forced; docs/metrics.md#head-roles), by the answer tokens' loss and the share of
-- them the model still predicts greedily, so a plan says what dropping a group's cache does
-- to retrieval from long context as well as to the loss on text.

ALTER TABLE restriction_runs ADD COLUMN needles INTEGER DEFAULT 0;
ALTER TABLE restriction_runs ADD COLUMN needle_tokens INTEGER;
ALTER TABLE restriction_runs ADD COLUMN needle_loss DOUBLE;
ALTER TABLE restriction_runs ADD COLUMN needle_accuracy DOUBLE;
ALTER TABLE restriction_runs ADD COLUMN needle_seed INTEGER;
ALTER TABLE restriction_runs ADD COLUMN needle_depths DOUBLE[];
ALTER TABLE restriction_groups ADD COLUMN needle_accuracy DOUBLE;
ALTER TABLE restriction_groups ADD COLUMN needle_delta DOUBLE;
ALTER TABLE restriction_plan ADD COLUMN needle_accuracy DOUBLE;
ALTER TABLE restriction_plan ADD COLUMN needle_delta DOUBLE;
ALTER TABLE restriction_losses ADD COLUMN input VARCHAR DEFAULT 'text';
ALTER TABLE restriction_losses ADD COLUMN correct INTEGER;

COMMENT ON COLUMN restriction_runs.needles IS 'Needle probes every restriction set was also scored on (--needles; 0: none, and the needle columns are NULL). Each is context_length tokens of the text with a needle sentence of four random words at a depth, then the question and the four words again as the answer, teacher-forced (attnwh.ingest.sources.probes.needle_probes).';
COMMENT ON COLUMN restriction_runs.needle_tokens IS 'Answer tokens over all needle probes: the tokens their accuracy and loss are read on.';
COMMENT ON COLUMN restriction_runs.needle_loss IS 'Unrestricted next-token cross-entropy on the answer tokens, nats per token.';
COMMENT ON COLUMN restriction_runs.needle_accuracy IS 'Unrestricted share of answer tokens that are the model''s greedy prediction (argmax of the next-token logits, the answer so far teacher-forced).';
COMMENT ON COLUMN restriction_runs.needle_seed IS 'Seed the needle probes were drawn with (their haystacks'' starts and needle words).';
COMMENT ON COLUMN restriction_runs.needle_depths IS 'Where the needles went, fractions of the haystack (probe i at needle_depths[i mod n]).';
COMMENT ON COLUMN restriction_groups.needle_accuracy IS 'Share of the needle probes'' answer tokens predicted greedily with this group alone restricted (restriction_runs.needle_accuracy unrestricted); NULL without needles.';
COMMENT ON COLUMN restriction_groups.needle_delta IS 'Answer-token loss with this group alone restricted − the unrestricted one (restriction_runs.needle_loss), nats per token; NULL without needles. The rank is by delta, the loss on text.';
COMMENT ON COLUMN restriction_plan.needle_accuracy IS 'Share of the needle probes'' answer tokens predicted greedily with exactly this set restricted; NULL without needles.';
COMMENT ON COLUMN restriction_plan.needle_delta IS 'Answer-token loss with this set restricted − the unrestricted one, nats per token; NULL without needles.';
COMMENT ON COLUMN restriction_losses.input IS 'text (a sequence of the held-out text; tokens = its predicted tokens) or needle (a needle probe; sequence = the probe, tokens = its answer tokens).';
COMMENT ON COLUMN restriction_losses.correct IS 'Of the row''s tokens, those that are the model''s greedy prediction under this set (NULL in runs stored before needles were measured).';
COMMENT ON COLUMN restriction_losses.sequence IS 'The text''s sequence in the order the text was cut (input text), or the needle probe (input needle), 0-based.';
COMMENT ON COLUMN restriction_losses.nats IS 'Summed next-token cross-entropy over the row''s tokens (a text sequence''s predicted tokens, a needle probe''s answer tokens), nats.';
COMMENT ON COLUMN restriction_losses.tokens IS 'Tokens scored in the row: a text sequence''s real tokens less the first, or a needle probe''s answer tokens.';
