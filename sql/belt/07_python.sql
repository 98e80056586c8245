-- Belts, the Python runtime: a Granary user's callback.py, run unchanged by PL/Python (plpython3u).
-- Two functions, created only when the database has the language plpython3u (migration 00017
-- creates it where the server has it and the migrating role may): belt_private.python_check
-- validates a source by Granary's rules, belt_private.python_run runs a batch of events through it.
-- Callers test for them with to_regprocedure and call them with dynamic SQL, so a database without
-- PL/Python keeps its SQL belts. This file creates nothing and fails nothing there.
--
-- The runtime (the Python source in v_runtime below) is installed once per backend into GD
-- ('silo.belt.runtime'), keyed by the md5 of its source: a backend that outlives a migrate
-- which changed it installs the new one. It provides:
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
    v_runtime text := $runtime$
"""Silo's Python belt runtime (sql/belt/07_python.sql): runs Granary callback.py sources."""
import builtins
import ctypes
import datetime
import inspect
import json
import linecache
import os
import signal
import sys
import threading
import time
import traceback
import types

RUNTIME_HASH = None
RUNTIME_FILE = 'silo-belt-runtime.py'
MODULE_CACHE_SIZE = 64
CHECK_TIMEOUT_SEC = 30.0
_plpy = None
# time.sleep as Python has it (a runtime installed again finds its own replacement there).
_orig_sleep = getattr(time, '_silo_orig_sleep', time.sleep)


class RetryException(Exception):
    """Raised by a callback to have its event retried with exponential back-off."""


class CallbackTimeout(BaseException):
    """Raised inside a callback that ran longer than CALLBACK_TIMEOUT_SEC. A BaseException, so
    that "except Exception" in the callback does not swallow it."""

    def __init__(self, *args):
        super().__init__(*args)
        try:
            _escalate()
        except BaseException:
            pass


def _in_ms(value):
    # Epoch seconds (below 1e11) or milliseconds as a whole number of milliseconds; a datetime
    # likewise (naive: UTC); anything else (an ISO 8601 string) as it is.
    if isinstance(value, bool):
        return value
    if isinstance(value, (int, float)):
        if value != value or value in (float('inf'), float('-inf')):
            return value
        if abs(value) < 1e11:
            return int(round(value * 1000))
        return int(round(value))
    if isinstance(value, datetime.datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=datetime.timezone.utc)
        return int(round(value.timestamp() * 1000))
    if isinstance(value, datetime.date):
        return value.isoformat()
    return value


class Update:
    """One profile update message, as Granary's belt framework builds it."""

    __slots__ = ('_id', '_path', '_operation', '_profile_type', '_schema', '_value')

    def __init__(self, id, path=None, operation='_set', profile_type='_d', schema=None):
        self._id = id
        self._path = path
        self._operation = operation
        self._profile_type = profile_type
        self._schema = schema
        self._value = None

    def set_value(self, value, certainty=None, _in=None, ttl=None, origin=None, reader=None, ttn=None):
        v = {'_v': value}
        if certainty is not None:
            v['_c'] = certainty
        if _in is not None:
            v['_in'] = _in_ms(_in)
        if ttl is not None:
            v['_ttl'] = ttl
        if ttn is not None:
            v['_ttn'] = ttn
        if origin is not None:
            v['_origin'] = origin
        if reader is not None:
            v['_reader'] = reader
        self._value = v
        return self

    def set_type(self, profile_type):
        self._profile_type = profile_type
        return self

    def set_operation(self, operation):
        self._operation = operation
        return self

    def set_schema(self, schema):
        self._schema = schema
        return self

    def to_dict(self):
        d = {'_schema': self._schema, '_operation': self._operation, '_id': self._id,
             '_profile_type': self._profile_type, '_path': self._path}
        if self._value is not None:
            d['_value'] = self._value
        return d

    __call__ = to_dict

    def __repr__(self):
        return 'Update(%r)' % (self.to_dict(),)


