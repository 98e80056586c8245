-- Work off the ingest path, run by silo work (worker/series_*.go) and callable from psql:
--   * the metadata updater (seed 001, "Metadata Update"): the pending updates that appends merged
--     into series.pending_updates are written to their holders once min(flushIdle, deadline) has
--     passed: duration (grows only, to the latest point), modified and modifiedBy;
--   * the notifications the per-user throttle held back;
--   * removal of the points of deleted holders (account.series_deletions);
--   * retention (api.series_trim), which the retention job (sql/purge/) runs with Silo's others.
-- Rows are claimed with FOR UPDATE SKIP LOCKED, so two workers never flush one update twice, and
-- an append that merges into a row being flushed waits for the flush and then starts a new row.

CREATE FUNCTION api.series_metadata_flush(p_limit integer DEFAULT 1000)
RETURNS integer
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    v_n        integer;
    v_interval interval := settings_private.setting_interval('series.notify_interval', '200 milliseconds');
    v_t        record;
BEGIN
    IF p_limit IS NULL OR p_limit < 1 THEN
        RAISE EXCEPTION 'limit must be positive, not %', coalesce(p_limit::text, 'NULL') USING ERRCODE = 'SLINV';
    END IF;
    WITH due AS (
        DELETE FROM series.pending_updates u
        WHERE u.series_id IN (SELECT d.series_id FROM series.pending_updates d
                              WHERE least(d.deadline, d.flush_idle) <= now()
                              ORDER BY least(d.deadline, d.flush_idle) LIMIT p_limit
                              FOR UPDATE SKIP LOCKED)
        RETURNING u.*
    ), extended AS (
        -- Each flushed update's extent joins the series' lasting one (series_private.claim's bound).
        INSERT INTO series.extents AS x (series_id, last_at)
        SELECT d.series_id, d.data_max FROM due d
        ON CONFLICT (series_id) DO UPDATE SET last_at = greatest(x.last_at, excluded.last_at)
    ), flushed AS (
        UPDATE account.events e
        SET duration = greatest(coalesce(e.duration, 0),
                                (series_private.at_us(d.data_max) - series_private.holder_us(e.time)) / 1e6::double precision),
            modified = d.updated, modified_by = d.author
        FROM due d
        WHERE e.user_id = d.user_id AND e.id = d.event_id AND e.series_id = d.series_id
        RETURNING e.user_id, e.id
    ), published AS (
        INSERT INTO change_private.outbox (channel, kind, payload, readers)
        SELECT 'account:' || u.username || ':events', 'updated', jsonb_build_object('id', f.id), account_private.readers(u.username)
        FROM flushed f JOIN account.users u ON u.id = f.user_id
        RETURNING 1
    )
    SELECT count(*) INTO v_n FROM published;

    FOR v_t IN
        SELECT t.user_id, t.pending FROM series.notify_throttle t
        WHERE cardinality(t.pending) > 0 AND t.published <= now() - v_interval
        FOR UPDATE SKIP LOCKED
    LOOP
        UPDATE series.notify_throttle t SET published = now(), pending = '{}' WHERE t.user_id = v_t.user_id;
        PERFORM account_private.publish(v_t.user_id, 'events', 'series', jsonb_build_object('ids', to_jsonb(v_t.pending)));
    END LOOP;
    RETURN v_n;
END
$$;
COMMENT ON FUNCTION api.series_metadata_flush(integer) IS 'The metadata updater: writes to their holder events up to p_limit (default 1000) pending updates of series.pending_updates whose least(deadline, flush_idle) has passed, earliest first, and removes them: duration grows to the latest point''s offset from the event''s time (never shrinks), modified becomes the latest append''s time and modifiedBy its access id. Publishes kind updated, payload {"id"}, on channel account:<username>:events for each holder written, and the series notifications series.notify_throttle held back for users whose series.notify_interval has passed (kind series, payload {"ids": [...]}). Returns how many holders were written (an update whose holder is gone is dropped). Run every second by silo work; safe to run in parallel (SKIP LOCKED). Raises SLINV when p_limit is not positive or a setting is not an interval.';

CREATE FUNCTION api.series_cleanup(p_limit integer DEFAULT 100)
RETURNS integer
LANGUAGE plpgsql VOLATILE
-- Deleting compressed points decompresses their batches, however many, and only those: planned
-- for its values at each call (see series_private.clear).
SET timescaledb.max_tuples_decompressed_per_dml_transaction = 0
SET plan_cache_mode = force_custom_plan
AS $$
DECLARE
    v_ids bigint[];
BEGIN
    IF p_limit IS NULL OR p_limit < 1 THEN
        RAISE EXCEPTION 'limit must be positive, not %', coalesce(p_limit::text, 'NULL') USING ERRCODE = 'SLINV';
    END IF;
    SELECT array_agg(d.series_id) INTO v_ids
    FROM (SELECT d.series_id FROM account.series_deletions d ORDER BY d.deleted LIMIT p_limit FOR UPDATE SKIP LOCKED) d;
    IF v_ids IS NULL THEN
        RETURN 0;
    END IF;
    DELETE FROM series.points p WHERE p.series_id = ANY (v_ids);
    DELETE FROM series.points1 p WHERE p.series_id = ANY (v_ids);
    DELETE FROM series.pending_updates u WHERE u.series_id = ANY (v_ids);
    DELETE FROM series.extents x WHERE x.series_id = ANY (v_ids);
    DELETE FROM series.retention r WHERE r.series_id = ANY (v_ids);
    DELETE FROM account.series_deletions d WHERE d.series_id = ANY (v_ids);
    RETURN cardinality(v_ids);
END
$$;
COMMENT ON FUNCTION api.series_cleanup(integer) IS 'Removes the points, pending update and retention row of up to p_limit (default 100) series whose holder event was deleted (account.series_deletions, oldest first), then their account.series_deletions rows. Returns how many series were removed. Run every minute by silo work; safe to run in parallel (SKIP LOCKED). Raises SLINV when p_limit is not positive.';

-- Retention, applied by the retention job (api.retention_run, target series of
-- purge.retention_targets): whole chunks or partitions go when every series is past its retention
-- there (the longest retention of all decides the cutoff); the points of series kept for less are
-- deleted as rows from the chunks that stay.
CREATE FUNCTION api.series_trim(p_retention interval DEFAULT NULL, p_now timestamptz DEFAULT now(),
                                OUT dropped_chunks integer, OUT deleted_points bigint)
LANGUAGE plpgsql VOLATILE
-- Deleting compressed points decompresses their batches, however many, and only those: planned
-- for its values at each call (see series_private.clear).
SET timescaledb.max_tuples_decompressed_per_dml_transaction = 0
SET plan_cache_mode = force_custom_plan
AS $$
DECLARE
    v_keep    interval := p_retention;
    v_longest interval;
BEGIN
    IF p_now IS NULL THEN
        RAISE EXCEPTION 'the time of the run must not be null' USING ERRCODE = 'SLINV';
    END IF;
    IF v_keep IS NULL AND btrim(settings_private.setting('series.retention', '')) <> '' THEN
        v_keep := settings_private.setting_interval('series.retention', '');
    END IF;
    IF v_keep <= interval '0' THEN
        RAISE EXCEPTION 'series retention must be positive, got %', v_keep USING ERRCODE = 'SLINV',
            HINT = 'UPDATE silo.settings SET value = '''' WHERE key = ''series.retention'' keeps points forever.';
    END IF;
    dropped_chunks := 0;
    deleted_points := 0;
    -- Every series without a retention of its own (or its user's) is kept by the default: without
    -- one, nothing is old enough for a whole chunk to go.
    IF v_keep IS NOT NULL THEN
        SELECT greatest(v_keep, max(r.keep)) INTO v_longest FROM series.retention r;
        SELECT count(*)::integer INTO dropped_chunks
        FROM (SELECT FROM partition_private.drop_older('series.points', p_now - v_longest)
              UNION ALL
              SELECT FROM partition_private.drop_older('series.points1', p_now - v_longest)) d;
    END IF;
    WITH kept AS (
        SELECT e.series_id, coalesce(rs.keep, ru.keep, v_keep) AS keep
        FROM account.events e
        LEFT JOIN series.retention rs ON rs.user_id = e.user_id AND rs.series_id = e.series_id
        LEFT JOIN series.retention ru ON ru.user_id = e.user_id AND ru.series_id = 0
        WHERE e.series_id IS NOT NULL AND coalesce(rs.keep, ru.keep, v_keep) IS NOT NULL
          AND (v_longest IS NULL OR coalesce(rs.keep, ru.keep, v_keep) < v_longest)
    ), gone AS (
        DELETE FROM series.points p USING kept k
        WHERE p.series_id = k.series_id AND p.at < p_now - k.keep
        RETURNING 1
    ), gone1 AS (
        DELETE FROM series.points1 p USING kept k
        WHERE p.series_id = k.series_id AND p.at < p_now - k.keep
        RETURNING 1
    )
    SELECT (SELECT count(*) FROM gone) + (SELECT count(*) FROM gone1) INTO deleted_points;
END
$$;
COMMENT ON FUNCTION api.series_trim(interval, timestamptz) IS 'Applies the retention of series points as of p_now (default now()): each series keeps its points for its own keep in series.retention, else its user''s (series_id 0), else p_retention (default NULL: the series.retention setting; empty there: forever). Whole chunks or partitions older than the longest retention in force go (partition_private.drop_older; only when a default retention applies, since the series without a row of their own are kept by it); the older points of series kept for less are deleted as rows. Returns dropped_chunks and deleted_points. Run by silo work''s retention job (api.retention_run, target series); from psql at will. Raises SLINV when p_now is NULL or the retention (argument or setting) is not a positive interval, STBKD when the partitioning backend is not usable.';

CREATE FUNCTION api.series_retention_set(p_username text, p_keep interval, p_event_id text DEFAULT NULL)
RETURNS void
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    v_user   bigint := (SELECT u.id FROM account.users u WHERE u.username = p_username);
    v_series bigint := 0;
BEGIN
    IF v_user IS NULL THEN
        RAISE EXCEPTION 'unknown user "%"', p_username USING ERRCODE = 'SANFD';
    END IF;
    IF p_event_id IS NOT NULL THEN
        SELECT e.series_id INTO v_series FROM account.events e WHERE e.user_id = v_user AND e.id = p_event_id;
        IF v_series IS NULL THEN
            RAISE EXCEPTION 'Unknown event "%" or not a series event', p_event_id USING ERRCODE = 'SANFD';
        END IF;
    END IF;
    IF p_keep IS NULL THEN
        DELETE FROM series.retention r WHERE r.user_id = v_user AND r.series_id = v_series;
    ELSIF p_keep <= interval '0' THEN
        RAISE EXCEPTION 'retention must be positive, not %', p_keep USING ERRCODE = 'SAINV';
    ELSE
        INSERT INTO series.retention (user_id, series_id, keep) VALUES (v_user, v_series, p_keep)
        ON CONFLICT ON CONSTRAINT retention_pkey DO UPDATE SET keep = excluded.keep;
    END IF;
END
$$;
COMMENT ON FUNCTION api.series_retention_set(text, interval, text) IS 'Sets how long the points of user p_username are kept: of every series of the user (p_event_id NULL) or of the series of event p_event_id; p_keep NULL removes the row (the user''s, then the setting series.retention apply). Applied by api.series_trim (the retention job). An operator''s function (psql). Raises SANFD for an unknown user or event (or one that is no series event), SAINV for a retention that is not positive.';
