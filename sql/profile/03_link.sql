-- Profile store, profile links: a _profile_link stores the id it links to as the _latest value of
-- (correlation id, profile_link, /new), and every other update for a linked id is applied to the
-- final target of its links (the rules are in the header of sql/profile/01_types.sql). Links are
-- followed at write time through those rows; validation resolves an update's target only when its
-- id has a link row, so the usual unlinked id costs one primary key probe.

-- PL/pgSQL rather than a recursive query: it runs once per update that needs it (a linked id, a
-- _profile_link) and keeps its plan cached. It returns the whole chain, not only its end, so that
-- profile_private.apply_general can tell whether a _profile_link would close a cycle (SPLNK). With
-- p_readers it stops at a link the caller may not read: a link's target is its value, and a caller
-- learns it only when it may read the link grain.
CREATE FUNCTION profile_private.link_chain(p_id text, p_readers text[] DEFAULT NULL)
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
          AND p.path = '/new' AND p.pit = '_latest'
          AND (p_readers IS NULL OR p.reader = ANY (p_readers));
        EXIT WHEN NOT FOUND OR v_next IS NULL OR v_next = ANY (v_chain);
        v_chain := v_chain || v_next;
    END LOOP;
    RETURN v_chain;
END
$$;
COMMENT ON FUNCTION profile_private.link_chain(text, text[]) IS
    'The correlation ids reached from p_id by following profile links (the _latest values of the rows profile_link, /new), p_id first, stopping before an id already in the chain, so a cycle ends it. p_readers (default NULL: every link): follow only links whose reader is one of these, so the chain ends before a link the caller may not read. Raises nothing.';

-- Readers are the caller's, as in the read functions: the HTTP layer passes a token's, a DBA
-- leaves them out and follows every link.
CREATE FUNCTION api.profile_link_resolve(p_correlation_id text, p_readers text[] DEFAULT NULL)
RETURNS text
LANGUAGE plpgsql STABLE
AS $$
DECLARE
    v_chain text[];
BEGIN
    IF p_correlation_id IS NULL THEN
        RETURN NULL;
    END IF;
    v_chain := profile_private.link_chain(p_correlation_id, p_readers);
    RETURN v_chain[cardinality(v_chain)];
END
$$;
COMMENT ON FUNCTION api.profile_link_resolve(text, text[]) IS
    'The correlation id that profile updates for p_correlation_id (required, no default) are applied to: the final target of its profile links, followed transitively (a cycle ends the chain before the first id seen twice); p_correlation_id itself when it is not linked; NULL for NULL. p_readers (default NULL: every link, as a DBA sees them): follow only the links whose link grain (profile type profile_link, path /new, _latest) has one of these readers, so the answer is the id as far as such a caller may follow the links (p_correlation_id itself when it may not read its link). Returns text. Reads only: raises no SQLSTATE of its own, notifies nothing.';

-- The correlation id a write result may show a caller with readers p_readers: updates for a linked
-- id are written to the link target, and the caller learns that target only as far as it may read
-- the links. Called only for results whose target is not the id as sent (a linked id), which the
-- usual batch has none of.
CREATE FUNCTION profile_private.link_target_for(p_id text, p_target text, p_readers text[])
RETURNS text
LANGUAGE plpgsql STABLE
AS $$
DECLARE
    v_chain text[];
BEGIN
    IF p_readers IS NULL OR p_id IS NULL OR p_target IS NULL OR p_target = p_id THEN
        RETURN p_target;
    END IF;
    v_chain := profile_private.link_chain(p_id, p_readers);
    RETURN CASE WHEN p_target = ANY (v_chain) THEN p_target ELSE v_chain[cardinality(v_chain)] END;
END
$$;
COMMENT ON FUNCTION profile_private.link_target_for(text, text, text[]) IS
    'The correlation id a caller with readers p_readers is told for an update of p_id written to p_target: p_target when p_readers is NULL, when p_target is p_id (or either is NULL), or when the caller may read every link from p_id to p_target; otherwise the id its readable links lead to (profile_private.link_chain with p_readers). Raises nothing.';
