-- Head-roles runs on two more probe kinds (`attnwh ingest roles --probes random,text`), for
-- where attention sinks emerge (Gu et al. 2025): `random`, BOS (where the tokenizer adds one)
-- then distinct random ordinary tokens; `text`, BOS then natural text cut from the documents;
-- both of --sink-length tokens (64 by default, Gu et al.'s length). They define the scores
-- every probe has (previous token, sink, local mass); induction, duplicate and retrieval stay
-- NULL. No table changes: the comments say what the new kinds store.

COMMENT ON COLUMN role_settings.kind IS 'The probe kind (runs.task): induction, needle, random (random tokens) or text (natural text).';
COMMENT ON COLUMN role_settings.context_length IS 'Tokens of each probe: needle probes, haystack, needle, question and answer (--context-length); random and text probes, BOS included where added (--sink-length). NULL for induction.';
COMMENT ON COLUMN role_settings.text_hash IS 'Needle and text probes: blake2b-16 hex of the text''s documents (runs.source names the text); NULL for induction and random.';
COMMENT ON COLUMN role_probes.kind IS 'induction: BOS where the tokenizer adds one, m random ordinary tokens, the same m again (Olsson et al. 2022); needle: a haystack of the text with a needle sentence at a depth, a question and its answer teacher-forced (Wu et al. 2025); random: BOS then distinct random ordinary tokens; text: BOS then the text''s sentences from a random document on (where sinks emerge, Gu et al. 2025).';
COMMENT ON COLUMN role_probes.segments IS 'Named half-open token ranges [start, stop) into token_ids: first and repeat (induction); needle (the payload words to retrieve), needle_sentence, question and answer (the payload''s tokens again, ending the probe) for needles; random (random probes) and text (text probes), the tokens after BOS.';
