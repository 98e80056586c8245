-- Storing checked points, whatever form they came in (flatJSON: 02_append.sql; typed columns:
-- 07_columns.sql). One row per series and time, the last write winning:
--   1. the writers of a series take turns (series_private.claim: a transaction lock per series, taken
--      in series order, so two calls that share series never deadlock);
--   2. a call whose time range meets stored points of a series deletes the stored points at its
--      times first (series_private.clear); an append after what the series holds, the usual feed,
--      meets none and costs one probe per series;
--   3. the points are inserted plainly, into series.points1 for a series of one field,
--      series.points for the others (series_private.narrow); both are read as series.points_all,
--      probed and cleared alike.
-- Why not ON CONFLICT: on TimescaleDB, points are written straight into compressed batches when a
-- call brings enough of them (series_private.compress_on_write), which TimescaleDB does
-- only for a hypertable without a unique index; and a plain insert costs about half of a
-- speculative one wherever nothing is in the way. Native partitions keep their primary key, which
-- the turns above never let a writer meet.

-- Where a series' points are written: series.points1 when its type has one field (the usual
-- sensor feed: 5 columns to write and compress where series.points has 26), series.points
-- otherwise. Readers read both (series.points_all).
CREATE FUNCTION series_private.narrow(p_body series_private.body)
RETURNS boolean
LANGUAGE sql IMMUTABLE
AS $$
    SELECT num_nonnulls(VARIADIC p_body.kinds[2 : 8]) = 0;
$$;
COMMENT ON FUNCTION series_private.narrow(series_private.body) IS 'Whether the points of body p_body go to series.points1: its type has no field past position 1 (p_body.kinds). Raises nothing.';

-- The lock class of series writers (the first key of pg_advisory_xact_lock(int, int)).
CREATE FUNCTION series_private.lock_class()
RETURNS integer
LANGUAGE sql IMMUTABLE
AS $$
    SELECT 1936029808;  -- 'seri' as four bytes
$$;
COMMENT ON FUNCTION series_private.lock_class() IS 'The first key of the transaction advisory locks series writers take (pg_advisory_xact_lock(class, series_id mod 2^31-1)): a DBA finds them in pg_locks with classid = this. Raises nothing.';

CREATE FUNCTION series_private.claim(p_series bigint[], p_lo timestamptz[], p_hi timestamptz[])
RETURNS bigint[]
LANGUAGE plpgsql VOLATILE
-- Its look-ups by key are index probes, whatever its caller sets.
SET enable_nestloop = on
AS $$
DECLARE
    v_stored bigint[] := '{}';
    v_series bigint;
    v_lo     timestamptz;
    v_hi     timestamptz;
