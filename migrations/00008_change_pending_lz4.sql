-- +goose Up
-- A compact pending row of profile changes lists every grain one statement wrote (a few kB to tens
-- of kB for a batch of updates): compressed with pglz, the default, that costs the writer about as
-- much as two percent of a batch's work; lz4 compresses it several times faster. Servers built
-- without lz4 keep the default.
-- +goose StatementBegin
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_settings WHERE name = 'default_toast_compression' AND 'lz4' = ANY (enumvals)) THEN
        ALTER TABLE silo.change_pending ALTER COLUMN payload SET COMPRESSION lz4;
    END IF;
END
$$;
-- +goose StatementEnd

-- +goose Down
ALTER TABLE silo.change_pending ALTER COLUMN payload SET COMPRESSION default;
