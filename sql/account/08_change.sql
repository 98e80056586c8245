-- Change notifications of accounts: one channel per user and kind of item, readers the user's role
-- {account:<username>} (account_private.readers), so only that user's accesses see them, as
-- Pryv's eventsChanged and streamsChanged reach the sockets of that user alone. Payloads carry ids.

CREATE FUNCTION account_private.publish(p_user_id bigint, p_items text, p_kind text, p_payload jsonb)
RETURNS void
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    v_username text := account_private.username(p_user_id);
BEGIN
    INSERT INTO change_private.outbox (channel, kind, payload, readers)
    VALUES ('account:' || v_username || ':' || p_items, p_kind, p_payload, account_private.readers(v_username));
END
$$;
COMMENT ON FUNCTION account_private.publish(bigint, text, text, jsonb) IS 'Publishes a change of user p_user_id''s p_items (events, streams) in the caller''s transaction: channel account:<username>:<p_items>, kind p_kind, payload p_payload (ids only), readers {account:<username>}. Raises nothing.';
