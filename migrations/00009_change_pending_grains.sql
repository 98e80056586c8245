-- +goose Up
-- Compact pending rows of profile changes (channel profile:*) carry their grains as a text array
-- of four rows (correlation ids, profile types, readers, paths) instead of a JSON payload:
-- building the JSON cost the writer several times what collecting the arrays costs. Rows written
-- before are converted.
ALTER TABLE silo.change_pending ADD COLUMN grains text[];
COMMENT ON COLUMN silo.change_pending.channel IS 'Channel of the change, e.g. profile:customer:0815, dead-letters, reaper. profile:* marks the changes of one statement on profile.profilestore in compact form (aligned arrays in grains), which api.change_sequence expands into one change per profile and reader; api.changes_pending() shows them expanded.';
COMMENT ON COLUMN silo.change_pending.grains IS 'A compact row of profile changes (channel profile:*): the grains one statement wrote or deleted, as four aligned rows: correlation ids, profile types, readers, paths (api.change_grains). NULL for other channels.';
-- +goose StatementBegin
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_settings WHERE name = 'default_toast_compression' AND 'lz4' = ANY (enumvals)) THEN
        ALTER TABLE silo.change_pending ALTER COLUMN grains SET COMPRESSION lz4;
    END IF;
END
$$;
-- +goose StatementEnd
UPDATE silo.change_pending
SET grains = ARRAY[ARRAY(SELECT jsonb_array_elements_text(payload -> 'correlation_id')),
                   ARRAY(SELECT jsonb_array_elements_text(payload -> 'profile_type')),
                   ARRAY(SELECT jsonb_array_elements_text(payload -> 'reader')),
                   ARRAY(SELECT jsonb_array_elements_text(payload -> 'path'))],
    payload = '{}'
WHERE channel = 'profile:*';

-- +goose Down
UPDATE silo.change_pending
SET payload = jsonb_build_object('correlation_id', to_jsonb(ARRAY(SELECT unnest(grains[1:1]))),
                                 'profile_type', to_jsonb(ARRAY(SELECT unnest(grains[2:2]))),
                                 'reader', to_jsonb(ARRAY(SELECT unnest(grains[3:3]))),
                                 'path', to_jsonb(ARRAY(SELECT unnest(grains[4:4]))))
WHERE channel = 'profile:*';
ALTER TABLE silo.change_pending DROP COLUMN grains;
