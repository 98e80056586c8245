-- +goose Up
-- Belt dead letters join the retention registry: the retention job deletes those older than the
-- setting belt.dead_letter_retention (a small table: rows, not partitions).
INSERT INTO purge.retention_targets (name, setting, default_value, trim_function, description) VALUES
    ('belt_dead_letters', 'belt.dead_letter_retention', '30 days', 'api.belt_dead_letter_trim',
     'Belt dead letters (belt.dead_letters) written longer ago than the retention deleted (a small table: rows, not partitions); a pending replay of one still runs while its event is in the store.')
ON CONFLICT (name) DO NOTHING;

-- +goose Down
DELETE FROM purge.retention_targets WHERE name = 'belt_dead_letters';
