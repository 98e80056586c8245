-- Profile store, the direct statement (profile_private.apply_direct): _set, _inc, _array_append,
-- _array_put and the history forms of _set and of the two array operations
-- (profile_private.op_direct), whose new _latest value follows from the update and the current
-- _latest alone. They are the bulk of real traffic, so they get one set-based statement tuned for
-- them (the figures are in BENCHMARKS.md):
-- * One UPDATE ... FROM of the existing grains, then an upsert of the rest (new grains) only: an
--   UPDATE finds its row with one index scan, which costs less than an upsert's conflict check,
--   and most updates hit an existing grain.
-- * Parts with nothing to do are skipped: the history lock when no update archives, the upsert
--   when the UPDATE wrote every row, the grain type exceptions unless the statement reports some;
--   profile_private.apply_round skips the whole statement when a round holds no direct update.
-- * Generic plans: the statement is large, and planning it for every small batch cost more than
--   applying the batch. OFFSET 0 fences keep per-update values (such as whether an update replaces
--   the metadata) computed once per update, not once per use.
-- * No lost update under concurrent writers: counters and arrays are built inside the UPDATE on the
--   row's newest version, and the old values that go to history are locked before they are read.

-- One function for the direct and the general statement, so that both reject a grain type clash
-- with the same reason, and for profile_private.results_for_readers, which tells a caller that may
-- not read the grain the same reason without its type.
CREATE FUNCTION profile_private.type_clash(p_operation text, p_grain_type text, p_path text, p_existing text)
RETURNS text[]
LANGUAGE sql STABLE
AS $$
    SELECT ARRAY['SPTYP',
                 format('Grain type differs from the existing grain: %s writes grain type %s, the grain at %s has %s',
                        p_operation, p_grain_type, p_path,
                        coalesce('grain type ' || p_existing, 'another grain type')),
                 'applying ' || p_operation || ': grain type check'];
$$;
COMMENT ON FUNCTION profile_private.type_clash(text, text, text, text) IS
    'Why an update is rejected because its grain already has another grain type, as {sqlstate, reason, context} for its dead letter: SPTYP; a reason naming the operation p_operation, the grain type p_grain_type it writes, the grain path p_path and the existing grain type p_existing (NULL: "another grain type", the reason told to a caller that may not read the grain); context ''applying <operation>: grain type check''. Raises nothing.';

-- Rare (two values of one grain inserted in the same millisecond), so a loop of its own after the
-- main statements rather than a part of them; each pass is one set-based INSERT of every value
-- still pending.
CREATE FUNCTION profile_private.history_retry(p_pending profile.profilestore[])
RETURNS void
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    v_pending profile.profilestore[] := p_pending;
    v_offset  bigint := 1;
BEGIN
    WHILE v_pending IS NOT NULL LOOP
        WITH arch AS (
            INSERT INTO profile.profilestore (correlation_id, profile_type, path, pit, value, certainty, grain_type,
                                              inserted, ttl, reader, origin, ttn, expires_at, notify_at)
            SELECT o.correlation_id, o.profile_type, o.path, profile_private.pit(o.inserted + v_offset), o.value,
                   o.certainty, o.grain_type, o.inserted, o.ttl, o.reader, o.origin, o.ttn, o.expires_at, o.notify_at
            FROM unnest(v_pending) AS o
            ON CONFLICT DO NOTHING
            RETURNING profilestore.correlation_id, profilestore.profile_type, profilestore.path, profilestore.reader
        ), pend AS (
            SELECT change_private.publish_grains('changed', array_agg(a.correlation_id), array_agg(a.profile_type),
                                                 array_agg(a.reader), array_agg(a.path)) AS n
            FROM arch AS a
        )
        SELECT array_agg(o) INTO v_pending
        FROM unnest(v_pending) AS o
        WHERE (SELECT pend.n FROM pend) >= 0
          AND NOT EXISTS (SELECT 1 FROM arch
                          WHERE arch.correlation_id = o.correlation_id AND arch.profile_type = o.profile_type
                            AND arch.path = o.path);
        v_offset := v_offset + 1;
    END LOOP;
