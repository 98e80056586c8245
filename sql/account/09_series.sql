-- What the series routes stand on: the holder event of a series, found and checked as Pryv's
-- HF server does before it reads or writes points. The rule differs from the event routes': one
-- stream of the event with the right is enough (write: create, so create-only may add points;
-- read: read).

-- Why an event cannot take or give points for an access, as one rule for one holder and for many.
CREATE FUNCTION account_private.series_refusal(p_event account.events, p_allowed text[])
RETURNS text
LANGUAGE sql IMMUTABLE
AS $$
    SELECT CASE WHEN p_event.id IS NULL THEN 'unknown'
                WHEN NOT coalesce(p_event.stream_ids && p_allowed, false) THEN 'forbidden'
                WHEN p_event.series_id IS NULL THEN 'not series'
                WHEN p_event.trashed THEN 'trashed' END;
$$;
COMMENT ON FUNCTION account_private.series_refusal(account.events, text[]) IS 'Why event p_event (NULL: none) is no series holder for an access whose streams allowing the action are p_allowed: unknown (no such event), forbidden (none of its streams allowed), not series (not a series event), trashed; NULL when it is one. The rule of account_private.series_holder and account_private.series_holders. Raises nothing.';

-- The streams on which access p_by may p_action. PL/pgSQL, so that its plan is kept: a SQL
-- function that cannot be inlined is planned again at every call.
CREATE FUNCTION account_private.streams_allowing(p_by account.accesses, p_action text)
RETURNS text[]
LANGUAGE plpgsql STABLE
AS $$
BEGIN
    RETURN ARRAY(SELECT l.stream_id FROM account_private.stream_levels(p_by) l WHERE account_private.can(l.level, p_action));
END
$$;
COMMENT ON FUNCTION account_private.streams_allowing(account.accesses, text) IS 'The ids of the streams on which access p_by may p_action (account_private.stream_levels, account_private.can). Raises nothing.';

CREATE FUNCTION account_private.series_holder(p_by account.accesses, p_event_id text, p_action text)
RETURNS account.events
LANGUAGE plpgsql STABLE
AS $$
DECLARE
    v account.events;
BEGIN
    SELECT * INTO v FROM account.events e WHERE e.user_id = p_by.user_id AND e.id = p_event_id;
    CASE account_private.series_refusal(v, account_private.streams_allowing(p_by, p_action))
    WHEN 'unknown' THEN
        RAISE EXCEPTION 'Unknown event "%"', coalesce(p_event_id, 'NULL') USING ERRCODE = 'SANFD',
            DETAIL = format('id %s', p_event_id);
    WHEN 'forbidden' THEN
        RAISE EXCEPTION 'this access may not % the series of event "%"', p_action, p_event_id USING ERRCODE = 'SAFRB';
    WHEN 'not series' THEN
        RAISE EXCEPTION 'High Frequency data can only be stored in events whose type starts with ''series:''.' USING ERRCODE = 'SAOPR',
            DETAIL = format('event %s is of type %s', p_event_id, v.type);
    WHEN 'trashed' THEN
        RAISE EXCEPTION 'The referenced event "%" is trashed.', p_event_id USING ERRCODE = 'SAOPR',
            DETAIL = 'trashedReference eventId';
    ELSE
        RETURN v;
    END CASE;
END
$$;
COMMENT ON FUNCTION account_private.series_holder(account.accesses, text, text) IS 'The series holder event p_event_id of the access''s user, for the series routes, checked as Pryv''s HF server checks it (account_private.series_refusal): it exists, the access may p_action (create: add points; read: read them) on one of its streams, it is a series event, and it is not trashed. Its series_id keys its points; its content lists the fields (account.series_type_fields has their kinds). Raises SANFD (unknown-resource, "Unknown event") when there is no such event; SAFRB without the right; SAOPR (invalid-operation) when it is not a series event or is trashed.';

-- The holders of many bodies at once (a seriesBatch's): the events read in one statement and the
-- access's streams once, rather than both once a body (about 40 µs a body).
CREATE FUNCTION account_private.series_holders(p_by account.accesses, p_event_ids text[], p_action text)
RETURNS account.events[]
LANGUAGE plpgsql STABLE
AS $$
DECLARE
    v_allowed text[] := account_private.streams_allowing(p_by, p_action);
BEGIN
    RETURN ARRAY(SELECT CASE WHEN account_private.series_refusal(e, v_allowed) IS NULL THEN e END
                 FROM unnest(p_event_ids) WITH ORDINALITY i(id, ord)
                 LEFT JOIN account.events e ON e.user_id = p_by.user_id AND e.id = i.id
                 ORDER BY i.ord);
END
$$;
COMMENT ON FUNCTION account_private.series_holders(account.accesses, text[], text) IS 'The series holder events p_event_ids[i] of the access''s user, in order, each as account_private.series_holder checks it (account_private.series_refusal); where that would raise (no such event, no right to p_action, not a series event, trashed), a NULL in its place: the caller then calls account_private.series_holder for that one, which raises the error. Raises nothing.';