class ProfileClient:
    """profileClient of FETCH_PROFILE lazy: getProfile reads the profile store in the callback's
    transaction (api.profile_get)."""

    def __init__(self, profile_type='_d'):
        self.profile_type = profile_type or '_d'

    def getProfile(self, cid, profileType=None, fragments=None, resolveProfileLinks=False):
        if isinstance(fragments, str):
            fragments = [fragments]
        elif fragments is not None:
            fragments = [str(f) for f in fragments]
        plan = _state.profile_plan
        if plan is None:
            plan = _plpy.prepare(
                'SELECT correlation_id, profile_type, json_payload::text AS json_payload '
                'FROM api.profile_get($1, $2, $3, p_resolve_links => $4)',
                ['text', 'text', 'text[]', 'boolean'])
            _state.profile_plan = plan
        try:
            rows = plan.execute([profileType or self.profile_type, str(cid), fragments,
                                 bool(resolveProfileLinks)])
        except _plpy.SPIError as e:
            if _sqlstate(e) == 'SLNFD':
                return None
            raise
        if not rows:
            return None
        r = rows[0]
        return {'correlationId': r['correlation_id'], 'type': r['profile_type'],
                'jsonPayload': json.loads(r['json_payload'])}


def _sqlstate(e):
    # The SQLSTATE of a plpy.SPIError: its class's for the codes PL/Python knows, else the one
    # PostgreSQL packs into spidata[0] (6 bits a character).
    code = getattr(e, 'sqlstate', None)
    if code:
        return code
    spidata = getattr(e, 'spidata', None)
    if not spidata or not isinstance(spidata[0], int):
        return None
    return ''.join(chr(((spidata[0] >> (6 * i)) & 0x3F) + ord('0')) for i in range(5))


class _Output:
    """sys.stdout and sys.stderr while callbacks run: text is kept until the event ends, then
    written to the server log by the backend's thread (plpy is not for other threads)."""

    encoding = 'utf-8'
    errors = 'replace'

    def __init__(self):
        self.parts = []

    def write(self, s):
        if not isinstance(s, str):
            s = str(s)
        self.parts.append(s)
        return len(s)

    def writelines(self, lines):
        for s in lines:
            self.write(s)

    def flush(self):
        pass

    def isatty(self):
        return False

    def writable(self):
        return True

    def take(self):
        text = ''.join(self.parts)
        self.parts.clear()
        return text


class _State:
    def __init__(self):
        self.modules = {}
        self.profile_plan = None
        self.env_set = {}  # names Silo set in os.environ -> their value before (None: unset)
        self.env_given = None
        self.output = _Output()


_state = _State()


def _set_async_exc(tid, exc):
    return ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(tid), exc)


