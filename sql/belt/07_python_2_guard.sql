-- Belts, the Python runtime, second part of its source: the watchdog that enforces
-- CALLBACK_TIMEOUT_SEC (asynchronous exceptions, the trace function that re-raises, the sliced
-- time.sleep), the guarded call of a callback, error texts, and the installation of the modules a
-- callback imports (grnry_belt.exceptions.exception, grnry_belt.update).

CREATE FUNCTION belt_private.python_runtime_guard()
RETURNS text
LANGUAGE sql IMMUTABLE
AS $fn$ SELECT $runtime$def _set_async_exc(tid, exc):
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


$runtime$::text $fn$;
COMMENT ON FUNCTION belt_private.python_runtime_guard() IS
    'The second part of the Python belt runtime''s source (Python text): the watchdog thread that enforces CALLBACK_TIMEOUT_SEC, the guarded call of a callback, the texts of errors and tracebacks, and the installation of the modules callbacks import. Joined by sql/belt/07_python_4_install.sql. Raises nothing.';
