-- Change notifications, sequencing: committed pending changes become the numbered change log
-- (silo.changes), one run at a time, so that the order of ids is the order in which changes became
-- visible. Pending rows cannot serve as resume positions themselves: their identity values are
-- handed out in insert order, not commit order, so a subscriber resuming after one could miss a
-- change that committed later with a smaller value. The websocket hub of every Silo process calls
-- api.change_sequence when it hears silo_change_pending (and once a second), then
-- api.change_announce. Compact rows of profile changes are expanded here, off the write path.

-- A set-returning SQL function of two exclusive branches, so that api.change_sequence and
-- api.changes_pending expand every pending row within one statement (CROSS JOIN LATERAL). grains is
-- a two-dimensional array; unnest of its four one-row slices yields the aligned columns.
CREATE FUNCTION change_private.expand(p_channel text, p_kind text, p_payload jsonb, p_readers text[], p_grains text[])
RETURNS TABLE (ord bigint, channel text, kind text, payload jsonb, readers text[])
LANGUAGE sql STABLE
AS $$
    SELECT 1::bigint, p_channel, p_kind, p_payload, p_readers
    WHERE p_channel <> 'profile:*'
    UNION ALL
    SELECT row_number() OVER (ORDER BY g.c, g.t, g.r), 'profile:' || g.t || ':' || g.c, p_kind,
           jsonb_build_object('profile_type', g.t, 'correlation_id', g.c, 'paths', to_jsonb(g.paths)),
           ARRAY[g.r]
    FROM (
        SELECT x.c, x.t, x.r, array_agg(DISTINCT x.p) AS paths
        FROM unnest(p_grains[1:1], p_grains[2:2], p_grains[3:3], p_grains[4:4]) AS x(c, t, r, p)
        WHERE p_channel = 'profile:*'
        GROUP BY x.c, x.t, x.r
    ) g;
$$;
COMMENT ON FUNCTION change_private.expand(text, text, jsonb, text[], text[]) IS
    'The changes a pending row stands for, given its columns (p_channel, p_kind, p_payload, p_readers, p_grains of silo.change_pending), numbered by ord: the row itself (ord 1), or, for a compact row of profile changes (p_channel profile:*), one change per profile and grain reader from p_grains, ordered by correlation id, profile type and reader: channel profile:{type}:{id}, kind p_kind, payload {profile_type, correlation_id, paths: the distinct paths, sorted}, readers {reader}. A compact row without grains stands for nothing. Raises nothing.';

CREATE FUNCTION api.changes_pending()
RETURNS TABLE (pending_id bigint, channel text, kind text, payload jsonb, readers text[], created timestamptz)
LANGUAGE sql STABLE
AS $$
    SELECT p.pending_id, e.channel, e.kind, e.payload, e.readers, p.created
    FROM silo.change_pending p
    CROSS JOIN LATERAL change_private.expand(p.channel, p.kind, p.payload, p.readers, p.grains) e
    ORDER BY p.pending_id, e.ord;
$$;
COMMENT ON FUNCTION api.changes_pending() IS
    'What is pending (the rows of silo.change_pending the caller sees: committed ones and its own), as the changes api.change_sequence will make of them, in the order it numbers them (pending_id, then the order of expansion): compact rows of profile changes expanded into one change per profile and reader. Columns: pending_id (the pending row), channel, kind, payload, readers, created. No arguments; raises nothing.';

-- Runs under a transaction advisory lock, so runs are one at a time: a run starts after the
-- previous one committed, its statements see every change committed before, and its ids are all
-- higher than the previous run's. The order of ids is therefore the order in which changes became
-- visible, and a reader of "every change after id N" misses none. The ids of a run are drawn as one
-- block (setval under the lock), so they follow pending_id order exactly.
-- Its transaction must commit synchronously (synchronous_commit on, the default; the function does
-- not set it): with synchronous_commit = off, a crash could lose the run (its rows would be
-- sequenced again, which is harmless) together with the advance of the sequence, which is not: the
-- lost ids could be handed out again to other changes after subscribers had been told of them, and
-- a subscriber resuming from such an id would miss changes.
-- p_notify false exists so that the notification lock PostgreSQL takes at commit (which serializes
-- the commits of every notifying transaction) is not held through this run's WAL flush: Silo
-- processes notify with api.change_announce in a transaction of their own.
CREATE FUNCTION api.change_sequence(p_notify boolean DEFAULT true)
RETURNS bigint
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    v_last   bigint;
    v_called boolean;
    v_n      bigint;
BEGIN
    PERFORM pg_advisory_xact_lock(8316297411674990695);  -- 0x73696c6f2d636867, "silo-chg" in ASCII
    SELECT s.last_value, s.is_called INTO v_last, v_called FROM silo.change_id_seq s;
    IF NOT v_called THEN
        v_last := v_last - 1;  -- a sequence never used: its first value is still to come
    END IF;
    WITH moved AS (
        DELETE FROM silo.change_pending p
        RETURNING p.pending_id, p.channel, p.kind, p.payload, p.readers, p.grains, p.created
    )
    INSERT INTO silo.changes (id, channel, kind, payload, readers, created, sequenced)
    SELECT v_last + row_number() OVER (ORDER BY m.pending_id, e.ord), e.channel, e.kind, e.payload, e.readers,
           m.created, clock_timestamp()
    FROM moved m
    CROSS JOIN LATERAL change_private.expand(m.channel, m.kind, m.payload, m.readers, m.grains) e;
    GET DIAGNOSTICS v_n = ROW_COUNT;
    IF v_n = 0 THEN
        RETURN v_last;
    END IF;
    PERFORM setval('silo.change_id_seq', v_last + v_n);
    IF coalesce(p_notify, true) THEN
        PERFORM pg_notify('silo_changes', (v_last + v_n)::text);
    END IF;
    RETURN v_last + v_n;
END
$$;
COMMENT ON FUNCTION api.change_sequence(boolean) IS
    'Moves the committed rows of silo.change_pending into the change log silo.changes (compact rows of profile changes expanded into one change per profile and reader), numbered from silo.change_id_seq in pending_id order, one run at a time (a transaction advisory lock, held to the end of the caller''s transaction): ids increase in the order changes became visible. p_notify (default true; NULL counts as true): notify silo_changes with the highest id when rows moved; false leaves the notification to api.change_announce in a transaction of its own, as Silo processes do. Returns the highest change id handed out so far (0: none yet). Its transaction must commit synchronously (synchronous_commit on, the default), else a crash could hand announced ids out again. Raises nothing. Called by the websocket hub of every Silo process, and from psql at will (SELECT api.change_sequence();), in a short transaction.';

-- Asynchronous commit: a notifying transaction holds PostgreSQL's notification lock through its
-- commit, and a synchronous commit would hold it through a WAL flush. A lost notification costs at
-- most a poll interval: every process also reads the log once a second.
CREATE FUNCTION api.change_announce(p_last_id bigint)
RETURNS void
LANGUAGE plpgsql VOLATILE
AS $$
BEGIN
    PERFORM set_config('synchronous_commit', 'off', true);
    PERFORM pg_notify('silo_changes', p_last_id::text);
END
$$;
COMMENT ON FUNCTION api.change_announce(bigint) IS
    'Notifies silo_changes with p_last_id, the highest change id (as api.change_sequence(false) returned it), so that the websocket hub of every Silo process reads the new changes; what Silo processes call after api.change_sequence(false) moved changes. Sets synchronous_commit off for the rest of the caller''s transaction, so call it in a transaction of its own. Returns nothing; raises nothing.';