class Watchdog:
    """One thread per backend. The backend's thread arms a deadline before each callback call
    and clears it after; past the deadline, the watchdog raises CallbackTimeout in the backend's
    thread, only while a callback frame is on its stack, and again every `interval` seconds while
    it keeps running. Arming, clearing and injecting hold `lock`; clearing also clears an
    injected exception not yet raised, so none outlives the call."""

    def __init__(self):
        self.lock = threading.RLock()
        self.cond = threading.Condition(self.lock)
        self.token = 0
        self.deadline = 0.0
        self.interval = 1.0
        self.tid = 0
        self.frame = None     # the frame of _guarded that calls the callback
        self.fired = 0        # the token injected for
        self.escalated = 0    # the token _escalate ran for
        self.tracing = False  # _raiser is the backend thread's trace function
        self.next_fire = 0.0
        self.waiting_until = None
        self.idle = threading.Event()
        self.stopped = False
        self.thread = threading.Thread(target=self._loop, name='silo-belt-watchdog', daemon=True)
        self.thread.start()

    def _inside_callback(self):
        f = sys._current_frames().get(self.tid)
        while f is not None:
            back = f.f_back
            if back is self.frame:
                return f.f_code.co_filename != RUNTIME_FILE
            f = back
        return False

    def _loop(self):
        # Signals are PostgreSQL's, for the backend's thread: none is delivered to this one.
        try:
            signal.pthread_sigmask(signal.SIG_BLOCK, signal.valid_signals())
        except (AttributeError, OSError, ValueError):
            pass
        with self.cond:
            while not self.stopped:
                if not self.token:
                    self.waiting_until = None
                    self.idle.set()
                    self.cond.wait()
                    continue
                now = time.monotonic()
                due = self.next_fire if self.fired == self.token else self.deadline
                if now < due:
                    self.waiting_until = due
                    self.cond.wait(due - now)
                    continue
                if self._inside_callback():
                    if self.fired == self.token:
                        # Interrupted and still running: it catches CallbackTimeout. The next
                        # one, made in the backend's thread, installs _raiser there.
                        self.escalated = self.token
                    _set_async_exc(self.tid, ctypes.py_object(CallbackTimeout))
                    self.fired = self.token
                    self.next_fire = now + self.interval
                elif self.fired == self.token:
                    # In the runtime's own code around the call: look again shortly.
                    self.next_fire = now + 0.002
                else:
                    self.deadline = now + 0.002

    def arm(self, token, deadline, interval, frame):
        with self.lock:
            self.token = token
            self.deadline = deadline
            self.interval = interval
            self.tid = threading.get_ident()
            self.frame = frame
            if self.waiting_until is None or deadline < self.waiting_until:
                self.idle.clear()
                self.cond.notify()

    def _disarm(self, token):
        self.lock.acquire()
        try:
            fired = self.fired == token and token != 0
            self.token = 0
            self.frame = None
            if self.tracing:
                self.tracing = False
                sys.settrace(None)
            if fired:
                self.fired = 0
                _set_async_exc(self.tid, None)  # an injection not raised yet: cleared
            return fired
        finally:
            self.lock.release()

    def disarm(self, token):
        """Clears the deadline of call `token`; whether CallbackTimeout was injected into it.
        An injection pending when the call returned may be raised here, before the lock is
        taken or just after: it is absorbed and the clearing done again."""
        while True:
            try:
                while self.lock._is_owned():
                    self.lock.release()
                return self._disarm(token)
            except CallbackTimeout:
                continue

    def settle(self):
        """After a batch: the watchdog waits without a timeout before the backend leaves Python,
        since a thread woken while the backend runs no Python code polls for the GIL."""
        with self.lock:
            self.token = 0
            self.frame = None
            waiting = not self.idle.is_set()
            if waiting:
                self.cond.notify()
        if waiting:
            self.idle.wait(1.0)

    def stop(self):
        with self.lock:
            self.stopped = True
            self.token = 0
            self.cond.notify()


_watchdog = None
_token = 0


class _Raiser:
    """The backend thread's trace function once a callback caught CallbackTimeout and kept
    running, installed as a C trace function (PyEval_SetTrace with PyObject_DelItem, which
    calls __delitem__(frame)): it raises CallbackTimeout again at every line of the callback's
    code, so the except clause that caught it is left at its first line. Unlike a trace
    function of sys.settrace, a C one stays installed when it raises."""

    __slots__ = ()

    def __delitem__(self, frame):
        wd = _watchdog
        if wd is None or not wd.token or wd.escalated != wd.token:
            return
        code = getattr(frame, 'f_code', None)
        if code is None or code.co_filename == RUNTIME_FILE:
            return
        raise CallbackTimeout()


_raiser = _Raiser()
_delitem = ctypes.cast(ctypes.pythonapi.PyObject_DelItem, ctypes.c_void_p)
_set_trace = ctypes.pythonapi.PyEval_SetTrace
_set_trace.argtypes = [ctypes.c_void_p, ctypes.py_object]
_set_trace.restype = None


