-- +goose Up
-- Belt steps hold up to 32 lanes rather than 8. A step shares belt.batch_size among the lanes it
-- holds: over 8 lanes a correlation id's events come several to a step, and the profile store
-- applies repeated grains in as many rounds (about 2.6 a step under a large backlog, against 1
-- over 32 lanes; the step took about a quarter less time). 32 of a belt's 64 lanes still let the
-- two workers of a process step at once. A value set by a DBA stays.
UPDATE silo.settings
SET value = '32',
    description = 'Lanes a belt processing step holds at most: workers of one belt share its lanes, each step locking up to this many ready ones and sharing belt.batch_size among them (wider steps hold fewer events of one correlation id, which the profile store applies in fewer rounds).'
WHERE key = 'belt.lanes_per_step' AND value = '8';

-- +goose Down
UPDATE silo.settings
SET value = '8',
    description = 'Lanes a belt processing step holds at most: workers of one belt share its lanes, each step locking up to this many ready ones.'
WHERE key = 'belt.lanes_per_step' AND value = '32';
