-- Belts, the registry: a belt is an event consumer (event.consumers, named belt:{id}) with a
-- callback and the settings Granary users gave as environment variables. The API speaks Granary's
-- Belt API document (id as a string, eventTypes, extractorFn, fetchProfile, extraEnv, status, ...)
-- plus sqlCallback, Silo's own field for a SQL callback, and the counters summed over the
-- consumer's lanes.
--
-- Why the input is checked in SQL and not in Go: psql users call the same functions as HTTP, so the
-- rules (known fields, types, ranges of the settings, the callback's validation: the belt document,
-- sql/belt/02_document.sql) live in one place.
-- A callback that fails validation is no error: the belt is stored FAILED with the reason, as
-- Granary's belt "transitions into FAILED state" (and START validates again). A Python belt on a
-- database without the Python runtime (sql/belt/07_python_4_install.sql, present only with plpython3u) is
-- an error (SBPYN): there is nothing to fail later, and SQL belts work without it.
--
-- Locks: writers of a belt's definition and status take its row (FOR UPDATE, which does not block
-- the key-share locks of dead letters being written). api.belt_delete takes the rows of the
-- consumer's lanes first, in lane order, then deletes the belt row: a processing step that holds
-- lanes and then writes dead letters (which reference the belt row) takes them in the same order,
-- so deleting a belt waits for running steps instead of deadlocking with them.
--
-- Changes are published on channel belts (kind state, payload {"belt_id", "status"}, admins only)
-- in the writing transaction: created, updated, started, stopped, failed, deleted (status DELETED).

-- The document of every belt: Granary's field names, the consumer's event types and the counters.
CREATE VIEW belt_private.docs AS
SELECT b.id, b.name, jsonb_build_object(
           'id', b.id::text,
           'name', b.name,
           'description', b.description,
           'author', b.author,
           'labels', b.labels,
           'version', b.version,
           'created', (extract(epoch FROM b.created) * 1000)::bigint,
           'updated', (extract(epoch FROM b.updated) * 1000)::bigint,
           'eventTypes', to_jsonb(c.event_types),
           'extractorFn', b.extractor_fn,
           'sqlCallback', b.sql_callback,
           'fetchProfile', b.fetch_profile,
           'profileType', b.profile_type,
           'extraEnv', b.extra_env,
           'settings', jsonb_build_object(
               'callbackTimeoutSec', b.callback_timeout_sec,
               'callbackLongrunningSec', b.callback_longrunning_sec,
               'retryBackOffInitialIntervalSec', b.retry_initial_sec,
               'retryBackOffIntervalMaxSec', b.retry_max_sec,
               'retryBackOffMultiplier', b.retry_multiplier,
               'retryMaxRetries', b.retry_max_retries),
           'status', b.status,
           'statusReason', b.status_reason,
           'processed', s.processed,
           'failed', s.failed,
           'retried', s.retried,
           'deadLettered', s.dead_lettered,
           'longRunning', s.long_running) AS doc
FROM belt.belts b
JOIN event.consumers c ON c.id = b.consumer_id
CROSS JOIN LATERAL (
    SELECT coalesce(sum(l.processed), 0) AS processed, coalesce(sum(l.failed), 0) AS failed,
           coalesce(sum(l.retried), 0) AS retried, coalesce(sum(l.dead_lettered), 0) AS dead_lettered,
           coalesce(sum(l.long_running), 0) AS long_running
    FROM event.consumer_lanes l WHERE l.consumer_id = b.consumer_id
) s;
COMMENT ON VIEW belt_private.docs IS
    'Each belt (id, name) with its document (doc), as api.belt_get answers it: id (a string), name, description, author, labels, version, created and updated (epoch milliseconds), eventTypes (its consumer''s), extractorFn (Python source) or sqlCallback (the function''s signature), the other null, fetchProfile, profileType, extraEnv (as given), settings (the effective values of extraEnv''s settings, defaults included), status, statusReason (why it is FAILED, else null) and the counters processed, failed, retried, deadLettered, longRunning (sums over the consumer''s lanes).';

CREATE FUNCTION belt_private.doc(p_id bigint)
RETURNS jsonb
LANGUAGE sql STABLE
AS $$
    SELECT d.doc FROM belt_private.docs d WHERE d.id = p_id;
$$;
COMMENT ON FUNCTION belt_private.doc(bigint) IS
    'The document of belt p_id (belt_private.docs), NULL when there is none. Raises nothing.';

CREATE FUNCTION belt_private.publish_state(p_id bigint, p_status text)
RETURNS void
LANGUAGE sql VOLATILE
AS $$
    SELECT api.change_publish('belts', 'state', jsonb_build_object('belt_id', p_id, 'status', p_status));
