-- High-frequency series (tables: migrations/00023_series_points.sql): the helpers of every stage.
-- A value of a point is stored in three columns of its field's position (n, s, t: see the table's
-- comment); these functions turn a JSON cell into those columns and back. They are SQL functions of
-- one expression, so PostgreSQL inlines them into the set-based statements that use them: a call per
-- cell would cost more than the cell. They are STABLE, not IMMUTABLE, though they depend on nothing
-- but their arguments: PostgreSQL refuses to inline an IMMUTABLE function whose body calls a
-- function it marks STABLE (format, timestamptz arithmetic, float8 output), and runs it as a call
-- of its own per row, a hundred times slower.
--
-- Errors are the account domain's (server/account_errors.go maps them to Pryv's ids): SASTR
-- (invalid-request-structure) for a body that breaks the flatJSON or seriesBatch rules, SAINV
-- (invalid-parameters-format) for bad query parameters, SAOPR (invalid-operation) for a holder that
-- cannot take points, SANFD, SAFRB and SAAUT from account_private.series_holder and access.

CREATE SCHEMA series_private;
COMMENT ON SCHEMA series_private IS 'Internals of high-frequency series (sql/series/): not a public contract. Rebuilt with schema api.';

-- A number of more than 18 significant digits (or too large or small for a bigint of digits) is
-- kept as the double it stands for: its shortest decimal form, which reads back as that double.
CREATE FUNCTION series_private.decimal_slow(p_x numeric, OUT n bigint, OUT s smallint)
LANGUAGE plpgsql IMMUTABLE
SET extra_float_digits = 1
AS $$
DECLARE
    v_m text[];
BEGIN
    v_m := regexp_match(p_x::float8::text, '^(-?)(\d+)(?:\.(\d+))?(?:e([+-]\d+))?$');
    n := (v_m[1] || v_m[2] || coalesce(v_m[3], ''))::bigint;
    s := (length(coalesce(v_m[3], '')) - coalesce(v_m[4], '0')::integer)::smallint;
EXCEPTION WHEN numeric_value_out_of_range THEN
    n := NULL;
    s := NULL;
END
$$;
COMMENT ON FUNCTION series_private.decimal_slow(numeric, OUT bigint, OUT smallint) IS 'The stored form (n, s: value = n / 10^s) of a number too long for the plain form: the shortest decimal form of the double nearest p_x, so it reads back as that double. NULL, NULL when p_x is out of the range of double precision. Raises nothing.';

CREATE FUNCTION series_private.decimal_fits(p_t text)
RETURNS boolean
LANGUAGE sql STABLE
AS $$
    SELECT length(p_t) - (strpos(p_t, '.') > 0)::integer - (left(p_t, 1) = '-')::integer <= 18;
$$;
COMMENT ON FUNCTION series_private.decimal_fits(text) IS 'Whether the text of a trimmed numeric p_t has at most 18 digits, so its digits fit a bigint exactly. Raises nothing.';

CREATE FUNCTION series_private.decimal_n(p_x numeric)
RETURNS bigint
LANGUAGE sql STABLE
AS $$
    SELECT CASE WHEN p_x IS NULL THEN NULL
                WHEN series_private.decimal_fits(trim_scale(p_x)::text) THEN replace(trim_scale(p_x)::text, '.', '')::bigint
                ELSE (series_private.decimal_slow(p_x)).n END;
$$;
COMMENT ON FUNCTION series_private.decimal_n(numeric) IS 'The digits n of number p_x as stored (value = n / 10^s): exact for up to 18 significant digits, else those of the nearest double. NULL for NULL or a number beyond double precision. Raises nothing.';

CREATE FUNCTION series_private.decimal_s(p_x numeric)
RETURNS smallint
LANGUAGE sql STABLE
AS $$
    SELECT CASE WHEN p_x IS NULL THEN NULL
                WHEN series_private.decimal_fits(trim_scale(p_x)::text) THEN scale(trim_scale(p_x))::smallint
                ELSE (series_private.decimal_slow(p_x)).s END;
$$;
COMMENT ON FUNCTION series_private.decimal_s(numeric) IS 'The scale s of number p_x as stored (value = n / 10^s, series_private.decimal_n). NULL for NULL or a number beyond double precision. Raises nothing.';

