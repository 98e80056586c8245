-- What the series routes stand on: the holder event of a series, found and checked as Pryv's
-- HF server does before it reads or writes points. The rule differs from the event routes': one
-- stream of the event with the right is enough (write: create, so create-only may add points;
-- read: read).

CREATE FUNCTION account_private.series_holder(p_by account.accesses, p_event_id text, p_action text)
RETURNS account.events
LANGUAGE plpgsql STABLE
AS $$
DECLARE
    v account.events;
BEGIN
    SELECT * INTO v FROM account.events e WHERE e.user_id = p_by.user_id AND e.id = p_event_id;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'Unknown event "%"', coalesce(p_event_id, 'NULL') USING ERRCODE = 'SANFD',
            DETAIL = format('id %s', p_event_id);
    END IF;
    IF NOT EXISTS (SELECT FROM account_private.stream_levels(p_by) l
                   WHERE l.stream_id = ANY (v.stream_ids) AND account_private.can(l.level, p_action)) THEN
        RAISE EXCEPTION 'this access may not % the series of event "%"', p_action, p_event_id USING ERRCODE = 'SAFRB';
    END IF;
    IF v.series_id IS NULL THEN
        RAISE EXCEPTION 'High Frequency data can only be stored in events whose type starts with ''series:''.' USING ERRCODE = 'SAOPR',
            DETAIL = format('event %s is of type %s', p_event_id, v.type);
    END IF;
    IF v.trashed THEN
        RAISE EXCEPTION 'The referenced event "%" is trashed.', p_event_id USING ERRCODE = 'SAOPR',
            DETAIL = 'trashedReference eventId';
    END IF;
    RETURN v;
END
$$;
COMMENT ON FUNCTION account_private.series_holder(account.accesses, text, text) IS 'The series holder event p_event_id of the access''s user, for the series routes, checked as Pryv''s HF server checks it: it exists, the access may p_action (create: add points; read: read them) on one of its streams, it is a series event, and it is not trashed. Its series_id keys its points; its content lists the fields (account.series_type_fields has their kinds). Raises SANFD (unknown-resource, "Unknown event") when there is no such event; SAFRB without the right; SAOPR (invalid-operation) when it is not a series event or is trashed.';

-- The holders of many bodies at once (a seriesBatch's): the events read in one statement and the
-- access's streams once, rather than both once a body (about 40 µs a body).
CREATE FUNCTION account_private.series_holders(p_by account.accesses, p_event_ids text[], p_action text)
RETURNS account.events[]
LANGUAGE plpgsql STABLE
AS $$
DECLARE
    v_allowed text[] := ARRAY(SELECT l.stream_id FROM account_private.stream_levels(p_by) l WHERE account_private.can(l.level, p_action));
BEGIN
    RETURN ARRAY(SELECT CASE WHEN e.stream_ids && v_allowed AND e.series_id IS NOT NULL AND NOT e.trashed THEN e END
                 FROM unnest(p_event_ids) WITH ORDINALITY i(id, ord)
                 LEFT JOIN account.events e ON e.user_id = p_by.user_id AND e.id = i.id
                 ORDER BY i.ord);
END
$$;
COMMENT ON FUNCTION account_private.series_holders(account.accesses, text[], text) IS 'The series holder events p_event_ids[i] of the access''s user, in order, each as account_private.series_holder checks it; where that would raise (no such event, no right to p_action, not a series event, trashed), a NULL in its place: the caller then calls account_private.series_holder for that one, which raises the error. Raises nothing.';