$$;
COMMENT ON FUNCTION belt_private.publish_state(bigint, text) IS
    'Publishes on channel belts (admins only) that belt p_id is now in status p_status (RUNNING, STOPPED, FAILED, or DELETED): kind state, payload {"belt_id", "status"}, in the caller''s transaction. Raises nothing of its own.';

CREATE FUNCTION belt_private.set_status(p_id bigint, p_status text, p_reason text DEFAULT NULL)
RETURNS boolean
LANGUAGE plpgsql VOLATILE
AS $$
BEGIN
    UPDATE belt.belts
    SET status = p_status, status_reason = CASE WHEN p_status = 'FAILED' THEN p_reason END, updated = now()
    WHERE id = p_id AND (status, status_reason) IS DISTINCT FROM (p_status, CASE WHEN p_status = 'FAILED' THEN p_reason END);
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    PERFORM belt_private.publish_state(p_id, p_status);
    RETURN true;
END
$$;
COMMENT ON FUNCTION belt_private.set_status(bigint, text, text) IS
    'Sets belt p_id''s status to p_status (RUNNING, STOPPED or FAILED) and its status_reason to p_reason for FAILED (NULL otherwise), and publishes the state on channel belts: for processing that finds a belt''s callback broken (FAILED). Returns whether anything changed (false also when there is no belt p_id). Raises 23514 (check_violation) for another status.';

CREATE FUNCTION api.belt_create(p_belt jsonb)
RETURNS jsonb
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    r       belt.belts := belt_private.parse_input(p_belt, NULL);
    v_types text[] := belt_private.event_types_of(p_belt);
BEGIN
    IF EXISTS (SELECT FROM belt.belts b WHERE b.name = r.name) THEN
        RAISE EXCEPTION '% exists already', r.name USING ERRCODE = 'SLCNF',
            HINT = 'Belt names are unique: change that belt (api.belt_update, PUT /belts/{id}) or choose another name.';
    END IF;
    r := belt_private.checked(r);
    r.id := nextval(pg_get_serial_sequence('belt.belts', 'id'));
    r.consumer_id := event_private.consumer_create('belt:' || r.id, v_types);
    BEGIN
        INSERT INTO belt.belts OVERRIDING SYSTEM VALUE SELECT (r).*;
    EXCEPTION WHEN unique_violation THEN
        RAISE EXCEPTION '% exists already', r.name USING ERRCODE = 'SLCNF';
    END;
    PERFORM belt_private.publish_state(r.id, r.status);
    RETURN belt_private.doc(r.id);
END
$$;
COMMENT ON FUNCTION api.belt_create(jsonb) IS
    'Registers a belt (HTTP POST /belts). p_belt: the belt document, Granary''s Belt API fields: name (required, unique, 1 to 255 characters), description, author, labels (a JSON object), eventTypes (required: the event types it consumes, strings of 1 to 255 characters), exactly one callback: extractorFn (Python source of callback.py, with execute(event_headers, event_payload[, profile])) or sqlCallback (Silo''s own: a SQL function (event_headers jsonb, event_payload jsonb[, profile jsonb]) returning jsonb, by name, schema.name or signature), fetchProfile (FALSE default, TRUE, LAZY; case-insensitive, JSON booleans too), profileType (default _d), extraEnv ([{"name", "value"}]: CALLBACK_TIMEOUT_SEC, CALLBACK_LONGRUNNING_SEC, RETRY_BACK_OFF_INITIAL_INTERVAL_SEC, RETRY_BACK_OFF_INTERVAL_MAX_SEC, RETRY_BACK_OFF_MULTIPLIER, RETRY_MAX_RETRIES with ranges and defaults as belt_private.apply_env says; FETCH_PROFILE and PROFILE_TYPE too, where the fields fetchProfile and profileType win; other names are kept for a Python callback''s os.environ). Answered fields (id, version, status, counters ...) and Granary''s deployment fields (kubernetesName, replicas, millicpu, memory, requirementsPy, extractorVersion, volumes, volumeMounts, partitionOffsets, secret*, editor, viewer) are accepted and ignored: not stored, not answered. The callback is validated (belt_private.checked): a belt whose callback does not validate is stored with status FAILED and the reason in statusReason, else RUNNING. Creates its event consumer belt:{id} (event_private.consumer_create), which receives the events of its types stored from then on. Returns the belt''s document (api.belt_get). Publishes kind state on channel belts. Raises SLINV for an invalid document (not an object, an unknown field, a wrong type, no name, no callback or two, invalid event types, a setting out of range), SLCNF "<name> exists already" for a name in use, SBPYN for a Python belt when the database has no PL/Python (plpython3u; SQL belts work without it).';

CREATE FUNCTION api.belt_update(p_id bigint, p_belt jsonb)
RETURNS jsonb
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    v_old belt.belts;
    r     belt.belts;
