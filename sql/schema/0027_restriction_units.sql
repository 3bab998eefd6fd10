-- Restriction runs through the engine (`attnwh ingest restriction`, docs/whole-context.md): the
-- ranking's losses (the unrestricted model and every key/value group restricted alone) are
-- stored batch by batch with the batch's done marks, so an interrupted run resumes at the
-- next batch, static shards (`--shard I/N`) merge into the run and Ray computes it; the plan
-- (the k least harmed restricted together), which needs the whole ranking, follows batch by
-- batch, then the tests complete the run. Each loss row names its sequence's example, which
-- is how a resumed run knows what it holds.

ALTER TABLE restriction_losses ADD COLUMN example_id BIGINT;
COMMENT ON COLUMN restriction_losses.example_id IS 'The sequence or needle probe (examples.example_id; runs.n_examples counts both), whose place within its input is `sequence`. NULL in rows written before this column.';
