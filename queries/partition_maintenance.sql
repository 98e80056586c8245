-- Time partitioning: the periodic maintenance of silo work (sql/partition/).

-- name: PartitionMaintain :many
-- Maintains every time-partitioned table (natively: moves rows out of the default partition,
-- premakes partitions ahead of now); one row per table, with the SQLSTATE and message of a table
-- that failed (sqlstate and message empty for the others).
SELECT m.table_name::text AS table_name, m.backend::text AS backend, m.moved_rows::bigint AS moved_rows,
       m.created_partitions::integer AS created_partitions, coalesce(m.sqlstate, '')::text AS sqlstate, coalesce(m.message, '')::text AS message
FROM api.partition_maintain() m;
