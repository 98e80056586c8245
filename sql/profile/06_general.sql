-- Profile store, the general statement (profile_private.apply_general): every operation that is
-- not direct (_set_if_not_exist, _set_max/_set_min and their history forms, the *_distinct forms,
-- _array_remove and its history form, _delete, _delete_with_history, _set_ttl, _set_ttn,
-- _profile_link). Their outcome depends on what the grain holds (a comparison, a cycle check, a
-- noop) or touches pits other than _latest, so one set-based statement reads and locks the current
-- _latest values, decides every update (the first rule that applies wins), archives old values to
-- their history pits, writes the new _latest values, deletes pits and sets durations; the results
-- follow from what each part returned. Why it is shaped so:
-- * The decision is one MATERIALIZED CTE over nested subqueries fenced with OFFSET 0, so the
--   planner computes each field (link chains, new array values, the existing grain type, the
--   decision) once per update, not once per use.
-- * Values that are read and rewritten are locked (FOR UPDATE) as they are read; the rewrite finds
--   the locked row by its key, because the lock may return a version the statement's snapshot does
--   not see.
-- * It has a fixed cost the usual traffic should not pay: profile_private.apply_round calls it only
--   for rounds that hold an update that is not direct, and it runs with generic plans (planning its
--   large statement for every small batch cost more than applying the batch).

-- Runs with silo.change_triggers off, like profile_private.apply_direct: it records the grains it
-- writes and deletes from its RETURNING rows (change_private.publish_grains), which costs less than
-- the triggers' transition tables. Type clashes and taken history pits are rare, so they are dealt
-- with after the statement, by statements of their own.
CREATE FUNCTION profile_private.apply_general(p_round profile_private.validated_update[], p_ok boolean,
                                              p_now bigint DEFAULT NULL)
RETURNS profile_private.apply_result[]
LANGUAGE plpgsql VOLATILE
SET silo.change_triggers = off
SET plan_cache_mode = force_generic_plan
AS $$
DECLARE
    v_res     profile_private.apply_result[];
    v_part    profile_private.apply_result[];
    v_clash   integer[];
    v_pending profile.profilestore[];