END
$$;
COMMENT ON FUNCTION profile_private.history_retry(profile.profilestore[]) IS
    'Archives old _latest values (p_pending: whole rows of profile.profilestore) whose history pit, _ + their inserted time, was already taken: each tries 1 ms later, pass by pass, until its pit is free; the history row keeps the value''s inserted time. Records the grains written for change notifications (change_private.publish_grains, kind changed). Returns nothing; raises nothing of its own.';

-- The parts run in order through one-time filters (a part reads a count of the one before it): the
-- history rows are locked and archived before the UPDATE rewrites them, and the changes are
-- recorded after the writes. The UPDATE joins only the columns it uses, because PostgreSQL keeps a
-- copy of each joined row for rechecks under concurrency. PostgreSQL re-evaluates an UPDATE's SET
-- on the version a concurrent writer committed meanwhile, which is why counters and arrays are
-- built there and not read first. Runs with silo.change_triggers off: it records the grains it
-- writes from its RETURNING rows (change_private.publish_grains), which costs less than the
-- triggers' transition tables.
CREATE FUNCTION profile_private.apply_direct(p_round profile_private.validated_update[], p_ok boolean,
                                             p_direct bigint, p_history boolean, p_now bigint DEFAULT NULL)
RETURNS profile_private.apply_result[]
LANGUAGE plpgsql VOLATILE
SET silo.change_triggers = off
SET plan_cache_mode = force_generic_plan
AS $$
DECLARE
    v_res     profile_private.apply_result[];
    v_written bigint;
    v_clashes jsonb;
    v_pending profile.profilestore[];
