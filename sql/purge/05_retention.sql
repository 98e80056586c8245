-- Retention: one mechanism for every kind of time-ordered data (purge.retention_targets). Each
-- target's retention is read from silo.settings at every run and handed to its trim function with
-- the run's time; the function drops whole partitions or chunks (partition_private.drop_older) of
-- a time-partitioned table, or deletes the rows of a small one. An empty setting hands it NULL: a
-- target with retentions of its own (series points, per user and per series) then applies those
-- alone; the others read their setting and refuse it. A target that fails is recorded and costs
-- the others nothing (a subtransaction each).

CREATE VIEW api.retention_results AS
SELECT NULL::text AS target, NULL::text AS setting, NULL::interval AS retention, NULL::timestamptz AS cutoff,
       NULL::jsonb AS result, NULL::text AS sqlstate, NULL::text AS message
WHERE false;
COMMENT ON VIEW api.retention_results IS
    'Always empty: the row type of api.retention_run. target: the row of purge.retention_targets; setting: its silo.settings key; retention: the value applied (NULL for an empty setting); cutoff: the run''s time minus the retention; result: what its trim function returned, as JSON (NULL when it failed); sqlstate and message: why it failed.';

CREATE FUNCTION api.retention_run(p_now timestamptz DEFAULT now(), p_target text DEFAULT NULL)
RETURNS SETOF api.retention_results
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    v_t      purge.retention_targets;
    v_ret    interval;
    v_result jsonb;
    v_state  text;
    v_msg    text;
BEGIN
    IF p_now IS NULL THEN
        RAISE EXCEPTION 'the time of the run must not be null' USING ERRCODE = 'SLINV';
    END IF;
    IF p_target IS NOT NULL AND NOT EXISTS (SELECT FROM purge.retention_targets r WHERE r.name = p_target) THEN
        RAISE EXCEPTION 'no retention target %', p_target USING ERRCODE = 'SLNFD',
            HINT = 'SELECT name FROM purge.retention_targets';
    END IF;
    FOR v_t IN SELECT * FROM purge.retention_targets r
               WHERE (p_target IS NULL AND r.enabled) OR r.name = p_target ORDER BY r.name LOOP
        v_ret := NULL;
        v_result := NULL;
        v_state := NULL;
        v_msg := NULL;
        BEGIN
            IF btrim(settings_private.setting(v_t.setting, v_t.default_value)) <> '' THEN
                v_ret := settings_private.setting_interval(v_t.setting, v_t.default_value);
            END IF;
            EXECUTE format('SELECT to_jsonb(t) FROM %s($1, $2) AS t', v_t.trim_function) INTO v_result USING v_ret, p_now;
        EXCEPTION WHEN OTHERS THEN
            GET STACKED DIAGNOSTICS v_state = RETURNED_SQLSTATE, v_msg = MESSAGE_TEXT;
        END;
        UPDATE purge.retention_targets r
        SET last_run_at = p_now, last_result = v_result,
            last_error = CASE WHEN v_state IS NOT NULL THEN v_state || ': ' || v_msg END
        WHERE r.name = v_t.name;
        RETURN NEXT ROW(v_t.name, v_t.setting, v_ret, p_now - v_ret, v_result, v_state, v_msg)::api.retention_results;
    END LOOP;
END
$$;
COMMENT ON FUNCTION api.retention_run(timestamptz, text) IS
    'Applies the retention of every enabled target of purge.retention_targets (or only p_target, enabled or not; default NULL: all) as of p_now (default now()): reads its retention from silo.settings (its default_value when the key is absent; an empty value passes NULL: series then apply only their per-user and per-series retentions, the other targets refuse it) and calls its trim function with it and p_now, each in a subtransaction, so a failing target is recorded and the others go on. Records last_run_at, last_result, last_error. Returns one api.retention_results row per target, by name. Run periodically by silo work''s retention job; from psql at will. Raises SLINV when p_now is NULL, SLNFD when p_target names no target.';
