-- +goose Up
-- The updater's error mode applies to transient errors only: a deterministic one (api.error_class)
-- sends its message to the dead letter table in both modes.
UPDATE silo.settings
SET description = 'What a transient unexpected error (api.error_class: connection loss, deadlock, lock or statement timeout, shutdown, insufficient resources) does: retry (the lane waits with exponential back-off and tries again, forever) or dead_letter (the message that raised it goes to the dead letter table, the others apply). A deterministic error always dead-letters its message.'
WHERE key = 'updater.unexpected_errors';

-- +goose Down
UPDATE silo.settings
SET description = 'What an unexpected (non-validation) error does: retry (the lane waits with exponential back-off and tries again, forever) or dead_letter (the message that raised it goes to the dead letter table, the others apply).'
WHERE key = 'updater.unexpected_errors';
