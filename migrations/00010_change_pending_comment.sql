-- +goose Up
-- Writers publish changes through sql/change/ (api.change_publish, change_private.outbox,
-- change_private.publish_grains) and never write silo.change_pending themselves.
COMMENT ON COLUMN silo.change_pending.grains IS 'A compact row of profile changes (channel profile:*): the grains one statement wrote or deleted, as four aligned rows: correlation ids, profile types, readers, paths (written by change_private.publish_grains). NULL for other channels.';
COMMENT ON TABLE silo.change_pending IS 'Changes committed (or about to be) and not yet numbered: api.change_sequence moves them into silo.changes in commit order. Written in the transaction of each change, only through the publishing functions of sql/change/ (api.change_publish, change_private.outbox, change_private.publish_grains).';

-- +goose Down
COMMENT ON COLUMN silo.change_pending.grains IS 'A compact row of profile changes (channel profile:*): the grains one statement wrote or deleted, as four aligned rows: correlation ids, profile types, readers, paths (api.change_grains). NULL for other channels.';
COMMENT ON TABLE silo.change_pending IS 'Changes committed (or about to be) and not yet numbered: api.change_sequence moves them into silo.changes in commit order. Written in the transaction of each change.';
