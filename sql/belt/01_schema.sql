-- Belts: callbacks that turn events into profile updates. The files of this folder, in order:
-- the registry and its API (a belt is an event consumer with a callback and settings), the helpers
-- SQL callbacks build updates with, processing (steps that take a belt's deliveries lane by lane,
-- run its callback over them set-based and apply the updates in the same transaction), the dead
-- letters and their replay, and the Python runtime (PL/Python, present only when the database has
-- plpython3u).
CREATE SCHEMA belt_private;
COMMENT ON SCHEMA belt_private IS 'Belt internals: validation, processing steps, the Python runtime (sql/belt/).';
