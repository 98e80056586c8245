-- Settings: rows of silo.settings (key, value, description) that a DBA reads and changes with plain
-- SQL. Each domain adds its keys in its migration and reads them through api.setting at run time.

-- api.setting: the value of setting p_key, or p_default when the row is missing.
-- Raises: nothing.
CREATE FUNCTION api.setting(p_key text, p_default text)
RETURNS text
LANGUAGE sql STABLE
AS $$
    SELECT coalesce((SELECT s.value FROM silo.settings s WHERE s.key = p_key), p_default);
$$;
COMMENT ON FUNCTION api.setting(text, text) IS
    'The value of silo.settings key p_key, or p_default when there is no such row.';
