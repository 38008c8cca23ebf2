-- A thread being deleted (store.Catalog.MarkThreadDeleting) takes no run
-- and is not listed while its checkpoints are deleted, so a deletion is
-- one step as requests see it, and one that fails part way can be tried
-- again.
ALTER TABLE api_threads ADD COLUMN deleting INTEGER NOT NULL DEFAULT 0;
