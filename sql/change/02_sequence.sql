-- Change notifications, sequencing: committed pending changes become the numbered change log
-- (silo.changes), one run at a time, so that the order of ids is the order in which changes became
-- visible. Pending rows cannot serve as resume positions themselves: their identity values are
-- handed out in insert order, not commit order, so a subscriber resuming after one could miss a
-- change that committed later with a smaller value. The websocket hub of every Silo process calls
-- api.change_sequence when it hears silo_change_pending, every few milliseconds while it is awake,
-- and once a second as a safety net. Compact rows of profile changes are expanded here, off the
-- write path.
--
-- Waking the sequencer without making writers wait for each other. PostgreSQL serializes the
-- commits of the transactions that called pg_notify: each holds a database-wide lock from its
-- pre-commit through its commit's WAL flush, so concurrent small writers that all notify lose
-- group commit (measured: half the updates per second at 8 connections × 1 update per call). So a
-- writer notifies only when no hub is awake. A hub that hears writers close together (two
-- notifications within 20 ms, the Go hub's default) becomes awake: it runs api.change_sequence
-- every few milliseconds by itself (5 ms), and goes back to sleep after 20 ms without changes.
-- Writers further apart notify each time, which costs them nothing at such a rate and is the
-- quickest way to their subscribers.
--
-- The state is silo.change_sequencer_awake (an unlogged sequence, migrations/00014): a lease,
-- (until) × 1,000,000 + (hub): the hub numbered hub runs api.change_sequence every few
-- milliseconds until the time until (epoch milliseconds) at least, and renews the lease while it is
-- awake; 0, or a time past: asleep. A sequence because its value is read and written outside
-- transactions: a writer sees the state of the moment, whatever its snapshot. The lease bounds
-- what a hub that dies awake costs.
--
-- A writer (change_private.tg_change_pending__notify, the statement trigger of
-- silo.change_pending, after its statement inserted pending rows):
--   W1 takes the advisory lock "silo-pub" in shared mode, held to the end of its transaction;
--   W2 reads the state (the test of change_private.sequencer_awake): asleep →
--      pg_notify('silo_change_pending'), delivered at commit; awake → nothing;
--   W3 commits: its rows become visible, then its notification (if any) is sent, then its locks
--      are released. Or it rolls back: nothing to deliver, its lock is released.
-- Writers share the lock, so they never wait for each other; W1 and W2 cost a few microseconds.
--
-- A hub (change/sequencer.go) is in one of three states:
-- * asleep: it runs api.change_sequence when it hears silo_change_pending, and once a second. A
--   notification means a writer found nobody awake; when writers come close together, the hub
--   claims the lease (api.change_sequencer_wake, under the advisory lock "silo-awk", which orders
--   the hubs' changes of the state) and is awake, unless another hub holds an unexpired lease.
-- * awake: it runs api.change_sequence every few milliseconds and renews its lease every half
--   lease. After a while without moving a change it calls api.change_sequencer_sleep:
--     S1 (under "silo-awk") another hub holds an unexpired lease: that hub answers for every
--        writer; true (asleep) at once.
--     S2 the state becomes asleep (0): every writer that reads it from now on notifies.
--     S3 tries "silo-pub" in exclusive mode, without waiting (held to the end of the call's
--        transaction when it succeeds): it fails while a writer that passed W1 has not ended;
--        false.
--     S4 in a snapshot taken after S3: pending rows → false; none → true: asleep.
-- * draining (sleep returned false): the state stays asleep, so new writers notify; the hub keeps
--   calling api.change_sequence and api.change_sequencer_sleep, every few milliseconds, backing
--   off to 100 ms while nothing moves, until sleep returns true. A notification meanwhile makes it
--   claim the lease again (awake).
--
-- Why no change waits (every interleaving). Take a writer W whose rows committed and a hub H whose
-- sleep returned true. If W notified, its notification wakes a hub (step 2 of "How a change
-- travels", sql/change/01_publish.sql). If not, W2 read an unexpired lease:
-- a. W1 was granted before H's S3: S3 fails while W runs, so W ended before S3. W's commit became
--    visible before its lock was released, so S4's snapshot sees W's rows (or a sequencer run
--    that took them committed before: they are numbered and announced), and H stays; or W rolled
--    back: nothing to deliver.
-- b. W1 was granted after S3: S3 held the lock to the end of H's call, so W2 followed S2 and read
--    asleep, unless a hub H2 claimed the lease in between. Then W did notify, or H2 is awake and
--    answers for W when it sleeps, by the same argument (H2's S3 follows W1 or precedes it).
-- c. H returned at S1: the lease holder H2 is awake; W1 either precedes H2's S3 (a.) or follows it
--    (b.).
-- d. W wrote in several statements: each repeats W1 and W2; the lock dates from the first, and
--    one notification covers the transaction.
-- e. W rolled back (or the subtransaction that inserted its rows did): its lock went with it, and
--    no hub waits for the rows it never committed. Pending ids that never appear cost nothing.
-- f. W runs in REPEATABLE READ or SERIALIZABLE: the state is no table row, W2 sees S2 all the same;
--    and S4 runs in a fresh READ COMMITTED snapshot (api.change_sequencer_sleep refuses any other
--    isolation).
-- g. Two hubs awake at once (their numbers collide, or a lease ran out and another hub claimed):
--    each still sleeps only through S2 to S4, so the worst is that one's S2 makes writers notify
--    until the other renews its lease; a notification that reaches an awake hub makes it renew at
--    once.
-- h. A writer with silo.change_notify off takes no lock and never notifies: hubs of such a
--    database poll every 10 ms instead (they read the setting when they connect).
-- What is not covered: a hub that dies awake (or stops renewing) leaves its lease standing up to
-- its end (1 s): writers that read it meanwhile do not notify, and their changes wait for another
-- hub's safety net (at most a second) or for the next writer that notifies. A hub that stops
-- cleanly sleeps first. A clock step backwards lengthens standing leases alike.
-- Costs: S3 makes a writer that reaches W1 in that instant wait for the rest of the sleep call (S4
-- and a commit that writes no WAL: microseconds); the awake hub's runs that find nothing cost a
-- round trip each.

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
-- p_notify: the run notifies silo_changes itself, so the notification lock PostgreSQL takes at
-- commit (which serializes the commits of every notifying transaction) is held through the run's
-- WAL flush. Silo processes do so: writers do not notify while a hub is awake, so nobody waits for
-- that lock but the few writers that find every hub asleep. p_notify false leaves the notification
-- to api.change_announce in a transaction of its own (asynchronous commit), for callers that run
-- beside many notifying transactions.
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
    'Moves the committed rows of silo.change_pending into the change log silo.changes (compact rows of profile changes expanded into one change per profile and reader), numbered from silo.change_id_seq in pending_id order, one run at a time (a transaction advisory lock, held to the end of the caller''s transaction): ids increase in the order changes became visible. p_notify (default true; NULL counts as true): notify silo_changes with the highest id when rows moved, at commit (as Silo processes do); false leaves the notification to api.change_announce in a transaction of its own. Returns the highest change id handed out so far (0: none yet). Its transaction must commit synchronously (synchronous_commit on, the default), else a crash could hand announced ids out again. Raises nothing. Called by the websocket hub of every Silo process, and from psql at will (SELECT api.change_sequence();), in a short transaction.';

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
    'Notifies silo_changes with p_last_id, the highest change id (as api.change_sequence(false) returned it), so that the websocket hub of every Silo process reads the new changes: for a caller of api.change_sequence(false) that moved changes. Sets synchronous_commit off for the rest of the caller''s transaction, so call it in a transaction of its own. Returns nothing; raises nothing.';

-- The lease of an awake hub, as the writers' trigger reads it (the trigger has the expression
-- written out; the protocol is in the header). pg_sequence_last_value reads the sequence without a
-- query (NULL before its first setval).
CREATE FUNCTION change_private.sequencer_awake()
RETURNS boolean
LANGUAGE sql VOLATILE
AS $$
    SELECT coalesce(pg_sequence_last_value('silo.change_sequencer_awake'), 0) / 1000000
           > (date_part('epoch', clock_timestamp()) * 1000)::bigint;
$$;
COMMENT ON FUNCTION change_private.sequencer_awake() IS
    'Whether a websocket hub is awake: silo.change_sequencer_awake holds a lease that has not ended (read outside transactions: the state of the moment). The trigger of silo.change_pending notifies only when it is false (it has the same test written out). Raises nothing.';

-- Both functions change the state under the advisory lock "silo-awk" (hubs only, a few
-- microseconds), so that a claim and a sleep of two hubs do not interleave.
CREATE FUNCTION api.change_sequencer_wake(p_hub integer, p_lease interval DEFAULT '1 second')
RETURNS boolean
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    v_state bigint;
    v_now   bigint := (date_part('epoch', clock_timestamp()) * 1000)::bigint;
BEGIN
    IF p_hub IS NULL OR p_hub < 1 OR p_hub > 999999 THEN
        RAISE EXCEPTION 'hub must be between 1 and 999999, got %', coalesce(p_hub::text, 'NULL') USING ERRCODE = 'SLINV';
    END IF;
    IF p_lease IS NULL OR p_lease < interval '1 millisecond' OR p_lease > interval '1 hour' THEN
        RAISE EXCEPTION 'lease must be between 1 millisecond and 1 hour, got %', coalesce(p_lease::text, 'NULL') USING ERRCODE = 'SLINV';
    END IF;
    PERFORM pg_advisory_xact_lock(8316297411674863467);  -- 0x73696c6f2d61776b, "silo-awk" in ASCII
    SELECT s.last_value INTO v_state FROM silo.change_sequencer_awake s;
    IF v_state / 1000000 > v_now AND v_state % 1000000 <> p_hub THEN
        RETURN false;
    END IF;
    PERFORM setval('silo.change_sequencer_awake',
                   (v_now + (extract(epoch FROM p_lease) * 1000)::bigint) * 1000000 + p_hub);
    RETURN true;
END
$$;
COMMENT ON FUNCTION api.change_sequencer_wake(integer, interval) IS
    'Claims or renews the lease of the awake sequencer (silo.change_sequencer_awake) for hub p_hub (1 to 999999, a number a Silo process draws for its websocket hub) for p_lease (default 1 second, 1 millisecond to 1 hour): until then writers do not notify silo_change_pending, and the hub promises to run api.change_sequence every few milliseconds and to end its lease with api.change_sequencer_sleep (the protocol: sql/change/02_sequence.sql). Returns true when p_hub holds the lease now, false when another hub holds one that has not ended (that hub sequences; the state is unchanged). Raises SLINV when p_hub or p_lease is NULL or out of range. Called by Silo processes; non-transactional: a rollback does not undo it.';

CREATE FUNCTION api.change_sequencer_sleep(p_hub integer)
RETURNS boolean
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    v_state bigint;
    v_now   bigint := (date_part('epoch', clock_timestamp()) * 1000)::bigint;
BEGIN
    IF p_hub IS NULL OR p_hub < 1 OR p_hub > 999999 THEN
        RAISE EXCEPTION 'hub must be between 1 and 999999, got %', coalesce(p_hub::text, 'NULL') USING ERRCODE = 'SLINV';
    END IF;
    IF current_setting('transaction_isolation') <> 'read committed' THEN
        RAISE EXCEPTION 'api.change_sequencer_sleep needs READ COMMITTED, not %', current_setting('transaction_isolation')
            USING ERRCODE = 'SLINV', HINT = 'Call it in a transaction of its own, at the default isolation.';
    END IF;
    PERFORM pg_advisory_xact_lock(8316297411674863467);  -- "silo-awk"
    -- S1: another hub's lease answers for every writer.
    SELECT s.last_value INTO v_state FROM silo.change_sequencer_awake s;
    IF v_state / 1000000 > v_now AND v_state % 1000000 <> p_hub THEN
        RETURN true;
    END IF;
    -- S2: from here on, writers notify.
    IF v_state <> 0 THEN
        PERFORM setval('silo.change_sequencer_awake', 0);
    END IF;
    -- S3: a writer that read the lease may still be running.
    IF NOT pg_try_advisory_xact_lock(8316297411675845986) THEN  -- 0x73696c6f2d707562, "silo-pub" in ASCII
        RETURN false;
    END IF;
    -- S4: a statement of its own, so its snapshot follows S3: every writer that held "silo-pub"
    -- before has committed or rolled back.
    PERFORM FROM silo.change_pending LIMIT 1;
    RETURN NOT FOUND;
END
$$;
COMMENT ON FUNCTION api.change_sequencer_sleep(integer) IS
    'Ends the lease of hub p_hub (1 to 999999) on the awake sequencer, so that writers notify silo_change_pending again, and says whether the hub may stop sequencing by itself: true when another hub holds an unexpired lease (it sequences) or when no writer that could have read a lease is still running and nothing is pending; false otherwise (run api.change_sequence and call again). The state stays asleep either way (the protocol and why no change is left behind: sql/change/02_sequence.sql). Must run in READ COMMITTED, in a transaction of its own. Raises SLINV when p_hub is NULL or out of range, or the transaction is not READ COMMITTED. Called by Silo processes; non-transactional: a rollback does not undo it.';