BEGIN
    PERFORM pg_advisory_xact_lock(series_private.lock_class(), (s.id % 2147483647)::integer)
    FROM (SELECT DISTINCT u.id FROM unnest(p_series) u(id) ORDER BY u.id) s;
    -- Only a series whose stored points may reach the call's earliest time can meet it: their
    -- latest time is at most the later of its lasting extent (series.extents, kept by the metadata
    -- updater) and its pending update (series.pending_updates, merged by every write since),
    -- read here after the turns are taken, so with every earlier writer of the series committed.
    -- A feed appending after what it wrote has nothing to probe: a look-up of two rows, where a
    -- probe of the points reads the metadata of every batch the series has in its chunk.
    SELECT array_agg(x.id ORDER BY x.id), array_agg(x.lo ORDER BY x.id), array_agg(x.hi ORDER BY x.id)
    INTO p_series, p_lo, p_hi
    FROM unnest(p_series, p_lo, p_hi) x(id, lo, hi)
    LEFT JOIN series.extents e ON e.series_id = x.id
    LEFT JOIN series.pending_updates u ON u.series_id = x.id
    WHERE x.lo <= greatest(e.last_at, u.data_max);
    IF p_series IS NULL THEN
        RETURN v_stored;
    END IF;
    -- The probe's bounds are parameters: on a compressed chunk TimescaleDB then reads only the
    -- batches whose time range meets them (from the batches' metadata), and on rows the
    -- (series_id, at) index. (Bounds taken only from a join would be compared with every point.)
    IF cardinality(p_series) = 1 THEN
        v_series := p_series[1];
        v_lo := p_lo[1];
        v_hi := p_hi[1];
        IF EXISTS (SELECT FROM series.points_all p WHERE p.series_id = v_series AND p.at BETWEEN v_lo AND v_hi) THEN
            v_stored := p_series;
        END IF;
        RETURN v_stored;
    END IF;
    -- Many series (a seriesBatch): one probe for all, within the bounds of all, each series' own
    -- bounds then kept by the join.
    SELECT min(l), max(h) INTO v_lo, v_hi FROM unnest(p_lo, p_hi) u(l, h);
    RETURN ARRAY(SELECT DISTINCT x.id
                 FROM series.points_all p
                 JOIN unnest(p_series, p_lo, p_hi) x(id, lo, hi) ON p.series_id = x.id AND p.at BETWEEN x.lo AND x.hi
                 WHERE p.series_id = ANY (p_series) AND p.at BETWEEN v_lo AND v_hi
                 ORDER BY 1);
END
$$;
COMMENT ON FUNCTION series_private.claim(bigint[], timestamptz[], timestamptz[]) IS 'Takes the turn of the writers of series p_series (transaction advisory locks, class series_private.lock_class(), in series order; released at commit or rollback) and returns those of them with stored points between p_lo[i] and p_hi[i] (inclusive), ascending: the series whose stored points at the call''s times must go first (series_private.clear). Probes the points only of the series whose extent (series.extents) or pending update (series.pending_updates) reaches p_lo[i]: points are written through the series functions, which keep those, never inserted into the points tables by hand. Raises nothing.';

CREATE FUNCTION series_private.clear(p_series bigint, p_lo timestamptz, p_hi timestamptz, p_times timestamptz[])
RETURNS void
LANGUAGE plpgsql VOLATILE
-- A rewrite decompresses the batches it meets, however many (TimescaleDB's default stops a
-- transaction at 100,000 points decompressed, which a large rewrite passes).
SET timescaledb.max_tuples_decompressed_per_dml_transaction = 0
-- Planned for its values at each call: TimescaleDB decompresses for a DELETE only the batches
-- that the values it planned with can meet; with the generic plan's parameters (which
-- series_private.write_columns asks of what it calls) it decompressed every batch of the chunk.
SET plan_cache_mode = force_custom_plan
AS $$
BEGIN
    -- The times are joined, hashed (`at = ANY (p_times)` compares each stored point with every
    -- time: a rewrite of 10,000 points took a quarter of a second).
    IF NOT EXISTS (SELECT FROM series.points_all p WHERE p.series_id = p_series AND p.at BETWEEN p_lo AND p_hi
                   AND NOT EXISTS (SELECT FROM unnest(p_times) t(at) WHERE t.at = p.at)) THEN
        -- Every stored point of the range is rewritten (a client sending a body again, say): the
        -- range goes whole, and TimescaleDB drops the compressed batches inside it without
        -- decompressing them.
        DELETE FROM series.points p WHERE p.series_id = p_series AND p.at BETWEEN p_lo AND p_hi;
        DELETE FROM series.points1 p WHERE p.series_id = p_series AND p.at BETWEEN p_lo AND p_hi;
    ELSE
        DELETE FROM series.points p USING unnest(p_times) t(at)
        WHERE p.series_id = p_series AND p.at BETWEEN p_lo AND p_hi AND p.at = t.at;
        DELETE FROM series.points1 p USING unnest(p_times) t(at)
        WHERE p.series_id = p_series AND p.at BETWEEN p_lo AND p_hi AND p.at = t.at;
    END IF;
END
$$;
COMMENT ON FUNCTION series_private.clear(bigint, timestamptz, timestamptz, timestamptz[]) IS 'Deletes the stored points of series p_series at the times p_times (all between p_lo and p_hi), which a write is about to replace. Call it holding the series'' turn (series_private.claim). Raises nothing.';

-- The points in the way of a call's rows, for each series of p_stored (series_private.claim's
-- answer), their times gathered in one pass over the rows.
CREATE FUNCTION series_private.clear_stored(p_stored bigint[], p_series bigint[], p_lo timestamptz[], p_hi timestamptz[],
                                            p_row_series bigint[], p_row_at timestamptz[])
RETURNS void
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    v_sid   bigint;
    v_times timestamptz[];
    v_i     integer;
BEGIN
    FOR v_sid, v_times IN
        SELECT r.series_id, array_agg(r.at)
        FROM unnest(p_row_series, p_row_at) r(series_id, at) JOIN unnest(p_stored) s(id) ON s.id = r.series_id
        GROUP BY r.series_id ORDER BY r.series_id
    LOOP
        v_i := array_position(p_series, v_sid);
        PERFORM series_private.clear(v_sid, p_lo[v_i], p_hi[v_i], v_times);
    END LOOP;
END
$$;
COMMENT ON FUNCTION series_private.clear_stored(bigint[], bigint[], timestamptz[], timestamptz[], bigint[], timestamptz[]) IS 'Deletes, for each series of p_stored, the stored points at the times of the call''s rows (p_row_series[j], p_row_at[j]) of that series (series_private.clear), within its bounds p_lo[i] and p_hi[i] (p_series[i] the series). Call it holding the series'' turns (series_private.claim). Raises nothing.';

