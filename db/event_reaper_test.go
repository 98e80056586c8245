package db_test

// The reaper's notifications arrive as events (sql/profile/10_reaper.sql): each TTN notification
// and TTL deletion is ingested into the event store as an event of type ttn-<profile type> or
// ttl-<profile type>, without the grain's value, and delivered to the consumers of that type.

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/silo-db/silo/db"
	"github.com/silo-db/silo/db/dbtest"
)

func TestEventReaperNotificationsAreEvents(t *testing.T) {
	t.Parallel()
	tx := dbtest.Tx(t)
	ctx := context.Background()
	q := db.New(tx)
	_, err := tx.Exec(ctx, `SELECT event_private.consumer_create('notify', '{ttn-feedback,ttl-feedback}', 4::smallint)`)
	require.NoError(t, err)
	rows, err := q.ProfileApplyBatch(ctx, db.ProfileApplyBatchParams{Updates: json.RawMessage(`[
		{"_id": "Feedback82542", "_profile_type": "feedback", "_path": ["notification", "thankyou"],
		 "_value": {"_v": "secret value", "_in": 1569504323132, "_ttn": "PT5M", "_reader": "_auth", "_origin": "/belt123"}},
		{"_id": "Feedback82542", "_profile_type": "feedback", "_path": ["gone"],
		 "_value": {"_v": "other secret", "_in": 1569504323132, "_ttl": "PT5M"}},
		{"_id": "Other", "_profile_type": "feedback", "_path": ["fresh"], "_value": {"_v": "x", "_ttn": "P1D"}}]`)})
	require.NoError(t, err)
	for _, r := range rows {
		require.Equal(t, "ok", r.Status, evStr(r.Reason))
	}
	before := time.Now()
	res, err := q.ProfileReap(ctx, nil)
	require.NoError(t, err)
	require.EqualValues(t, 1, res.TTNNotified)
	require.EqualValues(t, 1, res.TTLDeleted)

	type stored struct {
		Type, CID, Harvester string
		Headers, Payload     map[string]any
		At                   time.Time
	}
	evRows, err := tx.Query(ctx, `SELECT event_type, correlation_id, harvester_name, headers, payload, at FROM event.events ORDER BY event_type`)
	require.NoError(t, err)
	var evs []stored
	for evRows.Next() {
		var s stored
		var h, p []byte
		require.NoError(t, evRows.Scan(&s.Type, &s.CID, &s.Harvester, &h, &p, &s.At))
		require.NoError(t, json.Unmarshal(h, &s.Headers))
		require.NoError(t, json.Unmarshal(p, &s.Payload))
		evs = append(evs, s)
	}
	require.NoError(t, evRows.Err())
	require.Len(t, evs, 2)
	require.Equal(t, "ttl-feedback", evs[0].Type)
	require.Equal(t, "ttn-feedback", evs[1].Type)
	ttn := evs[1]
	require.Equal(t, "Feedback82542", ttn.CID)
	require.Equal(t, "silo-reaper", ttn.Harvester)
	require.Equal(t, "ttn-feedback", ttn.Headers["grnry-event-type"])
	require.Equal(t, "Feedback82542", ttn.Headers["grnry-correlation-id"])
	require.Regexp(t, `^[0-9a-f-]{36}$`, ttn.Headers["grnry-event-id"])
	require.Regexp(t, `^\d{13}$`, ttn.Headers["grnry-event-timestamp"])
	require.WithinDuration(t, before, ttn.At, time.Minute)
	require.NotEqual(t, evs[0].Headers["grnry-event-id"], ttn.Headers["grnry-event-id"])
	require.Equal(t, "/notification/thankyou", ttn.Payload["path"])
	require.Equal(t, "_latest", ttn.Payload["pit"])
	require.Equal(t, "t", ttn.Payload["grain_type"])
	require.Equal(t, "PT5M", ttn.Payload["ttn"])
	require.Equal(t, "P100Y", ttn.Payload["ttl"])
	require.Equal(t, "feedback", ttn.Payload["profileType"])
	require.Equal(t, "/belt123", ttn.Payload["origin"])
	require.NotEmpty(t, ttn.Payload["due"])
	require.Equal(t, "/gone", evs[0].Payload["path"])
	for _, e := range evs {
		for k, v := range e.Payload {
			require.NotContains(t, []string{"value", "_v"}, k)
			require.NotContains(t, []any{"secret value", "other secret"}, v)
		}
	}

	// Both are delivered to the consumer of their types.
	var n int
	require.NoError(t, tx.QueryRow(ctx, `SELECT count(*) FROM event.deliveries WHERE correlation_id = 'Feedback82542'`).Scan(&n))
	require.Equal(t, 2, n)

	// A second run finds nothing due: no more events.
	_, err = q.ProfileReap(ctx, nil)
	require.NoError(t, err)
	require.NoError(t, tx.QueryRow(ctx, `SELECT count(*) FROM event.events`).Scan(&n))
	require.Equal(t, 2, n)
}
