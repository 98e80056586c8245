-- Belts, the Python runtime, third part of its source: Granary's callback validation (check), the
-- module cache per belt version, the settings and environment, and run, which calls execute once
-- per event and reads each result.

CREATE FUNCTION belt_private.python_runtime_run()
RETURNS text
LANGUAGE sql IMMUTABLE
AS $fn$ SELECT $runtime$def _fetch_mode(value):
    v = 'FALSE' if value is None else (str(value).strip().upper() or 'FALSE')
    if v not in ('FALSE', 'TRUE', 'LAZY'):
        return None
    return v


def _signature_problem(fn, mode):
    """Why execute does not meet Granary's rules for FETCH_PROFILE mode, None when it does."""
    if not callable(fn):
        return 'execute is not a function'
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError) as e:
        return 'the signature of execute cannot be read: %s' % (e,)
    params = list(sig.parameters.values())
    n = len(params)
    if n not in (2, 3):
        return 'The execute method can only have 2 or 3 parameters, it has %d' % n
    if mode == 'TRUE':
        if n != 3:
            return 'With FETCH_PROFILE true the execute method needs exactly 3 parameters, it has 2'
        args = (None, None, None)
    else:
        if n == 3 and params[2].default is inspect.Parameter.empty and \
                params[2].kind not in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD):
            return ('With FETCH_PROFILE %s the third parameter of the execute method needs a default, '
                    'e.g. profile=None' % mode.lower())
        args = (None, None)
    try:
        sig.bind(*args)
    except TypeError as e:
        return 'execute cannot be called with %d arguments: %s' % (len(args), e)
    return None


def _exec_module(source, filename, modname, mode, profile_type, timeout, where):
    """Compiles and executes a callback source in a new module. Returns (module, problem)."""
    try:
        code = compile(source, filename, 'exec', dont_inherit=True)
    except SyntaxError as e:
        return None, '%s: %s (line %s)' % (type(e).__name__, e.msg, e.lineno)
    except (ValueError, TypeError) as e:
        return None, _error_text(e)
    _register_source(filename, source)
    mod = types.ModuleType(modname)
    ns = mod.__dict__
    ns['__file__'] = filename
    ns['__builtins__'] = builtins
    ns['Update'] = Update
    if mode == 'LAZY':
        ns['profileClient'] = ProfileClient(profile_type)
    sys.modules[modname] = mod
    wd = _ensure_watchdog()
    saved = _redirect()
    try:
        _, exc, timed_out, _ = _guarded(wd, timeout, exec, code, ns)
    finally:
        _restore(saved)
        wd.settle()
    _flush_output(where)
    if timed_out:
        sys.modules.pop(modname, None)
        return None, 'executing the callback module took longer than %g s' % timeout
    if exc is not None:
        sys.modules.pop(modname, None)
        return None, 'executing the callback module raised %s' % _error_text(exc)
    return mod, None


def _redirect():
    saved = (sys.stdout, sys.stderr)
    sys.stdout = sys.stderr = _state.output
    return saved


def _restore(saved):
    sys.stdout, sys.stderr = saved


def _flush_output(where):
    if _state.output.parts:
        text = _state.output.take().rstrip('\n')
        if text:
            _plpy.log('%s: %s' % (where, text))


def check(source, fetch_profile):
    """belt_private.python_check: None when source validates, else the reason."""
    mode = _fetch_mode(fetch_profile)
    if mode is None:
        return 'FETCH_PROFILE must be false, true or lazy, not %r' % (fetch_profile,)
    if source is None or not str(source).strip():
        return 'the callback source is empty'
    mod, problem = _exec_module(source, 'callback.py', 'grnry_belt_callback_check', mode, '_d',
                                CHECK_TIMEOUT_SEC, 'callback check, import')
    if problem is not None:
        return problem
    try:
        fn = mod.__dict__.get('execute')
        if fn is None:
            return 'A method called execute needs to be present in the callback'
        return _signature_problem(fn, mode)
    finally:
        sys.modules.pop(mod.__name__, None)
        linecache.cache.pop('callback.py', None)


class _Entry:
    __slots__ = ('module', 'filename', 'source', 'execute', 'client', 'problems')

    def __init__(self, module, filename, source):
        self.module = module
        self.filename = filename
        self.source = source
        self.execute = module.__dict__.get('execute')
        self.client = None
        self.problems = {}


def _load(belt_id, version, source, mode, profile_type, timeout):
    """The callback module of (belt_id, version), executed once per backend. Returns (entry,
    problem)."""
    key = (belt_id, version)
    entry = _state.modules.get(key)
    if entry is not None and entry.source == source:
        return entry, None
    for k in [k for k in _state.modules if k[0] == belt_id or k == key]:
        _forget(k)
    while len(_state.modules) >= MODULE_CACHE_SIZE:
        _forget(next(iter(_state.modules)))
    filename = '/belts/%s/v%s/callback.py' % (belt_id, version)
    modname = 'grnry_belt_callback_%s_v%s' % (belt_id, version)
    mod, problem = _exec_module(source, filename, modname, mode, profile_type, timeout,
                                'belt %s version %s, import' % (belt_id, version))
    if problem is not None:
        linecache.cache.pop(filename, None)
        return None, problem
    entry = _Entry(mod, filename, source)
    _state.modules[key] = entry
    return entry, None


def _apply_env(env):
    if env == _state.env_given:
        return
    for name, before in _state.env_set.items():
        if before is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = before
    _state.env_set = {}
    if isinstance(env, dict):
        for name, value in env.items():
            name = str(name)
            if not name or '=' in name or '\x00' in name:
                continue
            value = '' if value is None else str(value)
            if '\x00' in value:
                continue
            _state.env_set[name] = os.environ.get(name)
            os.environ[name] = value
    _state.env_given = env


