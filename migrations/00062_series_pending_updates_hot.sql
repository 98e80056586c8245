-- +goose Up
-- Every write merges its series' pending update, which moves flush_idle. With flush_idle under an
-- index no such update could be HOT: each wrote new entries into both indexes (about half the cost
-- of merging the pending updates of a 100-series batch). The metadata updater, once a second,
-- reads the table whole instead: it holds one row per series written in the last stale_limit
-- (300 s by default), and a sequential read of 100,000 rows costs it about 10 ms. Room is left
-- on each page for the updated rows.
DROP INDEX series.pending_updates_due_idx;
ALTER TABLE series.pending_updates SET (fillfactor = 50);

-- +goose Down
ALTER TABLE series.pending_updates RESET (fillfactor);
CREATE INDEX pending_updates_due_idx ON series.pending_updates ((least(deadline, flush_idle)));