def _escalate():
    # Called in the backend's thread when a CallbackTimeout is made (its __init__): once the
    # callback caught one and kept running, _raiser becomes the thread's trace function.
    wd = _watchdog
    if wd is None or not wd.token or wd.escalated != wd.token or sys.gettrace() is _raiser:
        return
    if threading.get_ident() != wd.tid:
        return
    wd.tracing = True
    _set_trace(_delitem, _raiser)


def _ensure_watchdog():
    global _watchdog
    if _watchdog is None or not _watchdog.thread.is_alive():
        _watchdog = Watchdog()
    return _watchdog


def _sliced_sleep(seconds):
    """time.sleep in 50 ms slices, so that the watchdog can stop a sleeping callback."""
    if seconds is None or seconds != seconds:
        return _orig_sleep(seconds)
    end = time.monotonic() + seconds
    while True:
        left = end - time.monotonic()
        if left <= 0:
            return None
        _orig_sleep(left if left < 0.05 else 0.05)


def _guarded(wd, timeout, fn, *args):
    """Calls fn(*args) under the deadline `timeout` (seconds). Returns (result, exception,
    timed_out, seconds)."""
    global _token
    _token += 1
    token = _token
    res = exc = None
    t0 = time.perf_counter()
    try:
        wd.arm(token, time.monotonic() + timeout, min(max(timeout, 0.05), 1.0), sys._getframe())
        res = fn(*args)
    except BaseException as e:
        exc = e
    fired = wd.disarm(token)
    secs = time.perf_counter() - t0
    if fired or isinstance(exc, CallbackTimeout):
        return None, None, True, secs
    return res, exc, False, secs


def _error_text(e):
    msg = str(e)
    name = type(e).__name__
    return name + ': ' + msg if msg else name


def _traceback_text(e):
    tb = e.__traceback__
    # Drop the runtime's own frames at the top (the guarded call).
    while tb is not None and tb.tb_frame.f_code.co_filename == RUNTIME_FILE:
        tb = tb.tb_next
    return ''.join(traceback.format_exception(type(e), e, tb))


def _register_source(filename, source):
    lines = source.splitlines(True)
    if lines and not lines[-1].endswith('\n'):
        lines[-1] += '\n'
    linecache.cache[filename] = (len(source), None, lines, filename)


def _install_modules():
    def module(name, package=False, **attrs):
        m = types.ModuleType(name)
        if package:
            m.__path__ = []
        m.__dict__.update(attrs)
        sys.modules[name] = m
        parent, _, child = name.rpartition('.')
        if parent:
            setattr(sys.modules[parent], child, m)
        return m
    module('grnry_belt', True)
    module('grnry_belt.exceptions', True)
    module('grnry_belt.exceptions.exception', RetryException=RetryException)
    module('grnry_belt.update', Update=Update)
    module('grnry', True)
    module('grnry.beltextractor', True)
    module('grnry.beltextractor.update', Update=Update)


def install(plpy, runtime_hash, source, old):
    global RUNTIME_HASH, _plpy
    RUNTIME_HASH = runtime_hash
    _plpy = plpy
    if old is not None:
        try:
            old.shutdown()
        except Exception:
            pass
    _register_source(RUNTIME_FILE, source)
    _install_modules()
    time._silo_orig_sleep = _orig_sleep
    time.sleep = _sliced_sleep


def shutdown():
    global _watchdog
    if _watchdog is not None:
        _watchdog.stop()
        _watchdog.thread.join(1.0)
        _watchdog = None
    for key in list(_state.modules):
        _forget(key)


def _forget(key):
    entry = _state.modules.pop(key, None)
    if entry is not None:
        sys.modules.pop(entry.module.__name__, None)
        linecache.cache.pop(entry.filename, None)


def _fetch_mode(value):
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
$runtime$;
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