-- Direct compression has a fixed cost a statement (about 0.6 ms here: the compressor, its flush,
-- the compressed chunk's index) and saves about half of the per-point cost of a row insert, so it
-- pays from a few hundred points a call, however many series share them (100 series of 100 points
-- a call: 5 µs a point against 8 as rows); batches of fewer than a tenth of that per series would
-- compress poorly until the policy recompresses their chunk.
CREATE FUNCTION series_private.compress_on_write(p_points bigint, p_series integer)
RETURNS boolean
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    v_min bigint := settings_private.setting('series.compress_on_write', '500')::bigint;
BEGIN
    IF v_min <= 0 OR p_points < v_min OR p_points * 10 < v_min * greatest(p_series, 1)
       OR (SELECT t.backend FROM partition.tables t WHERE t.relation = 'series.points'::regclass) IS DISTINCT FROM 'timescaledb' THEN
        RETURN false;
    END IF;
    PERFORM set_config('timescaledb.enable_direct_compress_insert', 'on', true);
    -- The writers' rows come sorted by series and time (last write wins sorts them so): the
    -- compressor need not sort them again. The chunk is still marked unordered, as batches of
    -- different calls may overlap in time, so reads merge them.
    PERFORM set_config('timescaledb.enable_direct_compress_insert_sort_batches', 'off', true);
    RETURN true;
END
$$;
COMMENT ON FUNCTION series_private.compress_on_write(bigint, integer) IS 'Whether a call writing p_points points into p_series series writes them straight into compressed batches: on TimescaleDB, when they are at least the setting series.compress_on_write (0: never) and at least a tenth of it per series on average. If so, switches TimescaleDB''s direct compression on for the transaction, without its sort (the rows must come sorted by series_id and at); the caller switches it off again after its insert (series_private.written). Raises 22P02 when the setting is not an integer.';

-- What follows a writer's insert, whatever form its points came in: direct compression switched
-- off again when series_private.compress_on_write switched it on (p_direct), and the metadata
-- update of each series written merged (series_private.schedule).
CREATE FUNCTION series_private.written(p_direct boolean, p_bodies series_private.body[], p_series bigint[],
                                       p_lo timestamptz[], p_hi timestamptz[])
RETURNS void
LANGUAGE plpgsql VOLATILE
AS $$
BEGIN
    IF p_direct THEN
        PERFORM set_config('timescaledb.enable_direct_compress_insert', 'off', true);
    END IF;
    PERFORM series_private.schedule(p_bodies, p_series, p_lo, p_hi);
END
$$;
COMMENT ON FUNCTION series_private.written(boolean, series_private.body[], bigint[], timestamptz[], timestamptz[]) IS 'Ends a write of points into series.points or series.points1: switches TimescaleDB''s direct compression off again when p_direct (series_private.compress_on_write''s answer), and merges the metadata update of each series p_series[i] written from p_lo[i] to p_hi[i] (series_private.schedule, whose errors it raises).';

-- Rows given whole (the flatJSON path, whose cells may be strings): stored as above.
CREATE FUNCTION series_private.store_rows(p_bodies series_private.body[], p_rows series.points[])
RETURNS void
LANGUAGE plpgsql VOLATILE
SET jit = off
AS $$
DECLARE
    v_series bigint[];
    v_lo     timestamptz[];
    v_hi     timestamptz[];
    v_stored bigint[];
    v_direct boolean;
    v_all1   boolean;
    v_any1   boolean;
BEGIN
    SELECT bool_and(series_private.narrow(b)), bool_or(series_private.narrow(b)) INTO v_all1, v_any1 FROM unnest(p_bodies) b;
    SELECT array_agg(x.series_id ORDER BY x.series_id), array_agg(x.lo ORDER BY x.series_id), array_agg(x.hi ORDER BY x.series_id)
    INTO v_series, v_lo, v_hi
    FROM (SELECT r.series_id, min(r.at) AS lo, max(r.at) AS hi FROM unnest(p_rows) r GROUP BY r.series_id) x;
    IF v_series IS NULL THEN
        RETURN;
    END IF;
    v_stored := series_private.claim(v_series, v_lo, v_hi);
    IF cardinality(v_stored) > 0 THEN
        PERFORM series_private.clear_stored(v_stored, v_series, v_lo, v_hi, ARRAY(SELECT r.series_id FROM unnest(p_rows) r),
                                            ARRAY(SELECT r.at FROM unnest(p_rows) r));
    END IF;
    v_direct := series_private.compress_on_write(cardinality(p_rows), cardinality(v_series));
    IF v_any1 THEN
        INSERT INTO series.points1 (series_id, at, n1, s1, t1)
        SELECT r.series_id, r.at, r.n1, r.s1, r.t1 FROM unnest(p_rows) r
        WHERE v_all1 OR r.series_id IN (SELECT b.series_id FROM unnest(p_bodies) b WHERE series_private.narrow(b))
        ORDER BY r.series_id, r.at;
    END IF;
    IF NOT v_all1 THEN
        INSERT INTO series.points
        SELECT * FROM unnest(p_rows) r
        WHERE NOT v_any1 OR r.series_id NOT IN (SELECT b.series_id FROM unnest(p_bodies) b WHERE series_private.narrow(b))
        ORDER BY r.series_id, r.at;
    END IF;
    PERFORM series_private.written(v_direct, p_bodies, v_series, v_lo, v_hi);
END
$$;
COMMENT ON FUNCTION series_private.store_rows(series_private.body[], series.points[]) IS 'Stores the rows p_rows of checked bodies p_bodies (one per series and time, each in its stored form) into series.points1 (series of one field: series_private.narrow) and series.points, replacing stored points at their times: the series'' turns taken and the points in the way deleted first (series_private.claim, series_private.clear), straight into compressed batches when series_private.compress_on_write says so. Merges each series'' metadata update (series_private.written). Raises what series_private.schedule raises.';
