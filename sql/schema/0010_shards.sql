-- Runs merged from static shards (`attnwh merge`) may hold only some of their examples until
-- the other shards come: status 'partial'.
COMMENT ON COLUMN runs.status IS 'running | interrupted | failed | partial (merged from shards, some still missing; an ablation sweep not yet finished) | complete; only complete runs are whole.';