def _seconds(settings, key, default):
    v = settings.get(key)
    try:
        v = float(v)
    except (TypeError, ValueError):
        return default
    if v != v or v <= 0:
        return default
    return v


def _dumps(results):
    try:
        return json.dumps(results, allow_nan=False, separators=(',', ':'))
    except (TypeError, ValueError):
        pass
    parts = []
    for r in results:
        try:
            parts.append(json.dumps(r, allow_nan=False, separators=(',', ':')))
        except (TypeError, ValueError) as e:
            bad = {'error': 'ValueError: an update of the callback is not JSON: %s' % (e,),
                   'traceback': None, 'ms': r.get('ms', 0), 'longRunning': r.get('longRunning', False)}
            parts.append(json.dumps(bad))
    return '[' + ','.join(parts) + ']'


def _result(res, exc, timed_out, timeout):
    """The result of one event, without ms and longRunning."""
    if timed_out:
        return {'timeout': 'the callback ran longer than CALLBACK_TIMEOUT_SEC (%g s)' % timeout}
    if exc is None:
        updates = []
        skipped = 0
        if res is None:
            pass
        elif isinstance(res, Update):
            updates.append(res.to_dict())
        elif isinstance(res, (list, tuple)):
            for u in res:
                if isinstance(u, Update):
                    updates.append(u.to_dict())
                else:
                    skipped += 1
        else:
            skipped = 1
        r = {'updates': updates}
        if skipped:
            r['skipped'] = skipped
        return r
    if isinstance(exc, RetryException):
        return {'retry': str(exc) or 'RetryException'}
    return {'error': _error_text(exc), 'traceback': _traceback_text(exc)}


def run(belt_id, version, source, settings_json, events_json):
    """belt_private.python_run: one result per event, as a JSON array (text)."""
    settings = json.loads(settings_json) if settings_json else {}
    if not isinstance(settings, dict):
        _plpy.error('p_settings must be a JSON object', sqlstate='SLINV')
    mode = _fetch_mode(settings.get('fetchProfile'))
    if mode is None:
        _plpy.error('fetchProfile must be FALSE, TRUE or LAZY, not %r' % (settings.get('fetchProfile'),),
                    sqlstate='SLINV')
    events = json.loads(events_json) if events_json else []
    if not isinstance(events, list):
        _plpy.error('p_events must be a JSON array of events', sqlstate='SLINV')
    if not events:
        return '[]'
    profile_type = settings.get('profileType') or '_d'
    timeout = _seconds(settings, 'callbackTimeoutSec', 300.0)
    long_ms = _seconds(settings, 'callbackLongrunningSec', 180.0) * 1000.0
    _apply_env(settings.get('env'))

    entry, problem = _load(belt_id, version, source, mode, profile_type, timeout)
    if problem is None:
        problem = entry.problems.get(mode)
        if problem is None and mode not in entry.problems:
            if entry.execute is None:
                problem = 'A method called execute needs to be present in the callback'
            else:
                problem = _signature_problem(entry.execute, mode)
            entry.problems[mode] = problem
    if problem is not None:
        err = {'error': 'InvalidCallback: ' + problem, 'traceback': None, 'ms': 0, 'longRunning': False}
        return json.dumps([err] * len(events))
    if mode == 'LAZY':
        if entry.client is None:
            entry.client = ProfileClient(profile_type)
        entry.client.profile_type = profile_type
        entry.module.__dict__['profileClient'] = entry.client

    fn = entry.execute
    with_profile = mode == 'TRUE'
    out = _state.output
    wd = _ensure_watchdog()
    results = []
    append = results.append
    where = 'belt %s' % (belt_id,)
    saved = _redirect()
    try:
        for ev in events:
            if isinstance(ev, dict):
                headers = ev.get('headers')
                payload = ev.get('payload')
                args = (headers, payload, ev.get('profile')) if with_profile else (headers, payload)
            else:
                headers = None
                args = (None, ev, None) if with_profile else (None, ev)
            try:
                res, exc, timed_out, secs = _guarded(wd, timeout, fn, *args)
            except CallbackTimeout:
                # Raised in the runtime after the callback, before its deadline was cleared.
                wd.disarm(wd.fired or wd.token)
                res, exc, timed_out, secs = None, None, True, timeout
            ms = secs * 1000.0
            try:
                r = _result(res, exc, timed_out, timeout)
            except Exception as e:
                # What the callback returned or raised broke when read (a subclass's method).
                r = {'error': 'InvalidResult: the callback\'s result could not be read: %s'
                     % (_error_text(e),), 'traceback': _traceback_text(e)}
            r['ms'] = int(ms + 0.5)
            long_running = ms > long_ms
            r['longRunning'] = long_running
            append(r)
            if out.parts or long_running:
                eid = headers.get('grnry-event-id') if isinstance(headers, dict) else None
                if out.parts:
                    _flush_output('%s event %s' % (where, eid))
                if long_running:
                    _plpy.warning('belt %s: the callback ran %d ms on event %s, longer than '
                                  'CALLBACK_LONGRUNNING_SEC (%g s)' % (belt_id, r['ms'], eid, long_ms / 1000.0))
    finally:
        _restore(saved)
        wd.settle()
    return _dumps(results)
$runtime$::text $fn$;
COMMENT ON FUNCTION belt_private.python_runtime_run() IS
    'The third part of the Python belt runtime''s source (Python text): check (Granary''s callback validation), the module cache per (belt id, version), the settings and environment, and run (one call of execute per event, each result read). Joined by sql/belt/07_python_4_install.sql. Raises nothing.';