BEGIN
    SELECT * INTO v_old FROM belt.belts b WHERE b.id = p_id FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'no belt %', coalesce(p_id::text, 'NULL') USING ERRCODE = 'SLNFD';
    END IF;
    r := belt_private.parse_input(p_belt, v_old);
    IF r.name <> v_old.name AND EXISTS (SELECT FROM belt.belts b WHERE b.name = r.name) THEN
        RAISE EXCEPTION '% exists already', r.name USING ERRCODE = 'SLCNF';
    END IF;
    IF p_belt ? 'eventTypes' THEN
        PERFORM event_private.consumer_set_types(v_old.consumer_id, belt_private.event_types_of(p_belt));
    END IF;
    r := belt_private.checked(r);
    r.version := v_old.version + 1;
    BEGIN
        UPDATE belt.belts b
        SET name = r.name, description = r.description, author = r.author, labels = r.labels, version = r.version,
            language = r.language, sql_callback = r.sql_callback, extractor_fn = r.extractor_fn,
            fetch_profile = r.fetch_profile, profile_type = r.profile_type, extra_env = r.extra_env,
            callback_timeout_sec = r.callback_timeout_sec, callback_longrunning_sec = r.callback_longrunning_sec,
            retry_initial_sec = r.retry_initial_sec, retry_max_sec = r.retry_max_sec,
            retry_multiplier = r.retry_multiplier, retry_max_retries = r.retry_max_retries,
            status = r.status, status_reason = r.status_reason, updated = r.updated
        WHERE b.id = p_id;
    EXCEPTION WHEN unique_violation THEN
        RAISE EXCEPTION '% exists already', r.name USING ERRCODE = 'SLCNF';
    END;
    PERFORM belt_private.publish_state(p_id, r.status);
    RETURN belt_private.doc(p_id);
END
$$;
COMMENT ON FUNCTION api.belt_update(bigint, jsonb) IS
    'Changes belt p_id (HTTP PUT /belts/{id}). p_belt: a belt document as for api.belt_create, in which every field given replaces the old value and every field left out keeps it (null clears description and author; giving extractorFn or sqlCallback replaces the callback, even of the other language; extraEnv given replaces the whole list, and settings it leaves out return to their defaults). version goes up by one on every call. Changed eventTypes apply to events stored from then on (event_private.consumer_set_types); deliveries already made stay. The callback is validated again: status FAILED with the reason when it does not validate; else RUNNING, or STOPPED when it was STOPPED. Returns the belt''s document. Publishes kind state on channel belts. Raises SLNFD when there is no belt p_id, SLINV for an invalid document, SLCNF "<name> exists already" when the new name is another belt''s, SBPYN for a Python callback when the database has no PL/Python.';

CREATE FUNCTION api.belt_delete(p_id bigint)
RETURNS boolean
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    v_consumer bigint;
BEGIN
    SELECT b.consumer_id INTO v_consumer FROM belt.belts b WHERE b.id = p_id;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    PERFORM FROM event.consumer_lanes l WHERE l.consumer_id = v_consumer ORDER BY l.lane FOR UPDATE;
    DELETE FROM belt.belts b WHERE b.id = p_id;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    PERFORM event_private.consumer_drop(v_consumer);
    PERFORM belt_private.publish_state(p_id, 'DELETED');
    RETURN true;
END
$$;
COMMENT ON FUNCTION api.belt_delete(bigint) IS
    'Deletes belt p_id (HTTP DELETE /belts/{id}) with its dead letters and its event consumer, whose pending deliveries go with it (the events stay in the store). Waits for processing steps that hold its lanes. Returns true, or false when there is no belt p_id (HTTP answers 404). Publishes kind state, status DELETED, on channel belts. Raises nothing of its own.';

CREATE FUNCTION api.belt_get(p_id bigint)
RETURNS jsonb
LANGUAGE plpgsql STABLE
AS $$
DECLARE
    v jsonb := belt_private.doc(p_id);
BEGIN
    IF v IS NULL THEN
        RAISE EXCEPTION 'no belt %', coalesce(p_id::text, 'NULL') USING ERRCODE = 'SLNFD';
    END IF;
    RETURN v;
END
$$;
COMMENT ON FUNCTION api.belt_get(bigint) IS
    'Belt p_id''s document (HTTP GET /belts/{id}): id (a string), name, description, author, labels, version, created and updated (epoch milliseconds), eventTypes, extractorFn or sqlCallback (the other null; sqlCallback as the function''s full signature once it validated), fetchProfile, profileType, extraEnv (as given), settings (effective values: callbackTimeoutSec, callbackLongrunningSec, retryBackOffInitialIntervalSec, retryBackOffIntervalMaxSec, retryBackOffMultiplier, retryMaxRetries), status (RUNNING, STOPPED, FAILED), statusReason (why FAILED, else null), and the counters processed, failed, retried, deadLettered, longRunning (sums over its consumer''s lanes). Raises SLNFD when there is no belt p_id.';

