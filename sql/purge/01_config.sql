-- Purge, configuration: the seed's keys in one row of purge.config, periods in the seed's forms
-- and in ISO-8601, and the retention period's lower bound.
--
-- Periods. The seed has two kinds: retention-period is date-based (1Y, 1M = a month, 1W; its
-- Spanish text writes 1A = año and 1S = semana) and frequency is time-based (2s, 1m = a minute; its
-- Spanish text writes 2S = segundos). So M is a month in one and a minute in the other, and S a week
-- in one and a second in the other: each parser reads its own kind only. Both take ISO-8601 too
-- (P2Y, P1W, P1Y6M; PT1S, PT0.5S, PT1M30S) and are case-insensitive.
--
-- The lower bound is the execution date (the UTC date of the run's time) minus the period, at the
-- start of that day in UTC, whatever the session's time zone: a run at 2023-05-17T23:30-05:00 is a
-- run of 2023-05-18.

CREATE SCHEMA purge_private;
COMMENT ON SCHEMA purge_private IS 'Internals of the purge and of retention (sql/purge/): not a public contract. Rebuilt with schema api.';

CREATE FUNCTION purge_private.date_period(p_text text)
RETURNS interval
LANGUAGE sql IMMUTABLE
AS $$
    SELECT CASE WHEN t ~ '^P?([0-9]{1,6}[YAMWSD]){1,4}$' THEN (
               SELECT sum(CASE m[2] WHEN 'Y' THEN m[1]::integer * interval '1 year'
                                    WHEN 'A' THEN m[1]::integer * interval '1 year'
                                    WHEN 'M' THEN m[1]::integer * interval '1 month'
                                    WHEN 'W' THEN m[1]::integer * interval '7 days'
                                    WHEN 'S' THEN m[1]::integer * interval '7 days'
                                    ELSE m[1]::integer * interval '1 day' END)
               FROM regexp_matches(t, '([0-9]+)([YAMWSD])', 'g') AS m)
           END
    FROM (SELECT upper(btrim(p_text)) AS t) x;
$$;
COMMENT ON FUNCTION purge_private.date_period(text) IS
    'The date-based period p_text names, as an interval of years, months and days: one to four nU where U is Y (year; A, the seed''s año), M (month), W (week; S, the seed''s semana) or D (day), n up to six digits, optionally after P (ISO-8601: P2Y, P1Y6M, P1W); case-insensitive. NULL when p_text is none of these. Raises nothing.';

CREATE FUNCTION purge_private.time_period(p_text text)
RETURNS interval
LANGUAGE sql IMMUTABLE
AS $$
    SELECT CASE WHEN t ~ '^(PT)?([0-9]{1,6}(\.[0-9]{1,6})?(MS|D|H|M|S)){1,4}$' AND t !~ '^PT.*(MS|D)' THEN (
               SELECT sum(CASE m[2] WHEN 'MS' THEN m[1]::numeric * interval '1 millisecond'
                                    WHEN 'D' THEN m[1]::numeric * interval '1 day'
                                    WHEN 'H' THEN m[1]::numeric * interval '1 hour'
                                    WHEN 'M' THEN m[1]::numeric * interval '1 minute'
                                    ELSE m[1]::numeric * interval '1 second' END)
               FROM regexp_matches(t, '([0-9]+(?:\.[0-9]+)?)(MS|D|H|M|S)', 'g') AS m)
           END
    FROM (SELECT upper(btrim(p_text)) AS t) x;
$$;
COMMENT ON FUNCTION purge_private.time_period(text) IS
    'The time-based amount p_text names, as an interval: one to four nU where U is MS (milliseconds), S (seconds), M (minutes), H (hours) or D (days), n up to six digits with up to six decimals (1s, 2S, 1m, 500ms, 1m30s), or ISO-8601 PT... with H, M, S (PT1S, PT0.5S, PT1M30S); case-insensitive. NULL when p_text is none of these. Raises nothing.';

-- Java's Period.toString: P2Y, P1Y6M, P7D (weeks are days), P0D.
CREATE FUNCTION purge_private.iso_period(p_period interval)
RETURNS text
LANGUAGE sql IMMUTABLE
AS $$
    SELECT CASE WHEN p_period IS NULL THEN NULL
                WHEN y = 0 AND m = 0 AND d = 0 THEN 'P0D'
                ELSE 'P' || CASE WHEN y <> 0 THEN y || 'Y' ELSE '' END || CASE WHEN m <> 0 THEN m || 'M' ELSE '' END
                         || CASE WHEN d <> 0 THEN d || 'D' ELSE '' END END
    FROM (SELECT extract(year FROM p_period)::integer AS y, extract(month FROM p_period)::integer AS m,
                 extract(day FROM p_period)::integer AS d) x;
$$;
COMMENT ON FUNCTION purge_private.iso_period(interval) IS
    'Date-based p_period in ISO-8601 as Java''s Period writes it (P2Y, P1Y6M, P7D, P0D); NULL for NULL. Raises nothing.';

-- Java's Duration.toString: PT32M1.01S, PT48H, PT0S; hours are not folded into days.
CREATE FUNCTION purge_private.iso_duration(p_duration interval)
RETURNS text
LANGUAGE sql IMMUTABLE
AS $$
    SELECT CASE WHEN s IS NULL THEN NULL
                WHEN s = 0 THEN 'PT0S'
                ELSE 'PT' || CASE WHEN h <> 0 THEN h || 'H' ELSE '' END || CASE WHEN mi <> 0 THEN mi || 'M' ELSE '' END
                     || CASE WHEN sec <> 0 THEN rtrim(rtrim(to_char(sec, 'FM999999990.000000'), '0'), '.') || 'S' ELSE '' END END
    FROM (SELECT s, trunc(s / 3600)::bigint AS h, trunc(mod(s, 3600) / 60)::bigint AS mi, mod(s, 60) AS sec
          FROM (SELECT extract(epoch FROM p_duration) AS s) y) x;
$$;
COMMENT ON FUNCTION purge_private.iso_duration(interval) IS
    'p_duration in ISO-8601 as Java''s Duration writes it (PT32M1.01S, PT48H, PT0S), microseconds at most; NULL for NULL. Raises nothing.';

CREATE FUNCTION purge_private.execution_date(p_now timestamptz)
RETURNS date
LANGUAGE sql IMMUTABLE
AS $$
    SELECT (p_now AT TIME ZONE 'UTC')::date;
$$;
COMMENT ON FUNCTION purge_private.execution_date(timestamptz) IS
    'The execution date of a run at p_now: its date in UTC, whatever the session''s time zone. Raises nothing.';

CREATE FUNCTION purge_private.lower_bound(p_now timestamptz, p_retention interval)
RETURNS timestamptz
LANGUAGE sql IMMUTABLE
AS $$
    SELECT date_trunc('day', purge_private.execution_date(p_now) - p_retention) AT TIME ZONE 'UTC';
$$;
COMMENT ON FUNCTION purge_private.lower_bound(timestamptz, interval) IS
    'The retention period''s lower bound of a run at p_now: its execution date minus p_retention, at the start of that day in UTC (2023-05-17 with P2Y: 2021-05-17T00:00:00Z). A month back from the 31st is the last day of the shorter month. Raises nothing.';

CREATE FUNCTION purge_private.config()
RETURNS purge.config
LANGUAGE sql STABLE
AS $$
    SELECT c FROM purge.config c;
$$;
COMMENT ON FUNCTION purge_private.config() IS
    'The row of purge.config. Raises nothing.';

CREATE FUNCTION purge_private.config_doc(p_config purge.config)
RETURNS jsonb
LANGUAGE sql IMMUTABLE
AS $$
    SELECT jsonb_build_object(
        'enabled', p_config.enabled, 'mode', p_config.mode, 'retention-period', p_config.retention_period,
        'terminal-unit-of-works-only', p_config.terminal_unit_of_works_only,
        'archived-dependent-journey-types', to_jsonb(p_config.archived_dependent_journey_types),
        'frequency', p_config.frequency, 'fetch-size', p_config.fetch_size, 'parallelism', p_config.parallelism,
        'ttl-expire-after-seconds', p_config.ttl_expire_after_seconds,
        'retentionPeriod', purge_private.iso_period(purge_private.date_period(p_config.retention_period)),
        'frequencyMillis', (extract(epoch FROM purge_private.time_period(p_config.frequency)) * 1000)::bigint,
        'updated', ods_private.iso(p_config.updated));
$$;
COMMENT ON FUNCTION purge_private.config_doc(purge.config) IS
    'p_config as the JSON object api.purge_config answers. Raises nothing.';

-- A DBA's UPDATE goes through the same checks as api.purge_config_set.
CREATE FUNCTION purge_private.tg_config__check()
RETURNS trigger
LANGUAGE plpgsql
AS $$
BEGIN
    IF purge_private.date_period(NEW.retention_period) IS NULL
       OR purge_private.date_period(NEW.retention_period) NOT BETWEEN interval '1 day' AND interval '1000 years' THEN
        RAISE EXCEPTION 'retention-period must be a date-based period from a day to 1000 years, got %', NEW.retention_period
            USING ERRCODE = 'SPPER', HINT = 'nY, nM, nW or nD (2Y, 6M, 1W), or ISO-8601 (P2Y, P1Y6M)';
    END IF;
    IF purge_private.time_period(NEW.frequency) IS NULL
       OR purge_private.time_period(NEW.frequency) NOT BETWEEN interval '10 milliseconds' AND interval '1 day' THEN
        RAISE EXCEPTION 'frequency must be a time-based amount from 10ms to 1 day, got %', NEW.frequency
            USING ERRCODE = 'SPPER', HINT = 'ns, nm, nh or nms (1s, 2S, 1m, 500ms), or ISO-8601 (PT1S, PT0.5S)';
    END IF;
    NEW.updated := now();
    RETURN NEW;
END
$$;
COMMENT ON FUNCTION purge_private.tg_config__check() IS
    'Trigger of purge.config: refuses a retention_period that is no date-based period from a day to 1000 years and a frequency that is no time-based amount from 10 ms to a day (SPPER), and stamps updated. Raises SPPER.';
CREATE TRIGGER config__check BEFORE INSERT OR UPDATE ON purge.config
    FOR EACH ROW EXECUTE FUNCTION purge_private.tg_config__check();

CREATE FUNCTION api.purge_config()
RETURNS jsonb
LANGUAGE sql STABLE
AS $$
    SELECT purge_private.config_doc(purge_private.config());
$$;
COMMENT ON FUNCTION api.purge_config() IS
    'The purge configuration (purge.config), as GET /purge/config answers it: {"enabled", "mode", "retention-period", "terminal-unit-of-works-only", "archived-dependent-journey-types", "frequency", "fetch-size", "parallelism", "ttl-expire-after-seconds"} as written, plus retentionPeriod (ISO-8601), frequencyMillis and updated. Raises nothing.';

CREATE FUNCTION api.purge_config_set(p_config jsonb)
RETURNS jsonb
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    v_bad text;
    v_c   purge.config;
BEGIN
    IF p_config IS NULL OR jsonb_typeof(p_config) <> 'object' THEN
        RAISE EXCEPTION 'the purge configuration must be a JSON object' USING ERRCODE = 'SPCFG';
    END IF;
    SELECT string_agg(k, ', ') INTO v_bad FROM jsonb_object_keys(p_config) AS k
    WHERE k NOT IN ('enabled', 'mode', 'retention-period', 'terminal-unit-of-works-only', 'archived-dependent-journey-types',
                    'frequency', 'fetch-size', 'parallelism', 'ttl-expire-after-seconds');
    IF v_bad IS NOT NULL THEN
        RAISE EXCEPTION 'unknown purge configuration keys: %', v_bad USING ERRCODE = 'SPCFG',
            HINT = 'keys: enabled, mode, retention-period, terminal-unit-of-works-only, archived-dependent-journey-types, frequency, fetch-size, parallelism, ttl-expire-after-seconds';
    END IF;
    SELECT string_agg(format('%s must be %s', k, want), '; ') INTO v_bad
    FROM (VALUES ('enabled', 'true or false', '{boolean}'::text[]),
                 ('terminal-unit-of-works-only', 'true or false', '{boolean}'),
                 ('mode', 'STANDARD or TTL', '{string}'), ('retention-period', 'a string', '{string}'),
                 ('frequency', 'a string', '{string}'), ('archived-dependent-journey-types', 'an array of strings', '{array}'),
                 ('fetch-size', 'a whole number from 1 to 100000', '{number}'),
                 ('parallelism', 'a whole number from 1 to 64', '{number}'),
                 ('ttl-expire-after-seconds', 'a positive whole number', '{number}')) AS r(k, want, types)
    WHERE p_config ? r.k AND NOT (jsonb_typeof(p_config -> r.k) = ANY (r.types))
       OR (r.k = 'mode' AND p_config ? 'mode' AND NOT coalesce(p_config ->> 'mode' IN ('STANDARD', 'TTL'), false))
       OR (r.k = 'fetch-size' AND jsonb_typeof(p_config -> 'fetch-size') = 'number'
           AND NOT coalesce((p_config ->> 'fetch-size') ~ '^[0-9]{1,6}$' AND (p_config ->> 'fetch-size')::integer BETWEEN 1 AND 100000, false))
       OR (r.k = 'parallelism' AND jsonb_typeof(p_config -> 'parallelism') = 'number'
           AND NOT coalesce((p_config ->> 'parallelism') ~ '^[0-9]{1,2}$' AND (p_config ->> 'parallelism')::integer BETWEEN 1 AND 64, false))
       OR (r.k = 'ttl-expire-after-seconds' AND jsonb_typeof(p_config -> 'ttl-expire-after-seconds') = 'number'
           AND NOT coalesce((p_config ->> 'ttl-expire-after-seconds') ~ '^[1-9][0-9]{0,11}$', false))
       OR (r.k = 'archived-dependent-journey-types' AND jsonb_typeof(p_config -> r.k) = 'array'
           AND EXISTS (SELECT FROM jsonb_array_elements(p_config -> r.k) e
                       WHERE NOT coalesce(e #>> '{}' IN ('PAYMENT', 'RECALL', 'BULK', 'BATCH') AND jsonb_typeof(e) = 'string', false)));
    IF v_bad IS NOT NULL THEN
        RAISE EXCEPTION 'invalid purge configuration: %', v_bad USING ERRCODE = 'SPCFG',
            HINT = 'archived-dependent-journey-types takes PAYMENT, RECALL, BULK and BATCH';
    END IF;

    UPDATE purge.config c SET
        enabled = coalesce((p_config ->> 'enabled')::boolean, c.enabled),
        mode = coalesce(p_config ->> 'mode', c.mode),
        retention_period = coalesce(btrim(p_config ->> 'retention-period'), c.retention_period),
        terminal_unit_of_works_only = coalesce((p_config ->> 'terminal-unit-of-works-only')::boolean, c.terminal_unit_of_works_only),
        archived_dependent_journey_types = CASE WHEN p_config ? 'archived-dependent-journey-types' THEN
            (SELECT coalesce(array_agg(DISTINCT e ORDER BY e), '{}') FROM jsonb_array_elements_text(p_config -> 'archived-dependent-journey-types') e)
            ELSE c.archived_dependent_journey_types END,
        frequency = coalesce(btrim(p_config ->> 'frequency'), c.frequency),
        fetch_size = coalesce((p_config ->> 'fetch-size')::integer, c.fetch_size),
        parallelism = coalesce((p_config ->> 'parallelism')::integer, c.parallelism),
        ttl_expire_after_seconds = coalesce((p_config ->> 'ttl-expire-after-seconds')::bigint, c.ttl_expire_after_seconds)
    RETURNING c.* INTO v_c;
    PERFORM api.change_publish('purge', 'config', jsonb_build_object('updated', ods_private.iso(v_c.updated)), '{}');
    RETURN purge_private.config_doc(v_c);
END
$$;
COMMENT ON FUNCTION api.purge_config_set(jsonb) IS
    'Changes the purge configuration (PUT /purge/config, admins): p_config is a JSON object with any of the keys of api.purge_config (enabled, mode, retention-period, terminal-unit-of-works-only, archived-dependent-journey-types, frequency, fetch-size, parallelism, ttl-expire-after-seconds); the keys given replace their values, the others stay. Takes effect at the next run; the report of a day already started keeps the configuration it started with. Publishes kind config on channel purge. Returns the new configuration as api.purge_config. Raises SPCFG (not an object, an unknown key, a value of the wrong type or range, a journey type not PAYMENT, RECALL, BULK or BATCH) and SPPER (a retention-period or frequency that is no period of its kind).';

CREATE FUNCTION api.purge_lower_bound(p_now timestamptz DEFAULT now(), p_retention_period text DEFAULT NULL)
RETURNS timestamptz
LANGUAGE plpgsql STABLE
AS $$
DECLARE
    v_text   text := coalesce(p_retention_period, (purge_private.config()).retention_period);
    v_period interval := purge_private.date_period(v_text);
BEGIN
    IF v_period IS NULL OR v_period NOT BETWEEN interval '1 day' AND interval '1000 years' OR p_now IS NULL THEN
        RAISE EXCEPTION 'retention period must be a date-based period from a day to 1000 years, got %', v_text
            USING ERRCODE = 'SPPER', HINT = 'nY, nM, nW or nD (2Y, 6M, 1W), or ISO-8601 (P2Y, P1Y6M); p_now must not be null';
    END IF;
    RETURN purge_private.lower_bound(p_now, v_period);
END
$$;
COMMENT ON FUNCTION api.purge_lower_bound(timestamptz, text) IS
    'The retention period''s lower bound of a purge run at p_now (default now()) with retention period p_retention_period (default NULL: the configured one): the UTC date of p_now minus the period, at the start of that day in UTC. Raises SPPER when the period is no date-based period from a day to 1000 years, or p_now is NULL.';