BEGIN
    -- The direct operations (profile_private.op_direct) in one statement. Old values that go to
    -- history are read and locked first (l) and archived (arch); the UPDATE waits for that (its
    -- one-time filter counts arch), then rewrites the existing _latest values of the same grain
    -- type: it locks each row and builds counters and arrays on the row's newest version. The
    -- upsert takes the others: new grains, grains of another type (left alone by its WHERE:
    -- dead-lettered below) and grains created meanwhile by a concurrent writer (overwritten as if
    -- they had not been there: the new value replaces theirs; a counter adds up). Results are ok
    -- unless fewer rows were written than sent or a new _latest clashes with the grain's history:
    -- then the exceptions are worked out below.
    WITH l AS (
        SELECT p.correlation_id, p.profile_type, p.path, p.pit, p.value, p.certainty, p.grain_type, p.inserted,
               p.ttl, p.reader, p.origin, p.ttn, p.expires_at, p.notify_at
        FROM unnest(p_round) AS u
        JOIN profile.profilestore p
          ON p.correlation_id = u.target AND p.profile_type = u.profile_type AND p.path = u.path
         AND p.pit = '_latest' AND p.grain_type = u.grain_type
        WHERE p_history AND profile_private.op_archives(u.operation)
        FOR UPDATE OF p
    ), arch AS (
        -- Old values to history, at _ + their inserted time (a pit that is taken: see below).
        INSERT INTO profile.profilestore (correlation_id, profile_type, path, pit, value, certainty, grain_type,
                                          inserted, ttl, reader, origin, ttn, expires_at, notify_at)
        SELECT l.correlation_id, l.profile_type, l.path, profile_private.pit(l.inserted), l.value, l.certainty,
               l.grain_type, l.inserted, l.ttl, l.reader, l.origin, l.ttn, l.expires_at, l.notify_at
        FROM l
        ON CONFLICT DO NOTHING
        RETURNING profilestore.correlation_id, profilestore.profile_type, profilestore.path, profilestore.reader
    ), upd AS (
        UPDATE profile.profilestore p
        SET value = CASE WHEN u.repl THEN u.v
                         WHEN u.operation = '_inc' THEN profile_private.counter_json(
                             p.value -> '_initial', u.inc[2], (p.value ->> '_current')::numeric + u.inc[2] * u.inc[3])
                         WHEN u.operation IN ('_array_append', '_array_append_with_history') THEN p.value || u.v
                         ELSE p.value || coalesce((
                             SELECT jsonb_agg(e.x ORDER BY e.o)
                             FROM (SELECT DISTINCT ON (t.x) t.x, t.o
                                   FROM jsonb_array_elements(u.v) WITH ORDINALITY AS t(x, o)
                                   ORDER BY t.x, t.o) e
                             WHERE NOT p.value @> jsonb_build_array(e.x)), '[]')
                    END,
            -- _set and _set_with_history replace the metadata; counters and arrays keep theirs.
            certainty = CASE WHEN u.repl THEN u.certainty ELSE p.certainty END,
            -- A default _in (p_now) never goes back before the value it replaces: a transaction that
            -- read the clock, then waited for this row's lock, writes after the value it waited for.
            inserted = greatest(u.inserted, CASE WHEN u.inserted = p_now THEN p.inserted END),
            ttl = CASE WHEN u.repl THEN u.ttl ELSE p.ttl END,
            reader = CASE WHEN u.repl THEN u.reader ELSE p.reader END,
            origin = CASE WHEN u.repl THEN u.origin ELSE p.origin END,
            ttn = CASE WHEN u.repl THEN u.ttn ELSE p.ttn END,
            expires_at = profile_private.expiry(greatest(u.inserted, CASE WHEN u.inserted = p_now THEN p.inserted END),
                                                CASE WHEN u.repl THEN u.ttl ELSE p.ttl END),
            notify_at = profile_private.expiry(greatest(u.inserted, CASE WHEN u.inserted = p_now THEN p.inserted END),
                                               CASE WHEN u.repl THEN u.ttn ELSE p.ttn END)
        FROM (
            -- repl: the update replaces the metadata (_set, _set_with_history); counters and arrays
            -- keep theirs.
            SELECT r.ord, r.operation, r.target, r.profile_type, r.path, r.v, r.certainty, r.inserted, r.ttl,
                   r.ttn, r.origin, r.reader, r.grain_type, r.inc,
                   r.operation IN ('_set', '_set_with_history') AS repl
            FROM unnest(p_round) AS r
            WHERE profile_private.op_direct(r.operation)
            OFFSET 0
        ) AS u
        WHERE (SELECT count(*) FROM arch) >= 0
          AND p.correlation_id = u.target AND p.profile_type = u.profile_type AND p.path = u.path
          AND p.pit = '_latest' AND p.grain_type = u.grain_type
        RETURNING u.ord, p.correlation_id, p.profile_type, p.path, p.reader
    ), ins AS (
        -- Only _inc writes grain type c, so on a conflict EXCLUDED.grain_type tells a counter, whose
        -- steps (the new counter's _current - _initial) add to the current one and whose metadata
        -- stays, from a value that replaces the current one.
        INSERT INTO profile.profilestore AS p (correlation_id, profile_type, path, pit, value, certainty, grain_type,
                                               inserted, ttl, reader, origin, ttn, expires_at, notify_at)
        SELECT u.target, u.profile_type, u.path, '_latest',
               CASE WHEN u.operation = '_inc'
                    THEN profile_private.counter_json(to_jsonb(trim_scale(u.inc[1])), u.inc[2], u.inc[1] + u.inc[2] * u.inc[3])
                    ELSE u.v END,
               u.certainty, u.grain_type, u.inserted, u.ttl, u.reader, u.origin, u.ttn,
               profile_private.expiry(u.inserted, u.ttl), profile_private.expiry(u.inserted, u.ttn)
        FROM unnest(p_round) AS u
        WHERE (SELECT count(*) FROM upd) < p_direct AND profile_private.op_direct(u.operation)
          AND u.ord NOT IN (SELECT upd.ord FROM upd)
        ON CONFLICT (correlation_id, profile_type, path, pit) DO UPDATE
        SET value = CASE WHEN EXCLUDED.grain_type = 'c' THEN profile_private.counter_json(
                            p.value -> '_initial', (EXCLUDED.value ->> '_step')::numeric,
                            (p.value ->> '_current')::numeric
                            + (EXCLUDED.value ->> '_current')::numeric - (EXCLUDED.value ->> '_initial')::numeric)
                         ELSE EXCLUDED.value END,
            certainty = CASE WHEN EXCLUDED.grain_type = 'c' THEN p.certainty ELSE EXCLUDED.certainty END,
            grain_type = EXCLUDED.grain_type,
            -- A default _in never goes back before the value a concurrent writer created meanwhile
            -- (as in upd above).
            inserted = greatest(EXCLUDED.inserted, CASE WHEN EXCLUDED.inserted = p_now THEN p.inserted END),
            ttl = CASE WHEN EXCLUDED.grain_type = 'c' THEN p.ttl ELSE EXCLUDED.ttl END,
            reader = CASE WHEN EXCLUDED.grain_type = 'c' THEN p.reader ELSE EXCLUDED.reader END,
            origin = CASE WHEN EXCLUDED.grain_type = 'c' THEN p.origin ELSE EXCLUDED.origin END,
            ttn = CASE WHEN EXCLUDED.grain_type = 'c' THEN p.ttn ELSE EXCLUDED.ttn END,
            expires_at = profile_private.expiry(greatest(EXCLUDED.inserted, CASE WHEN EXCLUDED.inserted = p_now THEN p.inserted END),
                                                CASE WHEN EXCLUDED.grain_type = 'c' THEN p.ttl ELSE EXCLUDED.ttl END),
            notify_at = profile_private.expiry(greatest(EXCLUDED.inserted, CASE WHEN EXCLUDED.inserted = p_now THEN p.inserted END),
                                               CASE WHEN EXCLUDED.grain_type = 'c' THEN p.ttn ELSE EXCLUDED.ttn END)
        WHERE p.grain_type = EXCLUDED.grain_type
        RETURNING p.correlation_id, p.profile_type, p.path, p.reader,
                  CASE WHEN p.xmax = 0 THEN (SELECT jsonb_build_array(p.correlation_id, p.profile_type, p.path, h.grain_type)
                                             FROM profile.profilestore h
                                             WHERE h.correlation_id = p.correlation_id AND h.profile_type = p.profile_type
                                               AND h.path = p.path AND h.grain_type <> p.grain_type
                                             LIMIT 1) END AS clash
    ), pend AS (
        -- The grains written, for change notifications (a clashing row is removed again below). The
        -- query below reads it (its one-time filter), so it runs once, after the writes.
        SELECT change_private.publish_grains('changed', array_agg(i.correlation_id), array_agg(i.profile_type),
                                             array_agg(i.reader), array_agg(i.path)) AS n
        FROM (SELECT upd.correlation_id, upd.profile_type, upd.path, upd.reader FROM upd
              UNION ALL
              SELECT ins.correlation_id, ins.profile_type, ins.path, ins.reader FROM ins WHERE ins.clash IS NULL
              UNION ALL
              SELECT arch.correlation_id, arch.profile_type, arch.path, arch.reader FROM arch) AS i
    )
    SELECT (SELECT count(*) FROM upd) + i.written, i.clashes, o.ok, h.pending
    INTO v_written, v_clashes, v_res, v_pending
    FROM (SELECT count(*) AS written, jsonb_agg(i.clash) FILTER (WHERE i.clash IS NOT NULL) AS clashes
          FROM ins AS i) AS i,
         (SELECT array_agg(ROW(u.ord, 'ok', u.operation, u.target, NULL, NULL, NULL, NULL, NULL)::profile_private.apply_result) AS ok
          FROM unnest(p_round) AS u
          WHERE p_ok AND profile_private.op_direct(u.operation)) AS o,
         -- Old values whose history pit was taken.
         (SELECT array_agg(ROW(l.*)::profile.profilestore) AS pending
          FROM l
          WHERE (l.correlation_id, l.profile_type, l.path)
                NOT IN (SELECT arch.correlation_id, arch.profile_type, arch.path FROM arch)) AS h
    WHERE (SELECT pend.n FROM pend) >= 0;
    IF v_pending IS NOT NULL THEN
        PERFORM profile_private.history_retry(v_pending);
    END IF;

    IF v_written < p_direct OR v_clashes IS NOT NULL THEN
        -- Rows not written (the _latest has another grain type: the conflicting row stays locked by
        -- the upsert, so it still has that type) and new rows that clash with the grain's history.
        v_res := ARRAY(
            SELECT z.r
            FROM (
                SELECT CASE WHEN c.clash IS NOT NULL OR p.grain_type::text <> u.grain_type THEN
                           ROW(u.ord, 'dead_letter', u.operation, u.target, t.e[1], t.e[2], t.e[3], NULL, NULL)::profile_private.apply_result
                       ELSE
                           ROW(u.ord, 'ok', u.operation, u.target, NULL, NULL, NULL, NULL, NULL)::profile_private.apply_result
                       END AS r
                FROM unnest(p_round) AS u
                LEFT JOIN profile.profilestore p
                  ON p.correlation_id = u.target AND p.profile_type = u.profile_type AND p.path = u.path
                 AND p.pit = '_latest'
                LEFT JOIN LATERAL (
                    SELECT x ->> 3 AS clash FROM jsonb_array_elements(v_clashes) AS x
                    WHERE x ->> 0 = u.target AND x ->> 1 = u.profile_type AND x ->> 2 = u.path) c ON true
                LEFT JOIN LATERAL (
                    SELECT profile_private.type_clash(u.operation, u.grain_type, u.path, coalesce(c.clash, p.grain_type::text)) AS e
                    WHERE c.clash IS NOT NULL OR p.grain_type::text <> u.grain_type) t ON true
                WHERE profile_private.op_direct(u.operation)
                OFFSET 0
            ) z
            WHERE p_ok OR (z.r).status <> 'ok');
        -- A new _latest whose grain's history has another type: not written after all.
        IF v_clashes IS NOT NULL THEN
            DELETE FROM profile.profilestore p
            USING jsonb_array_elements(v_clashes) AS x
            WHERE p.correlation_id = x ->> 0 AND p.profile_type = x ->> 1 AND p.path = x ->> 2
              AND p.pit = '_latest';
        END IF;
    END IF;

    RETURN v_res;
END
$$;
COMMENT ON FUNCTION profile_private.apply_direct(profile_private.validated_update[], boolean, bigint, boolean, bigint) IS
    'Applies the direct updates (profile_private.op_direct) of one round by one statement and returns their results. p_round: validated updates of distinct grains whose targets are resolved (its other updates are left to profile_private.apply_general); p_ok: return every result (true) or only those that are not ok (false; NULL or empty when there are none); p_direct: how many direct updates p_round holds (the upsert runs only when the UPDATE wrote fewer); p_history: whether one of them archives (the history lock runs only then). Locks the old _latest values that go to history and archives them (1 ms later when the pit is taken: profile_private.history_retry), updates the existing _latest values of the same grain type, upserts the others. An update whose grain already has another grain type writes nothing and comes back as a dead_letter result with SPTYP and no dead letter id (the caller records it); every other result is ok. Records the grains written for change notifications (change_private.publish_grains, kind changed). Raises nothing of its own. p_now (default NULL): the batch''s default _in (epoch ms); an update whose _in is that default never gets an earlier time than the _latest value it rewrites.';
