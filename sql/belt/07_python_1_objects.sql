-- Belts, the Python runtime, first part of its source: the objects a callback sees (RetryException,
-- Update, the profile client for FETCH_PROFILE lazy) and the per-backend state, the output capture.
-- The source is plain text in a SQL function, so that it is built where PL/Python is missing too;
-- sql/belt/07_python_4_install.sql joins the parts and creates the PL/Python functions from them.

CREATE FUNCTION belt_private.python_runtime_objects()
RETURNS text
LANGUAGE sql IMMUTABLE
AS $fn$ SELECT $runtime$
"""Silo's Python belt runtime (sql/belt/07_python_4_install.sql): runs Granary callback.py sources."""
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


$runtime$::text $fn$;
COMMENT ON FUNCTION belt_private.python_runtime_objects() IS
    'The first part of the Python belt runtime''s source (Python text): the imports, RetryException and CallbackTimeout, Update, ProfileClient (profileClient.getProfile), the SQLSTATE of plpy errors, the output capture and the per-backend state. Joined with belt_private.python_runtime_guard() and belt_private.python_runtime_run() by sql/belt/07_python_4_install.sql. Raises nothing.';
