-- Event store, retention: events older than silo.settings event.retention go by whole partitions or
-- chunks (partition_private.drop_older, either backend), never row by row. The ids and pending
-- deliveries of the events dropped go with them: an id whose event is gone may be sent again and is
-- then new. A partition straddling the cutoff stays whole, and so do its events' ids, until a later
-- run drops it. Run by silo work (worker/event_trim.go) and from psql.

CREATE FUNCTION api.event_trim(p_retention interval DEFAULT NULL, p_now timestamptz DEFAULT now(),
                               OUT dropped_partitions integer, OUT deleted_ids bigint, OUT deleted_deliveries bigint)
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    v_retention interval := p_retention;
    v_cutoff    timestamptz;
    v_parts     regclass[];
    v_part      regclass;
    v_n         bigint;
BEGIN
    IF v_retention IS NULL THEN
        v_retention := settings_private.setting_interval('event.retention', '90 days');
    ELSIF v_retention < interval '0' THEN
        RAISE EXCEPTION 'event retention must not be negative, got %', v_retention USING ERRCODE = 'SLINV';
    END IF;
    v_cutoff := p_now - v_retention;

    -- The ids of the events that go are deleted by primary key from the partitions that may go,
    -- read before the drop (event.event_ids has no index on time: every ingest would pay for
    -- one), and given back to the events of those that stay (pg_partman keeps the last partition
    -- of a set; a native default partition keeps its rows from the partition of the cutoff on).
    -- Those partitions are locked against writes first, so that no event enters them unread (its
    -- id would outlive it). An ingest writing into one of them meanwhile (an event older than the
    -- cutoff) waits; should it hold event.events, which the drop needs, one of the two ends in a
    -- deadlock (40P01, which both callers retry). A partition straddling the cutoff is not read:
    -- it stays whole, with its events' ids.
    v_parts := ARRAY(SELECT c.part::regclass FROM partition_private.chunks('event.events'::regclass) c
                     WHERE c.is_default OR c.range_end <= v_cutoff);
    deleted_ids := 0;
    FOREACH v_part IN ARRAY v_parts LOOP
        EXECUTE format('LOCK TABLE %s IN SHARE MODE', v_part);
    END LOOP;
    FOREACH v_part IN ARRAY v_parts LOOP
        EXECUTE format('DELETE FROM event.event_ids i USING %s e WHERE e.at < $1 AND i.event_id = e.event_id', v_part)
            USING v_cutoff;
        GET DIAGNOSTICS v_n = ROW_COUNT;
        deleted_ids := deleted_ids + v_n;
    END LOOP;

    SELECT count(*)::integer INTO dropped_partitions
    FROM partition_private.drop_older('event.events'::regclass, v_cutoff);

    FOREACH v_part IN ARRAY v_parts LOOP
        CONTINUE WHEN NOT EXISTS (SELECT FROM pg_catalog.pg_class c WHERE c.oid = v_part);
        EXECUTE format('INSERT INTO event.event_ids (event_id, at, correlation_id, received)
                        SELECT e.event_id, e.at, e.correlation_id, e.received FROM %s e WHERE e.at < $1', v_part)
            USING v_cutoff;
        GET DIAGNOSTICS v_n = ROW_COUNT;
        deleted_ids := deleted_ids - v_n;
    END LOOP;

    -- The pending deliveries of events that are gone: older than the cutoff, and not in a partition
    -- that stays; events_correlation_at_idx tells.
    DELETE FROM event.deliveries d
    WHERE d.event_at < v_cutoff
      AND NOT EXISTS (SELECT FROM event.events e
                      WHERE e.correlation_id = d.event_cid AND e.at = d.event_at AND e.event_id = d.event_id);
    GET DIAGNOSTICS deleted_deliveries = ROW_COUNT;
END
$$;
COMMENT ON FUNCTION api.event_trim(interval, timestamptz) IS
    'Drops the events older than p_retention (default NULL: silo.settings event.retention, 90 days when unset) as of p_now (default now()) by whole partitions or chunks (partition_private.drop_older on event.events: a partition straddling the cutoff stays until a later run), with the ids (event.event_ids) and pending deliveries (event.deliveries) of the events that are gone: such an id sent again is a new event. Returns dropped_partitions, deleted_ids, deleted_deliveries. Run periodically by silo work''s retention job (api.retention_run, target event); from psql at will. Takes a SHARE lock (no writes) on the partitions or chunks that may go (those ending by the cutoff, and a native default partition) while it reads the ids of their events (an ingest of older events meanwhile may end in 40P01 for one of the two), and a brief ACCESS EXCLUSIVE lock on event.events per native partition dropped. Raises SLINV when p_retention is negative or the setting is not a non-negative interval, STBKD when the table''s partitioning backend is not usable.';