-- Powers of ten as numeric constants (an array lookup, not a power() per value).
CREATE FUNCTION series_private.pow10(p_exp integer)
RETURNS numeric
LANGUAGE sql STABLE
AS $$
    SELECT ('{1,1e1,1e2,1e3,1e4,1e5,1e6,1e7,1e8,1e9,1e10,1e11,1e12,1e13,1e14,1e15,1e16,1e17,1e18}'::numeric[])[p_exp + 1];
$$;
COMMENT ON FUNCTION series_private.pow10(integer) IS '10^p_exp for p_exp from 0 to 18; NULL otherwise. Raises nothing.';

-- The scale a plain number needs (p_t: the number with trailing zeros trimmed): the body's numbers
-- of a field are stored at the largest of these.
CREATE FUNCTION series_private.plain_scale(p_t numeric)
RETURNS integer
LANGUAGE sql STABLE
AS $$
    SELECT CASE WHEN scale(p_t) <= 18 AND abs(p_t) * series_private.pow10(scale(p_t)) < 1e18 THEN scale(p_t) END;
$$;
COMMENT ON FUNCTION series_private.plain_scale(numeric) IS 'The decimal scale of p_t (a number with trailing zeros trimmed) when its digits fit 18 at that scale; NULL for NULL or a longer number (stored by series_private.decimal_n and decimal_s). Raises nothing.';

CREATE FUNCTION series_private.scaled_n(p_x numeric, p_t numeric, p_scale integer, p_body_scale integer)
RETURNS bigint
LANGUAGE sql STABLE
AS $$
    SELECT CASE WHEN p_x IS NULL THEN NULL
                WHEN p_scale <= p_body_scale AND abs(p_t) < series_private.pow10(18 - p_body_scale)
                    THEN (p_t * series_private.pow10(p_body_scale))::bigint
                ELSE series_private.decimal_n(p_x) END;
$$;
COMMENT ON FUNCTION series_private.scaled_n(numeric, numeric, integer, integer) IS 'Column n of number p_x (p_t: trimmed, p_scale: its plain scale) stored at the body''s scale p_body_scale when it fits 18 digits there, else at its own (series_private.decimal_n). NULL for NULL. Raises nothing.';

CREATE FUNCTION series_private.scaled_s(p_x numeric, p_t numeric, p_scale integer, p_body_scale integer)
RETURNS smallint
LANGUAGE sql STABLE
AS $$
    SELECT CASE WHEN p_x IS NULL THEN NULL
                WHEN p_scale <= p_body_scale AND abs(p_t) < series_private.pow10(18 - p_body_scale) THEN p_body_scale::smallint
                ELSE series_private.decimal_s(p_x) END;
$$;
COMMENT ON FUNCTION series_private.scaled_s(numeric, numeric, integer, integer) IS 'Column s of number p_x stored as series_private.scaled_n stores it: the body''s scale, or its own. NULL for NULL. Raises nothing.';