CREATE FUNCTION api.belt_list(p_offset integer DEFAULT 0, p_pagesize integer DEFAULT 20)
RETURNS jsonb
LANGUAGE plpgsql STABLE
AS $$
BEGIN
    IF p_offset IS NULL OR p_offset < 0 OR p_pagesize IS NULL OR p_pagesize NOT BETWEEN 1 AND 1000 THEN
        RAISE EXCEPTION 'offset must be 0 or more and pagesize from 1 to 1000' USING ERRCODE = 'SLINV',
            DETAIL = format('got offset %s, pagesize %s', coalesce(p_offset::text, 'NULL'), coalesce(p_pagesize::text, 'NULL'));
    END IF;
    RETURN jsonb_build_object(
        'totalCount', (SELECT count(*) FROM belt.belts),
        'items', coalesce((SELECT jsonb_agg(d.doc ORDER BY d.id)
                           FROM (SELECT x.id, x.doc FROM belt_private.docs x ORDER BY x.id OFFSET p_offset LIMIT p_pagesize) d),
                          '[]'));
END
$$;
COMMENT ON FUNCTION api.belt_list(integer, integer) IS
    'A page of the belts in order of id (HTTP GET /belts): {"totalCount": every belt, "items": [documents as api.belt_get answers them]}. p_offset (default 0): belts skipped; p_pagesize (default 20, at most 1000): belts answered. Raises SLINV for a NULL or negative offset or a pagesize outside 1 to 1000.';

CREATE FUNCTION api.belt_state(p_id bigint)
RETURNS jsonb
LANGUAGE plpgsql STABLE
AS $$
DECLARE
    v jsonb;
BEGIN
    SELECT jsonb_build_object('status', b.status, 'reason', b.status_reason) INTO v FROM belt.belts b WHERE b.id = p_id;
    IF v IS NULL THEN
        RAISE EXCEPTION 'no belt %', coalesce(p_id::text, 'NULL') USING ERRCODE = 'SLNFD';
    END IF;
    RETURN v;
END
$$;
COMMENT ON FUNCTION api.belt_state(bigint) IS
    'Belt p_id''s state (HTTP GET /belts/{id}/state): {"status": RUNNING (its events are processed), STOPPED (they wait) or FAILED (its callback did not validate; they wait), "reason": why it is FAILED, else null}. Raises SLNFD when there is no belt p_id.';

CREATE FUNCTION api.belt_set_state(p_id bigint, p_action text)
RETURNS jsonb
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    v_action text := upper(btrim(p_action));
    v_old    belt.belts;
    r        belt.belts;
BEGIN
    IF v_action IS NULL OR v_action NOT IN ('START', 'STOP') THEN
        RAISE EXCEPTION 'action must be START or STOP' USING ERRCODE = 'SLINV',
            DETAIL = format('got %s', coalesce(quote_literal(p_action), 'NULL'));
    END IF;
    SELECT * INTO v_old FROM belt.belts b WHERE b.id = p_id FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'no belt %', coalesce(p_id::text, 'NULL') USING ERRCODE = 'SLNFD';
    END IF;
    r := v_old;
    IF v_action = 'STOP' THEN
        r.status := 'STOPPED';
        r.status_reason := NULL;
    ELSE
        r.status := 'RUNNING';
        r := belt_private.checked(r);
    END IF;
    IF (r.status, r.status_reason, r.sql_callback) IS DISTINCT FROM (v_old.status, v_old.status_reason, v_old.sql_callback) THEN
        UPDATE belt.belts b SET status = r.status, status_reason = r.status_reason, sql_callback = r.sql_callback, updated = now()
        WHERE b.id = p_id;
        IF (r.status, r.status_reason) IS DISTINCT FROM (v_old.status, v_old.status_reason) THEN
            PERFORM belt_private.publish_state(p_id, r.status);
        END IF;
    END IF;
    RETURN jsonb_build_object('status', r.status, 'reason', r.status_reason);
END
$$;
COMMENT ON FUNCTION api.belt_set_state(bigint, text) IS
    'Starts or stops belt p_id (HTTP POST /belts/{id}/state). p_action: START or STOP (case-insensitive). STOP: status STOPPED (its events wait in its lanes). START validates the callback again (a FAILED belt whose function was fixed or created since runs): RUNNING, or FAILED with the reason. Returns the new state {"status", "reason"} as api.belt_state answers it. Publishes kind state on channel belts when the state changed. Raises SLINV for another action, SLNFD when there is no belt p_id, SBPYN when starting a Python belt on a database without PL/Python.';
