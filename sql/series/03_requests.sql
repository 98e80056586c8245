-- The write route of HTTP: POST /{username}/events/{id}/series and POST /{username}/series/batch,
-- joined into one call when they come together (server/join.go), each request with its own access
-- and idempotency key (sql/idempotency/). A request that breaks a rule is refused alone: its work
-- is undone (a subtransaction) and the others of the call go on; a transient error fails the call.

CREATE VIEW api.series_append_results AS
SELECT NULL::integer AS request, NULL::jsonb AS answer, NULL::text AS sqlstate, NULL::text AS reason, NULL::text AS detail,
       NULL::text AS hint, NULL::boolean AS replayed
WHERE false;
COMMENT ON VIEW api.series_append_results IS 'Always empty: the row type of api.series_append_requests. request: the request''s position in the call, from 1; answer: its answer ({"status": "ok"}) when applied; sqlstate and reason: why it was refused (answer NULL), with the error''s detail and hint when it has them; replayed: the request repeated an idempotency key and this is the first answer (nothing applied again).';

CREATE FUNCTION api.series_append_requests(p_requests jsonb)
RETURNS SETOF api.series_append_results
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    v_claims idempotency_private.claimed[];
    v_res    api.series_append_results[] := '{}';
    v_c      idempotency_private.claimed;
    v_answer jsonb;
    v_state  text;
    v_reason text;
    v_detail text;
    v_hint   text;
BEGIN
    v_claims := idempotency_private.claim_requests(p_requests, 'POST series', 'append', '{object}');
    FOR i IN 1 .. coalesce(cardinality(v_claims), 0) LOOP
        v_c := v_claims[i];
        IF v_c.outcome = 'refused' THEN
            v_res := v_res || ROW(i, NULL, v_c.sqlstate, v_c.reason, NULL, NULL, false)::api.series_append_results;
        ELSIF v_c.outcome = 'replay' THEN
            v_res := v_res || ROW(i, v_c.answer -> 'answer', v_c.answer ->> 'sqlstate', v_c.answer ->> 'reason',
                                  v_c.answer ->> 'detail', v_c.answer ->> 'hint', true)::api.series_append_results;
        ELSIF v_c.outcome = 'repeat' THEN
            v_res := v_res || ROW(i, v_res[v_c.repeats].answer, v_res[v_c.repeats].sqlstate, v_res[v_c.repeats].reason,
                                  v_res[v_c.repeats].detail, v_res[v_c.repeats].hint, true)::api.series_append_results;
        ELSE
            v_answer := NULL;
            v_state := NULL;
            v_reason := NULL;
            v_detail := NULL;
            v_hint := NULL;
            BEGIN
                v_answer := series_private.apply(v_c.body);
            EXCEPTION WHEN SQLSTATE 'SASTR' OR SQLSTATE 'SAINV' OR SQLSTATE 'SAOPR' OR SQLSTATE 'SANFD'
                        OR SQLSTATE 'SAFRB' OR SQLSTATE 'SAAUT' OR SQLSTATE 'SATYP' THEN
                GET STACKED DIAGNOSTICS v_state = RETURNED_SQLSTATE, v_reason = MESSAGE_TEXT,
                                        v_detail = PG_EXCEPTION_DETAIL, v_hint = PG_EXCEPTION_HINT;
            END;
            v_res := v_res || ROW(i, v_answer, v_state, v_reason, nullif(v_detail, ''), nullif(v_hint, ''), false)::api.series_append_results;
            IF v_c.outcome = 'new' THEN
                v_claims[i].answer := jsonb_build_object('answer', v_answer, 'sqlstate', v_state, 'reason', v_reason,
                                                       'detail', nullif(v_detail, ''), 'hint', nullif(v_hint, ''));
            END IF;
        END IF;
    END LOOP;
    IF EXISTS (SELECT FROM unnest(v_claims) c WHERE c.outcome = 'new') THEN
        PERFORM idempotency_private.record(v_claims, 'POST series');
    END IF;
    RETURN QUERY SELECT * FROM unnest(v_res);
END
$$;
COMMENT ON FUNCTION api.series_append_requests(jsonb) IS 'Applies several series write requests in one transaction, as HTTP''s series routes do (they join concurrent requests into one call). p_requests: a JSON array of requests {"append": {"access": access id, "event": event id, "data": flatJSON} (api.series_append) or {"access": access id, "batch": seriesBatch} (api.series_append_batch), "scope": optional, the scope of the idempotency key (HTTP: account:<access id>), "idempotency_key": optional, 1 to 255 printable ASCII characters}. Each request is applied all or nothing on its own; one that breaks a rule is refused and costs the others nothing. A request whose key was used within silo.settings idempotency.window for the same body in the same scope is not applied again: it gets the first answer, marked replayed. Returns one api.series_append_results row per request, in order: answer {"status": "ok"}, or sqlstate and reason: SAAUT, SANFD, SAFRB, SAOPR, SASTR, SAINV, SATYP as api.series_append raises them; SLINV (not an object, append missing), SLIDK (invalid key), SLIDM (key used for another body). Raises SLINV when p_requests is not a JSON array; transient errors roll back the whole call.';
