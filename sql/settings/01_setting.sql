-- Settings: rows of silo.settings (key, value, description) that a DBA reads and changes with plain
-- SQL. Each domain adds its keys in its migration and reads them at run time through
-- settings_private.setting and settings_private.setting_interval.

CREATE SCHEMA settings_private;
COMMENT ON SCHEMA settings_private IS 'Internals of settings (sql/settings/): not a public contract. Rebuilt with schema api.';

-- settings_private.setting: the value of setting p_key, or p_default when the row is missing.
-- Raises: nothing.
CREATE FUNCTION settings_private.setting(p_key text, p_default text)
RETURNS text
LANGUAGE sql STABLE
AS $$
    SELECT coalesce((SELECT s.value FROM silo.settings s WHERE s.key = p_key), p_default);
$$;
COMMENT ON FUNCTION settings_private.setting(text, text) IS
    'The value of silo.settings key p_key, or p_default when there is no such row.';

-- settings_private.setting_interval: setting p_key as an interval (p_default when the row is missing); for
-- retention settings, which may not be negative.
-- Raises: SLINV when the value is not an interval or is negative.
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
    'The value of silo.settings key p_key (p_default when missing) as a non-negative interval. Raises SLINV when it is not an interval or is negative.';
