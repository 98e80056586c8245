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
    v_part      text;
BEGIN
    IF v_retention IS NULL THEN
        v_retention := settings_private.setting_interval('event.retention', '90 days');
    ELSIF v_retention < interval '0' THEN
        RAISE EXCEPTION 'event retention must not be negative, got %', v_retention USING ERRCODE = 'SLINV';
    END IF;
    v_cutoff := p_now - v_retention;

    -- The events older than the cutoff, read before their partitions go (event.event_ids has no
    -- index on their time: every ingest would pay for one). Those still there after the drop are
    -- in a partition that straddles the cutoff and keep their ids. The partitions that may go are
    -- locked against writes first, so that no event enters them unread (its id would outlive it).
    FOR v_part IN SELECT c.part FROM partition_private.chunks('event.events'::regclass) c
                  WHERE c.is_default OR c.range_end <= v_cutoff LOOP
        EXECUTE format('LOCK TABLE %s IN SHARE MODE', v_part);
    END LOOP;
    CREATE TEMP TABLE IF NOT EXISTS event_trim_old (event_id text COLLATE "C", correlation_id text COLLATE "C", at timestamptz)
        ON COMMIT DROP;
    TRUNCATE event_trim_old;
    INSERT INTO event_trim_old SELECT e.event_id, e.correlation_id, e.at FROM event.events e WHERE e.at < v_cutoff;
    ANALYZE event_trim_old;

    SELECT count(*)::integer INTO dropped_partitions
    FROM partition_private.drop_older('event.events'::regclass, v_cutoff);

    -- The ids and deliveries of events that are gone: older than the cutoff, and not in a partition
    -- that stays; events_correlation_at_idx tells.
    DELETE FROM event.deliveries d
    WHERE d.event_at < v_cutoff
      AND NOT EXISTS (SELECT FROM event.events e
                      WHERE e.correlation_id = d.event_cid AND e.at = d.event_at AND e.event_id = d.event_id);
    GET DIAGNOSTICS deleted_deliveries = ROW_COUNT;
    DELETE FROM event.event_ids i
    USING event_trim_old o
    WHERE i.event_id = o.event_id
      AND NOT EXISTS (SELECT FROM event.events e
                      WHERE e.correlation_id = o.correlation_id AND e.at = o.at AND e.event_id = o.event_id);
    GET DIAGNOSTICS deleted_ids = ROW_COUNT;
END
$$;
COMMENT ON FUNCTION api.event_trim(interval, timestamptz) IS
    'Drops the events older than p_retention (default NULL: silo.settings event.retention, 90 days when unset) as of p_now (default now()) by whole partitions or chunks (partition_private.drop_older on event.events: a partition straddling the cutoff stays until a later run), with the ids (event.event_ids) and pending deliveries (event.deliveries) of the events that are gone: such an id sent again is a new event. Returns dropped_partitions, deleted_ids, deleted_deliveries. Run periodically by silo work''s retention job (api.retention_run, target event); from psql at will. Takes a SHARE lock (no writes) on the partitions or chunks that may go (those ending by the cutoff, and a native default partition) while it reads the ids of their events, and a brief ACCESS EXCLUSIVE lock on event.events per native partition dropped. Raises SLINV when p_retention is negative or the setting is not a non-negative interval, STBKD when the table''s partitioning backend is not usable.';
