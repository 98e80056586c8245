package db_test

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/silo-db/silo/db"
	"github.com/silo-db/silo/db/dbtest"
)

// FuzzEventIngest feeds arbitrary input to api.event_ingest. Whatever it gets, the function
// answers one row per event (only SLINV for input that is neither an object nor an array), each
// stored, duplicate or refused with one of the event store's SQLSTATEs, and stores exactly the
// events it answers stored. Bytes that are not JSON become the payload and the headers of an
// otherwise valid event. The seed corpus is in testdata/fuzz/FuzzEventIngest.
//
//	go test ./db/ -run '^$' -fuzz FuzzEventIngest -fuzztime 60s
func FuzzEventIngest(f *testing.F) {
	for _, s := range []string{
		`{"event_headers":{"grnry-event-id":"a","grnry-event-type":"t","grnry-correlation-id":"c"},"event_payload":{}}`,
		`[{"event_headers":{"grnry-event-id":"a","grnry-event-type":"t","grnry-correlation-id":"c","grnry-event-timestamp":"2020-02-29T23:59:59.999-01:30"},"event_payload":null},{"event_headers":{"grnry-event-id":"a","grnry-event-type":"t","grnry-correlation-id":"c"},"event_payload":1}]`,
		`[{"event_headers":{"grnry-event-id":"b","grnry-event-type":"t","grnry-correlation-id":"c","grnry-event-timestamp":1e3},"event_payload":[]}]`,
		`[1, null, "x", [], {}, {"event_headers": null}]`,
		`42`,
		`not json at all`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		ctx := context.Background()
		input := data
		if !json.Valid(data) {
			v, err := json.Marshal(strings.ToValidUTF8(strings.ReplaceAll(string(data), "\x00", ""), "?"))
			require.NoError(t, err)
			input = []byte(`{"event_headers":{"grnry-event-id":` + string(v) + `,"grnry-event-type":"t","grnry-correlation-id":` +
				string(v) + `,"grnry-event-timestamp":` + string(v) + `},"event_payload":` + string(v) + `}`)
		}
		tx := dbtest.Tx(t)
		// Input PostgreSQL cannot read as jsonb never reaches the function.
		if dbtest.Savepoint(t, tx, func(tx pgx.Tx) error {
			_, err := tx.Exec(ctx, `SELECT $1::text::jsonb`, string(input))
			return err
		}) != nil {
			return
		}
		trimmed := bytes.TrimSpace(input)
		want := -1 // SLINV
		switch trimmed[0] {
		case '{':
			want = 1
		case '[':
			var elems []json.RawMessage
			require.NoError(t, json.Unmarshal(trimmed, &elems))
			want = len(elems)
		}
		var rows []db.EventIngestRow
		err := dbtest.Savepoint(t, tx, func(tx pgx.Tx) error {
			var err error
			rows, err = db.New(tx).EventIngest(ctx, json.RawMessage(input))
			return err
		})
		if want < 0 {
			requireSQLState(t, err, "SLINV")
			return
		}
		require.NoError(t, err)
		require.Len(t, rows, want)
		stored := 0
		for i, r := range rows {
			require.Equal(t, int32(i+1), r.Ord)
			switch r.Status {
			case "stored":
				stored++
				require.NotNil(t, r.EventID)
				require.NotNil(t, r.FirstStored)
			case "duplicate":
				require.NotNil(t, r.EventID)
			case "refused":
				require.NotNil(t, r.SQLState)
				require.Contains(t, []string{"SEEVT", "SEHDR", "SETIM"}, *r.SQLState)
				require.NotEmpty(t, evStr(r.Reason))
			default:
				t.Fatalf("status %q", r.Status)
			}
		}
		var n int
		require.NoError(t, tx.QueryRow(ctx, `SELECT count(*) FROM event.events`).Scan(&n))
		require.Equal(t, stored, n)
	})
}