BEGIN
    WITH d AS MATERIALIZED (
        -- What each update does: st is its decision (ok, noop, dead_letter, or pending for deletes and
        -- durations, whose status follows from what they match), decision the full
        -- {status, sqlstate, reason, context}. Array operations on an existing value keep its
        -- metadata (the w_ columns are what is written).
        -- A default _in (p_now) never goes back before the _latest value it replaces (read and locked
        -- below, after any wait for a concurrent writer).
        SELECT y.ord, y.operation, y.decision[1] AS st, y.hist, y.o_tid, y.target, y.profile_type, y.path, y.grain_type,
               greatest(y.inserted, CASE WHEN y.inserted = p_now THEN y.o_inserted END) AS inserted,
               y.newval, y.pits, y.dur, y.decision,
               CASE WHEN y.keep THEN y.o_certainty ELSE y.certainty END AS w_certainty,
               CASE WHEN y.keep THEN y.o_ttl ELSE y.ttl END AS w_ttl,
               CASE WHEN y.keep THEN y.o_reader ELSE y.reader END AS w_reader,
               CASE WHEN y.keep THEN y.o_origin ELSE y.origin END AS w_origin,
               CASE WHEN y.keep THEN y.o_ttn ELSE y.ttn END AS w_ttn,
               y.o_value, y.o_certainty, y.o_grain_type, y.o_inserted, y.o_ttl, y.o_reader, y.o_origin, y.o_ttn,
               y.o_expires_at, y.o_notify_at
        FROM (
            -- The decision: the first rule that applies wins.
            SELECT n.*,
                CASE
                WHEN n.operation IN ('_delete', '_delete_with_history', '_set_ttl', '_set_ttn') THEN
                    '{pending,NULL,NULL,NULL}'::text[]
                WHEN n.operation = '_profile_link' AND n.target = ANY (n.chain) THEN
                    ARRAY['dead_letter', 'SPLNK',
                          'Profile link would create a cycle: '
                          || array_to_string(n.target || n.chain[1:array_position(n.chain, n.target)], ' -> '),
                          'applying _profile_link: cycle check']
                WHEN n.operation = '_set_if_not_exist' AND n.has_latest THEN
                    '{noop,NULL,NULL,NULL}'::text[]
                WHEN n.operation IN ('_array_remove', '_array_remove_with_history') AND NOT n.has_latest THEN
                    '{noop,NULL,NULL,NULL}'::text[]
                WHEN n.egt <> n.grain_type THEN
                    'dead_letter'::text || profile_private.type_clash(n.operation, n.grain_type, n.path, n.egt)
                WHEN n.operation = '_set_with_history_distinct' AND n.has_latest AND n.o_value = n.v THEN
                    '{noop,NULL,NULL,NULL}'::text[]
                WHEN n.operation IN ('_set_max', '_set_min', '_set_max_with_history', '_set_min_with_history') AND n.has_latest
                     AND NOT profile_private.value_beats(n.v #>> '{}', n.o_value #>> '{}', n.operation LIKE '\_set\_max%') THEN
                    '{noop,NULL,NULL,NULL}'::text[]
                WHEN n.operation = '_array_put_with_history_distinct' AND n.has_latest AND n.newval = n.o_value THEN
                    '{noop,NULL,NULL,NULL}'::text[]
                ELSE
                    '{ok,NULL,NULL,NULL}'::text[]
                END AS decision
            FROM (
                -- The new value (array operations build on the current one), the pits addressed,
                -- the new duration, and whether the old value's metadata stays (keep) and the old value
                -- goes to history (hist).
                SELECT x.*,
                    CASE
                    WHEN x.operation IN ('_array_append', '_array_append_with_history') AND x.has_latest THEN
                        x.o_value || x.v
                    WHEN x.operation IN ('_array_put', '_array_put_with_history', '_array_put_with_history_distinct')
                         AND x.has_latest AND x.egt = 'a' THEN
                        x.o_value || coalesce((
                            SELECT jsonb_agg(e.x ORDER BY e.o)
                            FROM (SELECT DISTINCT ON (t.x) t.x, t.o
                                  FROM jsonb_array_elements(x.v) WITH ORDINALITY AS t(x, o)
                                  ORDER BY t.x, t.o) e
                            WHERE NOT x.o_value @> jsonb_build_array(e.x)), '[]')
                    WHEN x.operation IN ('_array_remove', '_array_remove_with_history') AND x.has_latest AND x.egt = 'a' THEN
                        coalesce((SELECT jsonb_agg(t.x ORDER BY t.o)
                                  FROM jsonb_array_elements(x.o_value) WITH ORDINALITY AS t(x, o)
                                  WHERE t.x <> x.v), '[]')
                    ELSE x.v
                    END AS newval,
                    CASE WHEN x.operation = '_profile_link' THEN profile_private.link_chain(x.v #>> '{}') END AS chain,
                    CASE WHEN x.operation = '_delete' THEN
                             CASE WHEN jsonb_typeof(x.v) = 'string' OR x.v = '[]' THEN '{_latest}'::text[]
                                  ELSE ARRAY(SELECT CASE WHEN e = '' THEN '_latest' ELSE e END
                                             FROM jsonb_array_elements_text(x.v) AS e) END
                         WHEN x.operation IN ('_set_ttl', '_set_ttn') AND jsonb_typeof(x.v) = 'array' THEN
                             ARRAY(SELECT CASE WHEN e = '' THEN '_latest' ELSE e END FROM jsonb_array_elements_text(x.v) AS e)
                    END AS pits,
                    CASE WHEN x.operation IN ('_set_ttl', '_set_ttn') THEN
                             CASE WHEN jsonb_typeof(x.v) = 'string' AND x.v <> '""' THEN x.v #>> '{}'
                                  WHEN x.operation = '_set_ttl' THEN x.ttl
                                  ELSE x.ttn END
                    END AS dur,
                    x.has_latest AND x.operation IN ('_array_append', '_array_append_with_history', '_array_put',
                                                     '_array_put_with_history', '_array_put_with_history_distinct',
                                                     '_array_remove', '_array_remove_with_history') AS keep,
                    x.has_latest AND x.operation IN ('_set_with_history', '_set_with_history_distinct', '_set_max_with_history',
                                                     '_set_min_with_history', '_array_append_with_history', '_array_put_with_history',
                                                     '_array_put_with_history_distinct', '_array_remove_with_history') AS hist
                FROM (
                    -- The current _latest value (o_ columns, o_tid where it is) and the existing grain's type.
                    SELECT u.ord, u.operation, u.target, u.profile_type, u.path, u.v, u.certainty, u.inserted, u.ttl, u.ttn,
                           u.origin, u.reader, u.grain_type, u.inc, l.tid IS NOT NULL AS has_latest,
                           l.tid AS o_tid, l.value AS o_value, l.certainty AS o_certainty, l.grain_type AS o_grain_type,
                           l.inserted AS o_inserted, l.ttl AS o_ttl, l.reader AS o_reader, l.origin AS o_origin,
                           l.ttn AS o_ttn, l.expires_at AS o_expires_at, l.notify_at AS o_notify_at,
                           CASE WHEN u.operation IN ('_delete', '_delete_with_history', '_set_ttl', '_set_ttn', '_profile_link') THEN NULL
                                WHEN l.tid IS NOT NULL THEN l.grain_type::text
                                ELSE (SELECT p.grain_type::text FROM profile.profilestore p
                                      WHERE p.correlation_id = u.target AND p.profile_type = u.profile_type AND p.path = u.path
                                      LIMIT 1)
                           END AS egt
                    FROM unnest(p_round) AS u
                    LEFT JOIN LATERAL (
                        -- Values that are read and rewritten: locked against concurrent writers.
                        SELECT p.ctid AS tid, p.value, p.certainty, p.grain_type, p.inserted, p.ttl, p.reader, p.origin,
                               p.ttn, p.expires_at, p.notify_at
                        FROM profile.profilestore p
                        WHERE p.correlation_id = u.target AND p.profile_type = u.profile_type AND p.path = u.path
                          AND p.pit = '_latest'
                          AND u.operation NOT IN ('_delete', '_delete_with_history', '_set_ttl', '_set_ttn')
                        FOR UPDATE OF p
                    ) l ON true
                    WHERE NOT profile_private.op_direct(u.operation)
                    OFFSET 0
                ) x
                OFFSET 0
            ) n
            OFFSET 0
        ) y
    ), arch AS (
        -- Old values to history, at _ + their inserted time.
        INSERT INTO profile.profilestore (correlation_id, profile_type, path, pit, value, certainty, grain_type,
                                          inserted, ttl, reader, origin, ttn, expires_at, notify_at)
        SELECT d.target, d.profile_type, d.path, profile_private.pit(d.o_inserted), d.o_value, d.o_certainty,
               d.o_grain_type, d.o_inserted, d.o_ttl, d.o_reader, d.o_origin, d.o_ttn, d.o_expires_at, d.o_notify_at
        FROM d
        WHERE d.st = 'ok' AND d.hist
        ON CONFLICT DO NOTHING
        RETURNING profilestore.correlation_id, profilestore.profile_type, profilestore.path, profilestore.reader
    ), upd AS (
        -- New values of an existing _latest: the row read and locked above, found by its key, not
        -- by the ctid read: when a concurrent writer committed a newer version while this statement
        -- waited for the lock, the lock returned that version, which the statement's snapshot does
        -- not see; the key leads UPDATE to it.
        UPDATE profile.profilestore p
        SET value = d.newval, certainty = d.w_certainty, grain_type = d.grain_type, inserted = d.inserted,
            ttl = d.w_ttl, reader = d.w_reader, origin = d.w_origin, ttn = d.w_ttn,
            expires_at = profile_private.expiry(d.inserted, d.w_ttl), notify_at = profile_private.expiry(d.inserted, d.w_ttn)
        FROM d
        WHERE d.st = 'ok' AND d.o_tid IS NOT NULL
          AND p.correlation_id = d.target AND p.profile_type = d.profile_type AND p.path = d.path AND p.pit = '_latest'
        RETURNING p.correlation_id, p.profile_type, p.path, p.reader
    ), ins AS (
        -- New _latest values where there was none. One may have appeared since: if it has another
        -- grain type it is left alone here (and the update dead-lettered below); one of the same
        -- grain type is overwritten, as in the direct statement. A new _latest is checked against
        -- the grain's history (and removed again below when it clashes).
        INSERT INTO profile.profilestore AS p (correlation_id, profile_type, path, pit, value, certainty, grain_type,
                                               inserted, ttl, reader, origin, ttn, expires_at, notify_at)
        SELECT d.target, d.profile_type, d.path, '_latest', d.newval, d.w_certainty, d.grain_type, d.inserted,
               d.w_ttl, d.w_reader, d.w_origin, d.w_ttn,
               profile_private.expiry(d.inserted, d.w_ttl), profile_private.expiry(d.inserted, d.w_ttn)
        FROM d
        WHERE d.st = 'ok' AND d.o_tid IS NULL
        ON CONFLICT (correlation_id, profile_type, path, pit) DO UPDATE
        SET value = EXCLUDED.value, certainty = EXCLUDED.certainty, grain_type = EXCLUDED.grain_type,
            -- A default _in never goes back before the value a concurrent writer created meanwhile.
            inserted = greatest(EXCLUDED.inserted, CASE WHEN EXCLUDED.inserted = p_now THEN p.inserted END),
            ttl = EXCLUDED.ttl, reader = EXCLUDED.reader, origin = EXCLUDED.origin, ttn = EXCLUDED.ttn,
            expires_at = profile_private.expiry(greatest(EXCLUDED.inserted, CASE WHEN EXCLUDED.inserted = p_now THEN p.inserted END), EXCLUDED.ttl),
            notify_at = profile_private.expiry(greatest(EXCLUDED.inserted, CASE WHEN EXCLUDED.inserted = p_now THEN p.inserted END), EXCLUDED.ttn)
        WHERE p.grain_type = EXCLUDED.grain_type
        RETURNING p.correlation_id, p.profile_type, p.path, p.reader,
                  CASE WHEN p.xmax = 0 THEN (SELECT h.grain_type::text FROM profile.profilestore h
                                             WHERE h.correlation_id = p.correlation_id AND h.profile_type = p.profile_type
                                               AND h.path = p.path AND h.grain_type <> p.grain_type
                                             LIMIT 1) END AS clash
    ), del AS (
        -- _delete and _delete_with_history.
        DELETE FROM profile.profilestore p
        USING d
        WHERE d.operation IN ('_delete', '_delete_with_history')
          AND p.correlation_id = d.target AND p.profile_type = d.profile_type AND p.path = d.path
          AND (d.pits IS NULL OR p.pit = ANY (d.pits))
        RETURNING d.ord, p.correlation_id, p.profile_type, p.path, p.reader
    ), dur AS (
        -- _set_ttl and _set_ttn: value and other metadata stay.
        UPDATE profile.profilestore p
        SET ttl = CASE WHEN d.operation = '_set_ttl' THEN d.dur ELSE p.ttl END,
            expires_at = CASE WHEN d.operation = '_set_ttl' THEN profile_private.expiry(p.inserted, d.dur) ELSE p.expires_at END,
            ttn = CASE WHEN d.operation = '_set_ttn' THEN d.dur ELSE p.ttn END,
            notify_at = CASE WHEN d.operation = '_set_ttn' THEN profile_private.expiry(p.inserted, d.dur) ELSE p.notify_at END
        FROM d
        WHERE d.operation IN ('_set_ttl', '_set_ttn')
          AND p.correlation_id = d.target AND p.profile_type = d.profile_type AND p.path = d.path
          AND (d.pits IS NULL OR p.pit = ANY (d.pits))
        RETURNING d.ord, p.correlation_id, p.profile_type, p.path, p.reader
    ), hit AS (
        SELECT DISTINCT h.ord FROM (SELECT del.ord FROM del UNION ALL SELECT dur.ord FROM dur) h
    ), pend AS (
        -- The grains written and deleted, for change notifications (a clashing new _latest is
        -- removed again below): changed first, then deleted. The query below reads it (its
        -- one-time filter), so it runs once, after the writes.
        SELECT change_private.publish_grains('changed', array_agg(g.correlation_id) FILTER (WHERE NOT g.del),
                                             array_agg(g.profile_type) FILTER (WHERE NOT g.del),
                                             array_agg(g.reader) FILTER (WHERE NOT g.del),
                                             array_agg(g.path) FILTER (WHERE NOT g.del))
               + change_private.publish_grains('deleted', array_agg(g.correlation_id) FILTER (WHERE g.del),
                                               array_agg(g.profile_type) FILTER (WHERE g.del),
                                               array_agg(g.reader) FILTER (WHERE g.del),
                                               array_agg(g.path) FILTER (WHERE g.del)) AS n
        FROM (SELECT false AS del, a.correlation_id, a.profile_type, a.reader, a.path FROM arch AS a
              UNION ALL
              SELECT false, u.correlation_id, u.profile_type, u.reader, u.path FROM upd AS u
              UNION ALL
              SELECT false, i.correlation_id, i.profile_type, i.reader, i.path FROM ins AS i WHERE i.clash IS NULL
              UNION ALL
              SELECT false, t.correlation_id, t.profile_type, t.reader, t.path FROM dur AS t
              UNION ALL
              SELECT true, x.correlation_id, x.profile_type, x.reader, x.path FROM del AS x) g
    )
    SELECT array_agg(CASE
               WHEN d.st = 'ok' AND d.o_tid IS NULL AND (ins.correlation_id IS NULL OR ins.clash IS NOT NULL) THEN
                   ROW(d.ord, 'dead_letter', d.operation, d.target, t.e[1], t.e[2], t.e[3], NULL, d.o_reader)::profile_private.apply_result
               ELSE
                   ROW(d.ord, CASE WHEN d.st <> 'pending' THEN d.st WHEN hit.ord IS NOT NULL THEN 'ok' ELSE 'noop' END,
                       d.operation, d.target, d.decision[2], d.decision[3], d.decision[4], NULL, d.o_reader)::profile_private.apply_result
               END),
           array_agg(ROW(d.target, d.profile_type, d.path, '_latest', d.o_value, d.o_certainty, d.o_grain_type,
                         d.o_inserted, d.o_ttl, d.o_reader, d.o_origin, d.o_ttn, d.o_expires_at,
                         d.o_notify_at)::profile.profilestore)
               FILTER (WHERE d.st = 'ok' AND d.hist AND arch.correlation_id IS NULL),
           array_agg(d.ord) FILTER (WHERE ins.clash IS NOT NULL)
    INTO v_part, v_pending, v_clash
    FROM d
    LEFT JOIN hit ON hit.ord = d.ord
    LEFT JOIN arch ON arch.correlation_id = d.target AND arch.profile_type = d.profile_type AND arch.path = d.path
    LEFT JOIN ins ON ins.correlation_id = d.target AND ins.profile_type = d.profile_type AND ins.path = d.path
    LEFT JOIN LATERAL (
        SELECT profile_private.type_clash(d.operation, d.grain_type, d.path,
                   coalesce(ins.clash, (SELECT p.grain_type::text FROM profile.profilestore p
                                        WHERE p.correlation_id = d.target AND p.profile_type = d.profile_type
                                          AND p.path = d.path AND p.pit = '_latest'))) AS e
        WHERE d.st = 'ok' AND d.o_tid IS NULL AND (ins.correlation_id IS NULL OR ins.clash IS NOT NULL)) t ON true
    WHERE (SELECT pend.n FROM pend) >= 0;
    v_res := ARRAY(SELECT r FROM unnest(v_part) AS r WHERE p_ok OR r.status <> 'ok');

    -- A new _latest whose grain's history has another type: not written after all.
    IF v_clash IS NOT NULL THEN
        DELETE FROM profile.profilestore p
        USING unnest(p_round) AS u
        WHERE u.ord = ANY (v_clash)
          AND p.correlation_id = u.target AND p.profile_type = u.profile_type AND p.path = u.path AND p.pit = '_latest';
    END IF;

    -- History pits already taken (two values inserted in the same millisecond): 1 ms later.
    IF v_pending IS NOT NULL THEN
        PERFORM profile_private.history_retry(v_pending);
    END IF;


    RETURN v_res;
END
$$;
COMMENT ON FUNCTION profile_private.apply_general(profile_private.validated_update[], boolean, bigint) IS
    'Applies the updates of one round that are not direct (profile_private.op_direct) by one statement and returns their results. p_round: validated updates of distinct grains whose targets are resolved (its direct updates are left to profile_private.apply_direct); p_ok: return every result (true) or only those that are not ok (false). Reads and locks the current _latest values, decides each update, archives old values to history (1 ms later when the pit is taken: profile_private.history_retry), writes the new _latest values, deletes pits and sets durations. Results: ok when the update wrote something, noop when it had nothing to change, each with the reader of the _latest pit read to decide it (NULL when none was read); a grain type mismatch (SPTYP) or a profile link cycle (SPLNK) writes nothing and comes back as a dead_letter result without a dead letter id (the caller records it). Records the grains written and deleted for change notifications (change_private.publish_grains, kinds changed and deleted). Raises nothing of its own. p_now (default NULL): the batch''s default _in (epoch ms); an update whose _in is that default never gets an earlier time than the _latest value it replaces.';