-- A JSON number, or a string holding one (CSV cells, and Pryv's clients that send numbers as
-- strings). Unlike Pryv's ^\d+(\.\d+)?$, negative numbers and exponents are read too.
CREATE FUNCTION series_private.cell_number(p_c jsonb)
RETURNS numeric
LANGUAGE sql STABLE
AS $$
    SELECT CASE jsonb_typeof(p_c)
               WHEN 'number' THEN p_c::numeric
               WHEN 'string' THEN CASE WHEN (p_c #>> '{}') ~ '^\s*-?[0-9]+(\.[0-9]+)?([eE][-+]?[0-9]{1,3})?\s*$'
                                       THEN btrim(p_c #>> '{}')::numeric END
           END;
$$;
COMMENT ON FUNCTION series_private.cell_number(jsonb) IS 'The number a cell p_c holds: a JSON number, or a string of one (-?digits, optional fraction and exponent of up to 3 digits, blanks around); NULL for anything else. Raises nothing.';

CREATE FUNCTION series_private.cell_n(p_c jsonb, p_kind text)
RETURNS bigint
LANGUAGE sql STABLE
AS $$
    SELECT CASE p_kind
               WHEN 'number' THEN series_private.decimal_n(series_private.cell_number(p_c))
               WHEN 'integer' THEN CASE WHEN series_private.cell_number(p_c) = trunc(series_private.cell_number(p_c))
                                             AND abs(series_private.cell_number(p_c)) < 9223372036854775807
                                        THEN series_private.cell_number(p_c)::bigint END
               WHEN 'boolean' THEN CASE WHEN p_c IN ('true', '"true"') THEN 1 WHEN p_c IN ('false', '"false"') THEN 0 END
           END;
$$;
COMMENT ON FUNCTION series_private.cell_n(jsonb, text) IS 'Column n of cell p_c of a field of kind p_kind: a number''s digits, an integer, a boolean as 1 or 0 (true, false, "true", "false"); NULL for a string field, a null cell or a value of the wrong kind. Raises nothing.';

CREATE FUNCTION series_private.cell_s(p_c jsonb, p_kind text)
RETURNS smallint
LANGUAGE sql STABLE
AS $$
    SELECT CASE p_kind
               WHEN 'number' THEN series_private.decimal_s(series_private.cell_number(p_c))
               WHEN 'integer' THEN CASE WHEN series_private.cell_number(p_c) IS NOT NULL THEN 0::smallint END
           END;
$$;
COMMENT ON FUNCTION series_private.cell_s(jsonb, text) IS 'Column s of cell p_c of a field of kind p_kind: a number''s scale, 0 for an integer, NULL otherwise. Raises nothing.';

CREATE FUNCTION series_private.cell_t(p_c jsonb, p_kind text)
RETURNS text
LANGUAGE sql STABLE
AS $$
    SELECT CASE WHEN p_kind = 'string' AND jsonb_typeof(p_c) IN ('string', 'number', 'boolean') THEN p_c #>> '{}' END;
$$;
COMMENT ON FUNCTION series_private.cell_t(jsonb, text) IS 'Column t of cell p_c of a field of kind p_kind: for a string field, the string (a number or boolean as its JSON text, as Pryv coerces it); NULL otherwise. Raises nothing.';

-- Why a cell cannot be stored: the kind's rule broken, or a null in a required field. NULL: fine.
-- p_x is the number the cell holds (series_private.cell_number), computed once by the caller.
CREATE FUNCTION series_private.cell_problem(p_c jsonb, p_x numeric, p_kind text, p_required boolean, p_field text)
RETURNS text
LANGUAGE sql STABLE
AS $$
    SELECT CASE
        WHEN p_kind IS NULL OR p_c IS NULL THEN NULL
        WHEN p_c = 'null' THEN CASE WHEN p_required THEN format('field %s is required and may not be null', p_field) END
        WHEN p_kind = 'string' THEN CASE WHEN jsonb_typeof(p_c) NOT IN ('string', 'number', 'boolean')
                                         THEN format('field %s must be a string, not %s', p_field, left(p_c::text, 40)) END
        WHEN p_kind = 'boolean' THEN CASE WHEN p_c NOT IN ('true', 'false', '"true"', '"false"')
                                          THEN format('field %s must be a boolean, not %s', p_field, left(p_c::text, 40)) END
        WHEN p_x IS NULL THEN format('field %s must be a number, not %s', p_field, left(p_c::text, 40))
        WHEN p_kind = 'integer' AND (p_x <> trunc(p_x) OR abs(p_x) > 9223372036854775807)
            THEN format('field %s must be an integer, not %s', p_field, left(p_c::text, 40))
        WHEN abs(p_x) > 1.7976931348623157e308 THEN format('field %s is out of range: %s', p_field, left(p_c::text, 40))
    END;
$$;
COMMENT ON FUNCTION series_private.cell_problem(jsonb, numeric, text, boolean, text) IS 'Why cell p_c (NULL: the field is not in the point) cannot be the value of field p_field of kind p_kind (number, integer, boolean, string; NULL: no such position), required or not; p_x is the number the cell holds (series_private.cell_number; NULL when none). NULL when it can. Raises nothing.';

CREATE FUNCTION series_private.fail(p_message text)
RETURNS boolean
LANGUAGE plpgsql IMMUTABLE
AS $$
BEGIN
    RAISE EXCEPTION '%', p_message USING ERRCODE = 'SASTR';
END
$$;
COMMENT ON FUNCTION series_private.fail(text) IS 'Raises SASTR (invalid-request-structure) with message p_message: how a set-based statement refuses a point it meets (the whole write is refused). Returns nothing.';

CREATE FUNCTION series_private.pow10_int(p_exp integer)
RETURNS bigint
LANGUAGE sql STABLE
AS $$
    SELECT ('{1,10,100,1000,10000,100000,1000000,10000000,100000000,1000000000,10000000000,100000000000,1000000000000,10000000000000,100000000000000,1000000000000000,10000000000000000,100000000000000000,1000000000000000000}'::bigint[])[p_exp + 1];
$$;
COMMENT ON FUNCTION series_private.pow10_int(integer) IS '10^p_exp as a bigint for p_exp from 0 to 18; NULL otherwise. Raises nothing.';

-- Reading: a decimal from its digits and scale with integer arithmetic only (numeric input and
-- output cost several times more, and a large read formats millions of them).
CREATE FUNCTION series_private.decimal_text(p_n bigint, p_s integer)
RETURNS text
LANGUAGE sql STABLE
AS $$
    SELECT CASE WHEN p_n < 0 THEN '-' ELSE '' END
           || (abs(p_n) / series_private.pow10_int(p_s))::text
           || CASE WHEN abs(p_n) % series_private.pow10_int(p_s) = 0 THEN ''
                   ELSE '.' || rtrim(lpad((abs(p_n) % series_private.pow10_int(p_s))::text, p_s, '0'), '0') END;
$$;
COMMENT ON FUNCTION series_private.decimal_text(bigint, integer) IS 'The decimal text of p_n / 10^p_s (p_s from 1 to 18), without trailing zeros: (2010, 2) is 20.1, (-5, 2) is -0.05. Raises nothing for p_n above the smallest bigint.';

-- Reading: the JSON text of a stored value, exact (a number as the decimal it was given in).
CREATE FUNCTION series_private.value_json(p_n bigint, p_s smallint, p_t text, p_kind text)
RETURNS text
LANGUAGE sql STABLE
AS $$
    SELECT CASE
        WHEN p_kind = 'string' THEN coalesce(to_json(p_t)::text, 'null')
        WHEN p_n IS NULL THEN 'null'
        WHEN p_kind = 'boolean' THEN CASE WHEN p_n <> 0 THEN 'true' ELSE 'false' END
        WHEN p_s = 0 THEN p_n::text
        WHEN p_s BETWEEN 1 AND 18 THEN series_private.decimal_text(p_n, p_s)
        ELSE p_n::text || 'e' || (-p_s)::text
    END;
$$;
COMMENT ON FUNCTION series_private.value_json(bigint, smallint, text, text) IS 'The JSON text of a stored value (columns n, s, t of a field of kind p_kind): a number as the decimal n / 10^s without trailing zeros (exponent form beyond 18 decimals or for trailing zeros), an integer, true or false, a JSON string, or null. Raises nothing.';

CREATE FUNCTION series_private.value_csv(p_n bigint, p_s smallint, p_t text, p_kind text)
RETURNS text
LANGUAGE sql STABLE
AS $$
    SELECT CASE
        WHEN p_kind = 'string' THEN CASE WHEN p_t IS NULL THEN ''
                                         WHEN p_t ~ '[",\r\n]' OR p_t = '' THEN '"' || replace(p_t, '"', '""') || '"'
                                         ELSE p_t END
        WHEN p_n IS NULL THEN ''
        ELSE series_private.value_json(p_n, p_s, p_t, p_kind)
    END;
$$;
COMMENT ON FUNCTION series_private.value_csv(bigint, smallint, text, text) IS 'The CSV cell of a stored value: as series_private.value_json, strings quoted when they hold a quote, comma or line break (or are empty), an absent value empty. Raises nothing.';

-- Times: microseconds since the epoch, exact both ways for the range of series points. A write
-- converts every point's time one way, a read the other: where TimescaleDB is installed, with its
-- own conversions (a subtraction: 6 to 9 ns a time, against 52 for interval arithmetic and 80
-- for date_part).
DO $times$
DECLARE
    v_ts     boolean := pg_catalog.to_regprocedure('_timescaledb_functions.to_timestamp(bigint)') IS NOT NULL
                        AND pg_catalog.to_regprocedure('_timescaledb_functions.to_unix_microseconds(timestamptz)') IS NOT NULL;
    -- Without TimescaleDB: date_part's double has a resolution finer than a quarter microsecond
    -- in the range of series points, and costs less than extract's numeric.
    v_us_at  text := CASE WHEN v_ts THEN '_timescaledb_functions.to_timestamp(p_us)'
                          ELSE 'timestamptz ''epoch'' + p_us * interval ''1 microsecond''' END;
    v_at_us  text := CASE WHEN v_ts THEN '_timescaledb_functions.to_unix_microseconds(p_at)'
                          ELSE 'round(date_part(''epoch'', p_at) * 1000000::double precision)::bigint' END;
BEGIN
    EXECUTE format('CREATE FUNCTION series_private.us_at(p_us bigint) RETURNS timestamptz LANGUAGE sql STABLE AS %L',
                   'SELECT ' || v_us_at);
    EXECUTE format('CREATE FUNCTION series_private.at_us(p_at timestamptz) RETURNS bigint LANGUAGE sql STABLE AS %L',
                   'SELECT ' || v_at_us);
END
$times$;
COMMENT ON FUNCTION series_private.us_at(bigint) IS 'The time p_us microseconds after the epoch (TimescaleDB''s _timescaledb_functions.to_timestamp where it is installed, interval arithmetic otherwise: the same time). Raises nothing for the range series points take.';
COMMENT ON FUNCTION series_private.at_us(timestamptz) IS 'Microseconds since the epoch of p_at, exact for the range of series points (TimescaleDB''s _timescaledb_functions.to_unix_microseconds where it is installed, date_part otherwise: the same number). Raises nothing.';

-- How a message names the operation of a seriesBatch it is about: Pryv's data[i], from 0.
CREATE FUNCTION series_private.batch_prefix(p_n integer)
RETURNS text
LANGUAGE sql IMMUTABLE
AS $$
    SELECT 'data[' || p_n - 1 || ']: ';
$$;
COMMENT ON FUNCTION series_private.batch_prefix(integer) IS 'The prefix of the messages about operation p_n (from 1) of a seriesBatch: data[p_n - 1]: (Pryv''s words). Raises nothing.';

CREATE FUNCTION series_private.holder_us(p_time double precision)
RETURNS bigint
LANGUAGE sql STABLE
AS $$
    SELECT round(p_time * 1000000::double precision)::bigint;
$$;
COMMENT ON FUNCTION series_private.holder_us(double precision) IS 'A holder event''s time (seconds since the epoch, double precision) in microseconds: the origin of deltaTime. Raises nothing.';

CREATE FUNCTION series_private.seconds_text(p_us bigint)
RETURNS text
LANGUAGE sql STABLE
AS $$
    SELECT CASE WHEN p_us % 1000000 = 0 THEN (p_us / 1000000)::text ELSE series_private.decimal_text(p_us, 6) END;
$$;
COMMENT ON FUNCTION series_private.seconds_text(bigint) IS 'p_us microseconds as the JSON text of seconds, exact (0.001, 1700000000.5). Raises nothing.';

-- The fields of a holder's type as arrays by position, in one row: what each append checks its
-- fields against, without a set-returning call (a tuplestore) and a loop over its rows.
CREATE FUNCTION series_private.type_layout(p_holder account.events, OUT names text[], OUT kinds text[], OUT required boolean[])
LANGUAGE plpgsql STABLE
AS $$
BEGIN
    SELECT array_agg(f.field ORDER BY p), array_agg(f.kind ORDER BY p), array_agg(coalesce(f.required, false) ORDER BY p)
    INTO names, kinds, required
    FROM generate_series(1, 8) p
    LEFT JOIN account.series_type_fields f ON f.type = substr(p_holder.type, 8) AND f.position = p;
    IF EXISTS (SELECT FROM account.series_type_fields f WHERE f.type = substr(p_holder.type, 8) AND f.position > 8) THEN
        RAISE EXCEPTION 'series type % has more than 8 fields: series store up to 8', substr(p_holder.type, 8)
            USING ERRCODE = 'SAOPR';
    END IF;
END
$$;
COMMENT ON FUNCTION series_private.type_layout(account.events) IS 'The fields of series holder p_holder''s type (account.series_type_fields) as arrays of 8, by position (1 to 8, the columns of series.points): names, kinds and whether required (NULL name and kind, false, where the type has no field). Raises SAOPR when the type has a field past position 8 (a DBA''s addition series.points cannot store).';

-- The same as rows, for the reads.
CREATE FUNCTION series_private.type_fields(p_holder account.events)
RETURNS TABLE (field_position integer, field text, kind text, required boolean)
LANGUAGE sql STABLE
AS $$
    SELECT p, l.names[p], l.kinds[p], l.required[p]
    FROM series_private.type_layout(p_holder) l, generate_series(1, 8) p
    WHERE l.names[p] IS NOT NULL
    ORDER BY p;
$$;
COMMENT ON FUNCTION series_private.type_fields(account.events) IS 'The fields of series holder p_holder''s type, one row each (series_private.type_layout): position (1 to 8, the columns of series.points), name, kind and whether required, in order. Raises SAOPR when the type has a field past position 8.';
