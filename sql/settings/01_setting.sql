-- Settings: rows of silo.settings (key, value, description) that a DBA reads and changes with plain
-- SQL. Each domain adds its keys in its migration and reads them at run time through
-- settings_private.setting and settings_private.setting_interval, at every call and never cached,
-- so that an UPDATE takes effect with the next call and needs no restart. (They are not the
-- PostgreSQL settings silo.change_notify and the like, which belong to sessions and databases.)

CREATE SCHEMA settings_private;
COMMENT ON SCHEMA settings_private IS 'Internals of settings (sql/settings/): not a public contract. Rebuilt with schema api.';

-- PL/pgSQL, so that its lookup is planned once a connection: a SQL function with a subquery is not
-- inlined, and PostgreSQL plans its body again at every call (about 60 µs, against a few here).
CREATE FUNCTION settings_private.setting(p_key text, p_default text)
RETURNS text
LANGUAGE plpgsql STABLE
AS $$
BEGIN
    RETURN coalesce((SELECT s.value FROM silo.settings s WHERE s.key = p_key), p_default);
END
$$;
COMMENT ON FUNCTION settings_private.setting(text, text) IS
    'The value (text) of silo.settings key p_key, or p_default when there is no such row. Raises nothing.';

-- A bad value raises rather than falling back to p_default: a retention a DBA mistyped must show,
-- not be silently replaced. For a value that is no interval, the hint gives the UPDATE that restores
-- the default.
CREATE FUNCTION settings_private.setting_interval(p_key text, p_default text)
RETURNS interval
LANGUAGE plpgsql STABLE
AS $$
DECLARE
    v_value text := settings_private.setting(p_key, p_default);
    v_interval interval;
BEGIN
    BEGIN
        v_interval := v_value::interval;
    EXCEPTION WHEN invalid_datetime_format OR datetime_field_overflow OR interval_field_overflow THEN
        RAISE EXCEPTION 'setting % is not an interval: %', p_key, v_value
            USING ERRCODE = 'SLINV', HINT = format('UPDATE silo.settings SET value = %L WHERE key = %L', p_default, p_key);
    END;
    IF v_interval < interval '0' THEN
        RAISE EXCEPTION 'setting % must not be negative, got %', p_key, v_value USING ERRCODE = 'SLINV';
    END IF;
    RETURN v_interval;
END
$$;
COMMENT ON FUNCTION settings_private.setting_interval(text, text) IS
    'The value of silo.settings key p_key as a non-negative interval, for retention settings; p_default (interval text, e.g. 24 hours) when there is no such row. Raises SLINV when the value is not an interval or is negative.';
