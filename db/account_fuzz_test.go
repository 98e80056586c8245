package db_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/silo-db/silo/db"
	"github.com/silo-db/silo/db/dbtest"
)

// FuzzAccountEvent feeds arbitrary bodies (bytes that are not JSON as the type of an event) to api.account_event_create and, when one creates an
// event, the same body to api.account_event_update of it. Whatever the body, the functions either
// succeed or raise one of the account's own SQLSTATEs (a Pryv error with a 4xx status), never
// anything an HTTP client would see as a 500. The seed corpus is in testdata/fuzz/FuzzAccountEvent.
//
//	go test ./db/ -run '^$' -fuzz FuzzAccountEvent -fuzztime 60s
func FuzzAccountEvent(f *testing.F) {
	for _, s := range []string{
		`{"streamId": "s", "type": "note/txt", "content": "x"}`,
		`{"streamIds": ["s", "s"], "type": "series:position/wgs84", "time": 1e400}`,
		`{"streamIds": ["s"], "type": "mass/kg", "duration": -1e400, "tags": [1], "clientData": 3}`,
		`{"streamId": "s", "type": "series:mass/kg", "content": null, "duration": 0.0}`,
		`{"id": "c000000000000000000000000", "streamId": "s", "type": "a/b", "trashed": "yes"}`,
		`{"streamId": "s", "streamIds": [], "type": "x"}`,
		`[{"streamId": "s"}]`,
		`"text"`,
		`null`,
	} {
		f.Add([]byte(s))
	}
	allowed := map[string]bool{"SASTR": true, "SAINV": true, "SAOPR": true, "SATYP": true, "SAREF": true, "SAFRB": true, "SACNF": true}
	f.Fuzz(func(t *testing.T, data []byte) {
		ctx := context.Background()
		if !json.Valid(data) {
			// Bytes that are not JSON become the type and a tag of an otherwise valid event.
			v, err := json.Marshal(strings.ToValidUTF8(strings.ReplaceAll(string(data), "\x00", ""), "?"))
			require.NoError(t, err)
			data = []byte(`{"streamId": "s", "type": ` + string(v) + `, "tags": [` + string(v) + `]}`)
		}
		tx := dbtest.Tx(t)
		if dbtest.Savepoint(t, tx, func(tx pgx.Tx) error {
			_, err := tx.Exec(ctx, `SELECT $1::text::jsonb`, string(data))
			return err
		}) != nil {
			return // PostgreSQL cannot read it as jsonb (\u0000, too deep): never the function's input
		}
		q := db.New(tx)
		user, err := q.AccountUserCreate(ctx, db.AccountUserCreateParams{Username: "fuzzer", AccessName: "silo"})
		require.NoError(t, err)
		_, err = q.AccountStreamCreate(ctx, db.AccountStreamCreateParams{AccessID: user.AccessID, Stream: json.RawMessage(`{"id": "s", "name": "S"}`)})
		require.NoError(t, err)
		check := func(err error) {
			if err == nil {
				return
			}
			var pgErr *pgconn.PgError
			require.True(t, errors.As(err, &pgErr), "%v", err)
			require.True(t, allowed[pgErr.Code], "%s %s for %s", pgErr.Code, pgErr.Message, data)
		}
		var created json.RawMessage
		err = dbtest.Savepoint(t, tx, func(tx pgx.Tx) error {
			var err error
			created, err = db.New(tx).AccountEventCreate(ctx, db.AccountEventCreateParams{AccessID: user.AccessID, Event: data})
			return err
		})
		check(err)
		if err != nil {
			return
		}
		var out struct{ Event struct{ ID string } }
		require.NoError(t, json.Unmarshal(created, &out))
		err = dbtest.Savepoint(t, tx, func(tx pgx.Tx) error {
			_, err := db.New(tx).AccountEventUpdate(ctx, db.AccountEventUpdateParams{AccessID: user.AccessID, ID: out.Event.ID, Update: data})
			return err
		})
		check(err)
	})
}
