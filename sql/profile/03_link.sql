-- Profile store, profile links: a _profile_link stores the id it links to as the _latest value of
-- (correlation id, profile_link, /new), and every other update for a linked id is applied to the
-- final target of its links (the rules are in the header of sql/profile/01_types.sql). Links are
-- followed at write time through those rows; validation resolves an update's target only when its
-- id has a link row, so the usual unlinked id costs one primary key probe.

-- PL/pgSQL rather than a recursive query: it runs once per update that needs it (a linked id, a
-- _profile_link) and keeps its plan cached. It returns the whole chain, not only its end, so that
-- profile_private.apply_general can tell whether a _profile_link would close a cycle (SPLNK).
CREATE FUNCTION profile_private.link_chain(p_id text)
RETURNS text[]
LANGUAGE plpgsql STABLE
AS $$
DECLARE
    v_chain text[] := ARRAY[p_id];
    v_next  text;
BEGIN
    LOOP
        SELECT p.value #>> '{}' INTO v_next
        FROM profile.profilestore p
        WHERE p.correlation_id = v_chain[cardinality(v_chain)] AND p.profile_type = 'profile_link'
          AND p.path = '/new' AND p.pit = '_latest';
        EXIT WHEN NOT FOUND OR v_next IS NULL OR v_next = ANY (v_chain);
        v_chain := v_chain || v_next;
    END LOOP;
    RETURN v_chain;
END
$$;
COMMENT ON FUNCTION profile_private.link_chain(text) IS
    'The correlation ids reached from p_id by following profile links (the _latest values of the rows profile_link, /new), p_id first, stopping before an id already in the chain, so a cycle ends it. Raises nothing.';

CREATE FUNCTION api.profile_link_resolve(p_correlation_id text)
RETURNS text
LANGUAGE plpgsql STABLE
AS $$
DECLARE
    v_chain text[];
BEGIN
    IF p_correlation_id IS NULL THEN
        RETURN NULL;
    END IF;
    v_chain := profile_private.link_chain(p_correlation_id);
    RETURN v_chain[cardinality(v_chain)];
END
$$;
COMMENT ON FUNCTION api.profile_link_resolve(text) IS
    'The correlation id that profile updates for p_correlation_id (required, no default) are applied to: the final target of its profile links, followed transitively (a cycle ends the chain before the first id seen twice); p_correlation_id itself when it is not linked; NULL for NULL. Returns text. Reads only: raises no SQLSTATE of its own, notifies nothing.';
