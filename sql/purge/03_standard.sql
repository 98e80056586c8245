-- Purge, STANDARD mode: the day's report, then small recurring batches until every unit of work
-- outside the retention period is gone.
--
-- Why it is shaped so:
-- * A batch is one transaction: it claims its units of work (FOR UPDATE SKIP LOCKED, so concurrent
--   batches never take the same one), deletes their objects, then the units of work with their
--   Summary (held in the unit of work's row), and adds what it deleted to the report in the same
--   transaction. A batch that fails or whose worker dies rolls back whole: nothing half-deleted,
--   nothing counted that was not deleted, and the next run picks the units of work up again. The claim re-checks the criteria on the row it
--   locks (READ COMMITTED re-evaluates a locked row's condition), so a unit of work changed or
--   deleted meanwhile is skipped.
-- * The criteria and the lower bound come from the report, not the configuration: a day's purge
--   runs with the configuration it started with, as the report says.
-- * The candidates are found through two partial indexes, finished ones by finishedAt and, unless
--   terminal-unit-of-works-only, unfinished ones by startedAt.
-- * The report closes (finishedAt) at the first batch that claims nothing while no eligible unit
--   of work is left, locked by a concurrent batch or not.

CREATE FUNCTION purge_private.eligible(p_started timestamptz, p_finished timestamptz, p_archived timestamptz, p_journey text,
                                       p_bound timestamptz, p_terminal_only boolean, p_archived_types text[])
RETURNS boolean
LANGUAGE sql IMMUTABLE
AS $$
    SELECT coalesce(p_finished < p_bound OR (NOT p_terminal_only AND p_finished IS NULL AND p_started < p_bound), false)
       AND (p_archived IS NOT NULL OR p_journey IS NULL OR NOT (p_journey = ANY (p_archived_types)));
$$;
COMMENT ON FUNCTION purge_private.eligible(timestamptz, timestamptz, timestamptz, text, timestamptz, boolean, text[]) IS
    'The seed''s purge criteria for one unit of work (startedAt p_started, finishedAt p_finished, archivedAt p_archived, journey type p_journey) against lower bound p_bound: finishedAt before the bound, or (when p_terminal_only is false) no finishedAt and startedAt before the bound; and, when its journey type is in p_archived_types, archived. Raises nothing.';

CREATE FUNCTION purge_private.count_eligible(p_bound timestamptz, p_terminal_only boolean, p_archived_types text[])
RETURNS bigint
LANGUAGE sql STABLE
AS $$
    SELECT (SELECT count(*) FROM ods.unit_of_works u
            WHERE u.finished_at < p_bound
              AND (u.archived_at IS NOT NULL OR u.journey_type IS NULL OR NOT (u.journey_type = ANY (p_archived_types))))
         + (SELECT count(*) FROM ods.unit_of_works u
            WHERE NOT p_terminal_only AND u.finished_at IS NULL AND u.started_at < p_bound
              AND (u.archived_at IS NOT NULL OR u.journey_type IS NULL OR NOT (u.journey_type = ANY (p_archived_types))));
$$;
COMMENT ON FUNCTION purge_private.count_eligible(timestamptz, boolean, text[]) IS
    'How many units of work meet the purge criteria (purge_private.eligible) for lower bound p_bound, p_terminal_only and p_archived_types. Raises nothing.';

CREATE FUNCTION purge_private.batch_sizes(p_fetch_size integer, p_parallelism integer)
RETURNS integer[]
LANGUAGE sql IMMUTABLE
AS $$
    SELECT coalesce(array_agg(p_fetch_size / p_parallelism + CASE WHEN i <= p_fetch_size % p_parallelism THEN 1 ELSE 0 END ORDER BY i)
                    FILTER (WHERE p_fetch_size / p_parallelism + CASE WHEN i <= p_fetch_size % p_parallelism THEN 1 ELSE 0 END > 0), '{}')
    FROM generate_series(1, p_parallelism) i;
$$;
COMMENT ON FUNCTION purge_private.batch_sizes(integer, integer) IS
    'How a run splits p_fetch_size units of work into p_parallelism concurrent batches: sizes that differ by one at most (40 and 8: eight of 5; 500 and 8: four of 63 and four of 62), no empty batch (10 and 16: ten of 1). Raises nothing.';

-- The day's report: created by the first run of the day with the configuration it runs with.
CREATE FUNCTION purge_private.report_open(p_now timestamptz)
RETURNS purge.reports
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    v_cfg    purge.config := purge_private.config();
    v_date   date := purge_private.execution_date(p_now);
    v_r      purge.reports;
    v_period interval;
    v_bound  timestamptz;
    v_count  bigint;
BEGIN
    SELECT * INTO v_r FROM purge.reports r WHERE r.execution_date = v_date;
    IF FOUND THEN
        RETURN v_r;
    END IF;
    v_period := purge_private.date_period(v_cfg.retention_period);
    IF v_cfg.mode = 'STANDARD' THEN
        v_bound := purge_private.lower_bound(p_now, v_period);
        v_count := purge_private.count_eligible(v_bound, v_cfg.terminal_unit_of_works_only, v_cfg.archived_dependent_journey_types);
    ELSE
        v_bound := p_now - v_cfg.ttl_expire_after_seconds * interval '1 second';
        v_count := (SELECT count(*) FROM purge_private.ttl_expired(p_now, v_cfg) e WHERE NOT e.postponed);
    END IF;
    INSERT INTO purge.reports AS r (execution_date, mode, retention_period, retention_period_lower_bound, terminal_unit_of_works_only,
                                    archived_dependent_journey_types, unit_of_works_to_delete, started_at)
    VALUES (v_date, v_cfg.mode, purge_private.iso_period(v_period), v_bound, v_cfg.terminal_unit_of_works_only,
            v_cfg.archived_dependent_journey_types, v_count, p_now)
    ON CONFLICT (execution_date) DO NOTHING
    RETURNING r.* INTO v_r;
    IF FOUND THEN
        PERFORM purge_private.publish('started', v_r);
        RETURN v_r;
    END IF;
    SELECT * INTO v_r FROM purge.reports r WHERE r.execution_date = v_date;
    RETURN v_r;
END
$$;
COMMENT ON FUNCTION purge_private.report_open(timestamptz) IS
    'The report of the execution date of p_now, created when there is none yet (ON CONFLICT: two runs make one) with the configuration of purge.config, the lower bound and how many units of work are to be deleted (STANDARD: those meeting the criteria; TTL: those expired and not postponed), startedAt p_now; publishes kind started on channel purge when it creates it. Raises nothing of its own.';

CREATE FUNCTION purge_private.claim(p_report purge.reports, p_limit integer)
RETURNS text[]
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    v_ids text[];
BEGIN
    v_ids := ARRAY(
        SELECT u.id FROM ods.unit_of_works u
        WHERE u.finished_at < p_report.retention_period_lower_bound
          AND (u.archived_at IS NOT NULL OR u.journey_type IS NULL OR NOT (u.journey_type = ANY (p_report.archived_dependent_journey_types)))
        ORDER BY u.finished_at
        LIMIT p_limit
        FOR UPDATE SKIP LOCKED);
    IF cardinality(v_ids) < p_limit AND NOT p_report.terminal_unit_of_works_only THEN
        v_ids := v_ids || ARRAY(
            SELECT u.id FROM ods.unit_of_works u
            WHERE u.finished_at IS NULL AND u.started_at < p_report.retention_period_lower_bound
              AND (u.archived_at IS NOT NULL OR u.journey_type IS NULL OR NOT (u.journey_type = ANY (p_report.archived_dependent_journey_types)))
            ORDER BY u.started_at
            LIMIT p_limit - cardinality(v_ids)
            FOR UPDATE SKIP LOCKED);
    END IF;
    RETURN v_ids;
END
$$;
COMMENT ON FUNCTION purge_private.claim(purge.reports, integer) IS
    'Locks and returns the ids of at most p_limit units of work that meet the purge criteria of report p_report (its lower bound, terminal-unit-of-works-only and archived-dependent journey types), oldest first, skipping those another transaction holds. Raises nothing.';

-- The seed's order: every object first, then the unit of work with its Summary (held in its row,
-- so the two go in one row delete); one transaction.
CREATE FUNCTION purge_private.delete_units(p_ids text[], OUT unit_of_works integer, OUT summaries integer, OUT objects bigint)
LANGUAGE plpgsql VOLATILE
AS $$
BEGIN
    DELETE FROM ods.objects o WHERE o.unit_of_work_id = ANY (p_ids);
    GET DIAGNOSTICS objects = ROW_COUNT;
    WITH d AS (DELETE FROM ods.unit_of_works u WHERE u.id = ANY (p_ids) RETURNING u.summary_updated IS NOT NULL AS summary)
    SELECT count(*), count(*) FILTER (WHERE d.summary) INTO unit_of_works, summaries FROM d;
END
$$;
COMMENT ON FUNCTION purge_private.delete_units(text[]) IS
    'Deletes the units of work p_ids whole in the caller''s transaction: their objects, then the units of work with their summaries. Returns how many units of work, summaries and objects went. Raises nothing of its own.';

CREATE FUNCTION purge_private.count_deleted(p_date date, p_now timestamptz, p_units integer, p_summaries integer,
                                            p_objects bigint, p_dropped integer)
RETURNS purge.reports
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    v_r   purge.reports;
    v_old timestamptz;
BEGIN
    SELECT r.progress_published_at INTO v_old FROM purge.reports r WHERE r.execution_date = p_date FOR UPDATE;
    UPDATE purge.reports r
    SET unit_of_works_deleted = r.unit_of_works_deleted + p_units,
        unit_of_works_to_delete = greatest(r.unit_of_works_to_delete, r.unit_of_works_deleted + p_units),
        summaries_deleted = r.summaries_deleted + p_summaries,
        objects_deleted = r.objects_deleted + p_objects,
        dropped_partitions = r.dropped_partitions + p_dropped,
        runs = r.runs + CASE WHEN p_units > 0 OR p_dropped > 0 THEN 1 ELSE 0 END,
        last_run_at = p_now,
        progress_published_at = CASE WHEN (p_units > 0 OR p_dropped > 0)
                                          AND (r.progress_published_at IS NULL OR r.progress_published_at <= p_now - interval '1 second')
                                     THEN p_now ELSE r.progress_published_at END
    WHERE r.execution_date = p_date
    RETURNING r.* INTO v_r;
    IF v_r.progress_published_at IS DISTINCT FROM v_old THEN
        PERFORM purge_private.publish('progress', v_r);
    END IF;
    RETURN v_r;
END
$$;
COMMENT ON FUNCTION purge_private.count_deleted(date, timestamptz, integer, integer, bigint, integer) IS
    'Adds a batch''s deletions to the report of p_date in the caller''s transaction (so they count exactly when they commit): units of work, summaries, objects, dropped partitions, one run at p_now (counted in runs when it deleted or dropped something); unitOfWorksToDelete is raised to unitOfWorksDeleted when more were deleted than first counted. Publishes kind progress on channel purge at most once a second of p_now. Returns the report. Raises nothing of its own.';

CREATE FUNCTION purge_private.close(p_report purge.reports, p_now timestamptz)
RETURNS purge.reports
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    v_r purge.reports;
BEGIN
    UPDATE purge.reports r SET finished_at = greatest(p_now, r.started_at), last_run_at = p_now
    WHERE r.execution_date = p_report.execution_date AND r.finished_at IS NULL
    RETURNING r.* INTO v_r;
    IF FOUND THEN
        PERFORM purge_private.publish('finished', v_r);
        RETURN v_r;
    END IF;
    SELECT * INTO v_r FROM purge.reports r WHERE r.execution_date = p_report.execution_date;
    RETURN v_r;
END
$$;
COMMENT ON FUNCTION purge_private.close(purge.reports, timestamptz) IS
    'Closes report p_report at p_now (finishedAt, hence duration) unless it is closed already, and publishes kind finished on channel purge. Returns the report. Raises nothing.';

CREATE FUNCTION api.purge_batch(p_now timestamptz DEFAULT now(), p_limit integer DEFAULT NULL,
                                OUT execution_date date, OUT unit_of_works_deleted integer, OUT summaries_deleted integer,
                                OUT objects_deleted bigint, OUT finished boolean)
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    v_limit integer := coalesce(p_limit, (purge_private.config()).fetch_size);
    v_r     purge.reports;
    v_ids   text[];
    v_del   record;
BEGIN
    IF p_now IS NULL THEN
        RAISE EXCEPTION 'the time of the run must not be null' USING ERRCODE = 'SLINV';
    END IF;
    IF v_limit NOT BETWEEN 1 AND 100000 THEN
        RAISE EXCEPTION 'a batch deletes 1 to 100000 units of work, got %', v_limit USING ERRCODE = 'SLINV';
    END IF;
    v_r := purge_private.report_open(p_now);
    IF v_r.mode <> 'STANDARD' THEN
        RAISE EXCEPTION 'the purge of % runs in % mode', v_r.execution_date, v_r.mode USING ERRCODE = 'SPMOD',
            HINT = 'api.purge_run runs the mode of the day''s report; api.purge_ttl_run runs TTL mode';
    END IF;
    execution_date := v_r.execution_date;
    unit_of_works_deleted := 0;
    summaries_deleted := 0;
    objects_deleted := 0;
    finished := v_r.finished_at IS NOT NULL;
    IF finished THEN
        RETURN;
    END IF;
    v_ids := purge_private.claim(v_r, v_limit);
    IF cardinality(v_ids) = 0 THEN
        IF purge_private.count_eligible(v_r.retention_period_lower_bound, v_r.terminal_unit_of_works_only,
                                        v_r.archived_dependent_journey_types) = 0 THEN
            PERFORM purge_private.close(v_r, p_now);
            finished := true;
        END IF;
        RETURN;
    END IF;
    v_del := purge_private.delete_units(v_ids);
    unit_of_works_deleted := v_del.unit_of_works;
    summaries_deleted := v_del.summaries;
    objects_deleted := v_del.objects;
    PERFORM purge_private.count_deleted(v_r.execution_date, p_now, v_del.unit_of_works, v_del.summaries, v_del.objects, 0);
END
$$;
COMMENT ON FUNCTION api.purge_batch(timestamptz, integer) IS
    'One STANDARD purge batch as of p_now (default now()), in the caller''s transaction: opens the report of p_now''s UTC date if there is none (purge_private.report_open, with the configuration of purge.config), claims at most p_limit (default NULL: the configured fetch-size; 1 to 100000) units of work meeting the report''s criteria that no concurrent batch holds (FOR UPDATE SKIP LOCKED), deletes each one''s objects, then the units of work with their summaries, and adds the counts to the report in the same transaction; when it claims none and none is left, closes the report at p_now. Returns execution_date, unit_of_works_deleted, summaries_deleted, objects_deleted, finished (the report is closed). Publishes on channel purge: started, progress (at most once a second), finished. Raises SLINV (p_now NULL, p_limit outside 1..100000), SPMOD (the day''s report runs in TTL mode).';

CREATE FUNCTION api.purge_tick(p_now timestamptz DEFAULT now(),
                               OUT enabled boolean, OUT mode text, OUT batch_sizes integer[], OUT frequency_ms bigint,
                               OUT execution_date date, OUT finished boolean, OUT due boolean)
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    v_cfg purge.config := purge_private.config();
    v_r   purge.reports;
BEGIN
    IF p_now IS NULL THEN
        RAISE EXCEPTION 'the time of the run must not be null' USING ERRCODE = 'SLINV';
    END IF;
    enabled := v_cfg.enabled;
    mode := v_cfg.mode;
    batch_sizes := purge_private.batch_sizes(v_cfg.fetch_size, v_cfg.parallelism);
    frequency_ms := (extract(epoch FROM purge_private.time_period(v_cfg.frequency)) * 1000)::bigint;
    finished := false;
    due := false;
    IF enabled THEN
        v_r := purge_private.report_open(p_now);
        mode := v_r.mode;
        execution_date := v_r.execution_date;
        finished := v_r.finished_at IS NOT NULL;
        due := v_r.last_run_at IS NULL OR v_r.last_run_at + purge_private.time_period(v_cfg.frequency) <= p_now
               OR v_r.last_run_at > p_now;
    END IF;
END
$$;
COMMENT ON FUNCTION api.purge_tick(timestamptz) IS
    'What silo work''s recurring purge does now (p_now, default now()): enabled (purge.config), mode (of the day''s report when enabled, else the configured one), batch_sizes (fetch-size split into parallelism batches, purge_private.batch_sizes), frequency_ms, and when enabled execution_date, finished (the day''s report is closed) and due (no batch ran within the last frequency before p_now), after opening the day''s report if there is none. Publishes kind started on channel purge when it opens one. Raises SLINV when p_now is NULL.';

CREATE FUNCTION api.purge_run(p_now timestamptz DEFAULT now())
RETURNS jsonb
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    v_cfg  purge.config := purge_private.config();
    v_r    purge.reports;
    v_size integer;
    v_b    record;
BEGIN
    IF p_now IS NULL THEN
        RAISE EXCEPTION 'the time of the run must not be null' USING ERRCODE = 'SLINV';
    END IF;
    v_r := purge_private.report_open(p_now);
    IF v_r.mode = 'TTL' THEN
        PERFORM api.purge_ttl_run(p_now);
    ELSE
        FOREACH v_size IN ARRAY purge_private.batch_sizes(v_cfg.fetch_size, v_cfg.parallelism) LOOP
            v_b := api.purge_batch(p_now, v_size);
            EXIT WHEN v_b.finished OR v_b.unit_of_works_deleted = 0;
        END LOOP;
    END IF;
    SELECT * INTO v_r FROM purge.reports r WHERE r.execution_date = v_r.execution_date;
    RETURN purge_private.report_doc(v_r);
END
$$;
COMMENT ON FUNCTION api.purge_run(timestamptz) IS
    'One recurring purge run as of p_now (default now()), from psql, whatever purge.config says of enabled: opens the day''s report if needed, then in STANDARD mode runs the batches of fetch-size split by parallelism one after the other (api.purge_batch; silo work runs them concurrently, each in its own transaction), stopping early when one deletes nothing; in TTL mode runs api.purge_ttl_run. Returns the day''s report (api.purge_report''s fields). Raises SLINV when p_now is NULL.';
