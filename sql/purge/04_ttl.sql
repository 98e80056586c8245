-- Purge, TTL mode: the store expires data itself. A unit of work expires when it has not been
-- modified (ods.unit_of_works.last_updated: any event, object or archiving) for its own ttl or the
-- configured ttl-expire-after-seconds (the seed's per-document ttl and collection-wide
-- expireAfterSeconds). It expires whole: its Summary (in its row) and objects carry no expiry of
-- their own and go with it. As the purge criteria would, expiry is postponed for an unfinished unit of work while
-- terminal-unit-of-works-only is true, and for one of an archived-dependent journey type not
-- archived yet (finishing or archiving modifies it, which starts its ttl again).
--
-- Why partitions: objects are the bulk of the data and ods.objects is time-partitioned on
-- created_at. No object of a unit of work is older than its first_seen, so every object in a
-- partition that ends at or before the first_seen of the oldest unit of work that stays belongs
-- to an expiring unit of work: such partitions are dropped whole (drop_chunks on TimescaleDB,
-- pg_partman's partitions natively, partition_private.drop_older), in the transaction that deletes
-- their units of work and those units of work's objects in later partitions; the objects dropped
-- are counted from the units of work's object_count, not by scanning them. Where the data does
-- not allow it (a unit of work that stays holds objects in an old partition), expired units of work
-- go by batched deletes as in STANDARD mode.

-- STABLE, as timestamptz + interval is: an IMMUTABLE wrapper would not be inlined, and would cost a
-- function call per unit of work scanned.
CREATE FUNCTION purge_private.ttl_expiry(p_last_updated timestamptz, p_ttl integer, p_default bigint)
RETURNS timestamptz
LANGUAGE sql STABLE
AS $$
    SELECT p_last_updated + coalesce(p_ttl, p_default) * interval '1 second';
$$;
COMMENT ON FUNCTION purge_private.ttl_expiry(timestamptz, integer, bigint) IS
    'When a unit of work last modified at p_last_updated expires: after its own ttl p_ttl (seconds) or, when NULL, p_default (ttl-expire-after-seconds). Raises nothing.';

CREATE FUNCTION purge_private.ttl_postponed(p_finished timestamptz, p_archived timestamptz, p_journey text, p_cfg purge.config)
RETURNS boolean
LANGUAGE sql IMMUTABLE
AS $$
    SELECT (p_cfg.terminal_unit_of_works_only AND p_finished IS NULL)
        OR (p_archived IS NULL AND coalesce(p_journey = ANY (p_cfg.archived_dependent_journey_types), false));
$$;
COMMENT ON FUNCTION purge_private.ttl_postponed(timestamptz, timestamptz, text, purge.config) IS
    'Whether the expiry of a unit of work (finishedAt p_finished, archivedAt p_archived, journey type p_journey) is postponed under configuration p_cfg: unfinished while terminal-unit-of-works-only, or of an archived-dependent journey type and not archived. Raises nothing.';

-- Rows with their own ttl are few; the others are found through the index on last_updated.
CREATE FUNCTION purge_private.ttl_expired(p_now timestamptz, p_cfg purge.config)
RETURNS TABLE (id text, first_seen timestamptz, postponed boolean)
LANGUAGE sql STABLE
AS $$
    SELECT u.id, u.first_seen, purge_private.ttl_postponed(u.finished_at, u.archived_at, u.journey_type, p_cfg)
    FROM ods.unit_of_works u
    WHERE u.ttl IS NULL AND u.last_updated <= p_now - p_cfg.ttl_expire_after_seconds * interval '1 second'
    UNION ALL
    SELECT u.id, u.first_seen, purge_private.ttl_postponed(u.finished_at, u.archived_at, u.journey_type, p_cfg)
    FROM ods.unit_of_works u
    WHERE u.ttl IS NOT NULL AND purge_private.ttl_expiry(u.last_updated, u.ttl, p_cfg.ttl_expire_after_seconds) <= p_now;
$$;
COMMENT ON FUNCTION purge_private.ttl_expired(timestamptz, purge.config) IS
    'The units of work expired at p_now under configuration p_cfg (purge_private.ttl_expiry), each with its first_seen and whether its expiry is postponed (purge_private.ttl_postponed). Raises nothing.';

CREATE FUNCTION api.purge_ttl_run(p_now timestamptz DEFAULT now(), p_limit integer DEFAULT NULL,
                                  OUT execution_date date, OUT dropped_partitions integer, OUT unit_of_works_deleted integer,
                                  OUT objects_deleted bigint, OUT postponed bigint, OUT expiring_next_day bigint)
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    v_cfg     purge.config := purge_private.config();
    v_limit   integer := coalesce(p_limit, v_cfg.fetch_size * v_cfg.parallelism);
    v_r       purge.reports;
    v_keep    timestamptz;
    v_cut     timestamptz;
    v_ids     text[];
    v_n       bigint;
    v_units   integer := 0;
    v_sums    integer := 0;
    v_objects bigint := 0;
    v_del     record;
BEGIN
    IF p_now IS NULL THEN
        RAISE EXCEPTION 'the time of the run must not be null' USING ERRCODE = 'SLINV';
    END IF;
    IF v_limit NOT BETWEEN 1 AND 1000000 THEN
        RAISE EXCEPTION 'a TTL run deletes 1 to 1000000 units of work by batch, got %', v_limit USING ERRCODE = 'SLINV';
    END IF;
    v_r := purge_private.report_open(p_now);
    IF v_r.mode <> 'TTL' THEN
        RAISE EXCEPTION 'the purge of % runs in % mode', v_r.execution_date, v_r.mode USING ERRCODE = 'SPMOD',
            HINT = 'api.purge_run runs the mode of the day''s report; api.purge_batch runs STANDARD mode';
    END IF;
    execution_date := v_r.execution_date;
    dropped_partitions := 0;

    -- 1. Whole partitions: those ending by the first_seen of the oldest unit of work that stays.
    SELECT u.first_seen INTO v_keep
    FROM ods.unit_of_works u
    WHERE purge_private.ttl_expiry(u.last_updated, u.ttl, v_cfg.ttl_expire_after_seconds) > p_now
       OR purge_private.ttl_postponed(u.finished_at, u.archived_at, u.journey_type, v_cfg)
    ORDER BY u.first_seen
    LIMIT 1;
    SELECT max(c.range_end) INTO v_cut
    FROM partition_private.chunks('ods.objects'::regclass) c
    WHERE NOT c.is_default AND c.range_end <= coalesce(v_keep, p_now) AND c.range_end <= p_now;
    IF v_cut IS NOT NULL THEN
        -- The units of work go first: a DELETE re-checks each row's expiry on its latest version,
        -- so one an ingest modified meanwhile stays. If any unit of work that old stays, its
        -- objects must too: then the objects of those deleted go by rows, and nothing is dropped.
        -- Their Summary goes in the same row delete; their objects are counted in their rows.
        WITH d AS (
            DELETE FROM ods.unit_of_works u
            WHERE u.first_seen < v_cut
              AND purge_private.ttl_expiry(u.last_updated, u.ttl, v_cfg.ttl_expire_after_seconds) <= p_now
              AND NOT purge_private.ttl_postponed(u.finished_at, u.archived_at, u.journey_type, v_cfg)
            RETURNING u.id, u.object_count, u.summary_updated IS NOT NULL AS summary)
        SELECT coalesce(array_agg(d.id), '{}'), coalesce(sum(d.object_count), 0), count(*) FILTER (WHERE d.summary)
        INTO v_ids, v_n, v_sums FROM d;
        v_units := cardinality(v_ids);
        IF EXISTS (SELECT FROM ods.unit_of_works u WHERE u.first_seen < v_cut) THEN
            DELETE FROM ods.objects o WHERE o.unit_of_work_id = ANY (v_ids);
            GET DIAGNOSTICS v_objects = ROW_COUNT;
        ELSE
            -- Every object of theirs is in a partition that goes or deleted here: their count.
            DELETE FROM ods.objects o WHERE o.unit_of_work_id = ANY (v_ids) AND o.created_at >= v_cut;
            v_objects := v_n;
            SELECT count(*)::integer INTO dropped_partitions FROM partition_private.drop_older('ods.objects'::regclass, v_cut);
        END IF;
    END IF;

    -- 2. Batched deletes of the other expired units of work.
    v_ids := ARRAY(SELECT e.id FROM purge_private.ttl_expired(p_now, v_cfg) e
                   JOIN ods.unit_of_works u ON u.id = e.id
                   WHERE NOT e.postponed
                   LIMIT v_limit
                   FOR UPDATE OF u SKIP LOCKED);
    IF cardinality(v_ids) > 0 THEN
        v_del := purge_private.delete_units(v_ids);
        v_units := v_units + v_del.unit_of_works;
        v_sums := v_sums + v_del.summaries;
        v_objects := v_objects + v_del.objects;
    END IF;
    unit_of_works_deleted := v_units;
    objects_deleted := v_objects;

    -- 3. The report: counts, what is postponed, what expires in the next day.
    SELECT count(*) FILTER (WHERE e.postponed) INTO postponed FROM purge_private.ttl_expired(p_now, v_cfg) e;
    SELECT (SELECT count(*) FROM ods.unit_of_works u
            WHERE u.ttl IS NULL
              AND u.last_updated > p_now - v_cfg.ttl_expire_after_seconds * interval '1 second'
              AND u.last_updated <= p_now + interval '1 day' - v_cfg.ttl_expire_after_seconds * interval '1 second'
              AND NOT purge_private.ttl_postponed(u.finished_at, u.archived_at, u.journey_type, v_cfg))
         + (SELECT count(*) FROM ods.unit_of_works u
            WHERE u.ttl IS NOT NULL
              AND purge_private.ttl_expiry(u.last_updated, u.ttl, v_cfg.ttl_expire_after_seconds) > p_now
              AND purge_private.ttl_expiry(u.last_updated, u.ttl, v_cfg.ttl_expire_after_seconds) <= p_now + interval '1 day'
              AND NOT purge_private.ttl_postponed(u.finished_at, u.archived_at, u.journey_type, v_cfg))
    INTO expiring_next_day;
    UPDATE purge.reports r SET postponed = purge_ttl_run.postponed, expiring_next_day = purge_ttl_run.expiring_next_day
    WHERE r.execution_date = v_r.execution_date;
    v_r := purge_private.count_deleted(v_r.execution_date, p_now, v_units, v_sums, v_objects, dropped_partitions);
    IF v_units > 0 THEN
        PERFORM purge_private.publish('ttl', v_r);
    END IF;
    IF v_r.finished_at IS NULL AND NOT EXISTS (SELECT FROM purge_private.ttl_expired(p_now, v_cfg) e WHERE NOT e.postponed) THEN
        PERFORM purge_private.close(v_r, p_now);
    END IF;
END
$$;
COMMENT ON FUNCTION api.purge_ttl_run(timestamptz, integer) IS
    'One TTL-mode run as of p_now (default now()), in the caller''s transaction: opens the day''s report if needed; drops whole the partitions or chunks of ods.objects that hold only objects of expired units of work (ending at or before the first_seen of the oldest unit of work that stays), deleting in the same transaction those units of work, their summaries and their objects in later partitions (when a unit of work that old was modified meanwhile and stays, their objects are deleted by rows instead and nothing is dropped); then deletes at most p_limit (default NULL: fetch-size times parallelism; 1 to 1000000) more expired units of work whole, by batch. A unit of work expires when not modified for its ttl or ttl-expire-after-seconds; expiry is postponed for unfinished ones while terminal-unit-of-works-only and for those of an archived-dependent journey type not archived. Units of work locked by a concurrent writer are left to the next run. Updates the report: counts, postponed, expiringNextDay (expiring in the 24 hours after p_now); closes it the first time nothing expired is left. Returns execution_date, dropped_partitions, unit_of_works_deleted, objects_deleted, postponed, expiring_next_day. Publishes ttl (and started, progress, finished) on channel purge. Takes a brief ACCESS EXCLUSIVE lock on ods.objects per native partition dropped. Raises SLINV (p_now NULL, p_limit out of range), SPMOD (the day''s report runs in STANDARD mode), STBKD (the partitioning backend is not usable).';
