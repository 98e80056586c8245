-- Belts, the Python runtime: a Granary user's callback.py, run unchanged by PL/Python (plpython3u).
-- Two functions, created only when the database has the language plpython3u (migration 00017
-- creates it where the server has it and the migrating role may): belt_private.python_check
-- validates a source by Granary's rules, belt_private.python_run runs a batch of events through it.
-- Callers test for them with to_regprocedure and call them with dynamic SQL, so a database without
-- PL/Python keeps its SQL belts. This file creates nothing and fails nothing there.
--
-- The runtime (the Python source in v_runtime below, joined from the three parts of
-- sql/belt/07_python_1_objects.sql, 2_guard and 3_run) is installed once per backend into GD
-- ('silo.belt.runtime'), keyed by the md5 of its source: a backend that outlives a migrate which
-- changed it installs the new one. It provides:
--   * the modules a callback imports: grnry_belt.exceptions.exception (RetryException),
--     grnry.beltextractor.update and grnry_belt.update (Update); Update is also in every callback
--     module's globals, without an import, as in Granary;
--   * the callback modules, compiled and executed once per backend per (belt id, version, source)
--     and kept in a cache (64 at most; a belt's new version evicts its old ones);
--   * a watchdog thread, started once per backend, that enforces CALLBACK_TIMEOUT_SEC even on a
--     pure-Python infinite loop, which PostgreSQL cannot cancel: it raises CallbackTimeout in the
--     backend's thread (PyThreadState_SetAsyncExc) while the callback's frame is on the stack, and
--     again every min(timeout, 1 s) while it keeps running. A callback that catches it (a bare
--     "except:") and runs on past that gets a C trace function that raises it again at every line
--     of its code, so every except clause is left at its first line. A deadline is armed and
--     cleared under a lock, the watchdog injects only while holding it and only while a frame of
--     the callback is on the stack, and clearing a deadline also clears an exception still
--     pending and the trace function, so no injection lands after the callback's call returned
--     (one raised by the runtime's code between the call's return and the clearing is absorbed).
--     time.sleep is replaced by one sleeping in 50 ms slices, so that a sleeping callback is
--     stopped too; a callback blocked in other C code (a socket read, a long C loop) is stopped
--     when it returns to Python code.
--   * print() and logging output of a callback going to the server log (LOG lines "belt <id>
--     event <event id>: ...", "belt <id> version <n>, import: ..." for the module's top-level
--     code), never to the backend's stdout.
--
-- Update(id, path=None, operation='_set', profile_type='_d', schema=None) builds one update
-- message; set_value(value, certainty=None, _in=None, ttl=None, origin=None, reader=None,
-- ttn=None), set_type, set_operation and set_schema set its fields (each returns the update), and
-- calling it (update()) returns its message as a dict. Unset, _schema is null, _operation "_set",
-- _profile_type "_d"; _c, _ttl, _ttn and _reader are left out (the profile store's defaults: 1,
-- P100Y, P100Y, _auth), and so is _origin (the processing step fills "/belts/{id}"). _in, when a
-- number, is read as epoch seconds below 1e11 (time() as in Granary's example; 1e11 seconds is
-- the year 5138) and as epoch milliseconds from 1e11 on (1e11 ms is 1973-03-03), and made a whole
-- number of milliseconds; a datetime is converted likewise (naive: UTC); a string goes to the
-- store as it is (epoch milliseconds or an ISO 8601 date). A value of None is kept: the update is
-- returned and the profile store rejects it ("_v can not be null"), so the mistake is visible.
--
-- Silo calls execute once per event, with one event's headers and payload (Granary's
-- single-payload signature); the list-of-events signature (sessionizing) is not supported.
-- Callbacks run in the processing transaction, in the backend's own thread, as the server's OS
-- user: code given to python_check and python_run is trusted like a superuser's.

DO $python$
DECLARE
    v_runtime text := belt_private.python_runtime_objects() || belt_private.python_runtime_guard()
                       || belt_private.python_runtime_run();
    v_prelude text;
