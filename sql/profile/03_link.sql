-- profile_private.link_chain: internal. The correlation ids reached from p_id by following profile
-- links (rows profile_link, /new, _latest), p_id first; stops before an id already in the chain.
-- PL/pgSQL rather than a recursive query: it runs once per update and keeps its plan cached.
-- Raises: nothing.
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
    'Internal: the chain of correlation ids reached from p_id through profile links, p_id first, stopping before any id already in the chain (cycle protection).';

-- api.profile_link_resolve: the correlation id that updates for p_correlation_id are applied to:
-- the final target of its profile links, followed transitively with cycle protection; the id
-- itself when it is not linked (NULL for NULL).
-- Raises: nothing.
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
    'The final target of the profile links of p_correlation_id (followed transitively, with cycle protection); the id itself when it is not linked.';
