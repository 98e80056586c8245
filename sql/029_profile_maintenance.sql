-- Profile store maintenance run by River periodic jobs (worker/).

-- api.profile_dead_letter_trim: deletes dead letters that a replay resolved longer than
-- p_retention ago, and returns how many. Unresolved dead letters are never trimmed: they are data
-- waiting for a replay.
CREATE FUNCTION api.profile_dead_letter_trim(p_retention interval)
RETURNS bigint
LANGUAGE sql VOLATILE
AS $$
    WITH gone AS (
        DELETE FROM profile.dead_letters d
        WHERE d.resolved IS NOT NULL AND d.resolved < now() - p_retention
        RETURNING 1
    )
    SELECT count(*) FROM gone;
$$;
COMMENT ON FUNCTION api.profile_dead_letter_trim(interval) IS
    'Deletes dead letters resolved (successfully replayed) more than p_retention ago; returns the count. Unresolved dead letters are kept until replayed.';