BEGIN
    IF NOT EXISTS (SELECT FROM pg_catalog.pg_language WHERE lanname = 'plpython3u') THEN
        RETURN;
    END IF;
    -- Each function's body first installs the runtime into GD when this backend has none or an
    -- older one (another md5).
    v_prelude := format($body$
rt = GD.get('silo.belt.runtime')
if rt is None or getattr(rt, 'RUNTIME_HASH', None) != %1$s:
    import types
    old = rt
    src = %2$s
    rt = types.ModuleType('silo_belt_runtime')
    rt.__dict__['__file__'] = 'silo-belt-runtime.py'
    exec(compile(src, 'silo-belt-runtime.py', 'exec'), rt.__dict__)
    rt.install(plpy, %1$s, src, old)
    GD['silo.belt.runtime'] = rt
$body$, to_json(md5(v_runtime))::text, to_json(v_runtime)::text);

    -- Functions in an untrusted language are a superuser's to create: for another role, a
    -- warning, and Python belts are refused while SQL belts work.
    BEGIN
        EXECUTE format($create$
CREATE FUNCTION belt_private.python_check(p_source text, p_fetch_profile text)
RETURNS text
LANGUAGE plpython3u VOLATILE
AS %L$create$, v_prelude || E'return rt.check(p_source, p_fetch_profile)\n');
        COMMENT ON FUNCTION belt_private.python_check(text, text) IS
            'Validates p_source, the source of a Python belt''s callback.py, for FETCH_PROFILE p_fetch_profile (false, true or lazy, any case; NULL or empty: false) by Granary''s rules: the source compiles and executes as a module (Update in its globals, profileClient too for lazy; 30 s at most), a method called execute is present, it has 2 or 3 parameters, with false or lazy a third one has a default (e.g. profile=None), with true it has exactly 3. Returns NULL when it validates, else the reason (also for a syntax error or an exception raised at import). Executes the module''s top-level code in this backend, as the server''s OS user. Exists only where the database has plpython3u. Raises nothing.';

        EXECUTE format($create$
CREATE FUNCTION belt_private.python_run(p_belt_id bigint, p_version integer, p_source text, p_settings jsonb, p_events jsonb)
RETURNS jsonb
LANGUAGE plpython3u VOLATILE
AS %L$create$, v_prelude || E'return rt.run(p_belt_id, p_version, p_source, p_settings, p_events)\n');
        COMMENT ON FUNCTION belt_private.python_run(bigint, integer, text, jsonb, jsonb) IS
            'Runs the events p_events (a JSON array of {"headers", "payload", "profile"}) through execute of the Python callback p_source of belt p_belt_id at version p_version, one call per event: execute(headers, payload), or execute(headers, payload, profile) when fetchProfile is TRUE. p_settings: {"fetchProfile": FALSE|TRUE|LAZY (LAZY puts profileClient, whose getProfile(cid, profileType=None, fragments=None) reads api.profile_get, in the module''s globals), "profileType" (default _d), "callbackTimeoutSec" (default 300; fractions allowed), "callbackLongrunningSec" (default 180), "env": {name: value} (set in os.environ)}. The module is executed once per backend per (belt id, version) and cached. Returns a JSON array aligned with p_events, each element {"updates": [update messages, without _origin unless the callback set one], "skipped": n when the callback returned things that are not Update objects (skipped), "ms", "longRunning"}, {"retry": message, "ms", "longRunning"} (RetryException), {"timeout": message, "ms", "longRunning"} (CALLBACK_TIMEOUT_SEC exceeded; the callback is interrupted), or {"error": "Type: message", "traceback", "ms", "longRunning"} (any other exception; a source that does not load or validate: error "InvalidCallback: ..." for every event, traceback null; a result that cannot be read or is not JSON: "InvalidResult: ..." or "ValueError: ..."); ms is whole milliseconds. A callback running longer than callbackLongrunningSec also gives a WARNING; its print() output goes to the server log. Exists only where the database has plpython3u. Raises SLINV when p_events is not an array, p_settings not an object or fetchProfile not one of the three.';
    EXCEPTION WHEN insufficient_privilege THEN
        RAISE WARNING 'Python belts are refused: the Python runtime was not created: %', SQLERRM
            USING HINT = 'Only a superuser can create functions in plpython3u: run silo migrate with a superuser role (after DELETE FROM silo.api_code; when sql/ did not change) and keep migrating with it.';
    END;
END
$python$;
