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

// FuzzProfileApply feeds arbitrary input to api.profile_apply_batch. Whatever it gets, the
// function answers one result per update (only SLINV for input that is neither an object nor an
// array), each ok, noop or dead_letter, and every dead letter is recorded. Bytes that are not JSON
// become the _v of an otherwise valid update. The seed corpus is in testdata/fuzz/FuzzProfileApply.
//
//	go test ./db/ -run '^$' -fuzz FuzzProfileApply -fuzztime 60s
func FuzzProfileApply(f *testing.F) {
	for _, s := range []string{
		`{"_id":"f","_path":["p"],"_value":{"_v":"x"}}`,
		`[{"_operation":"_inc","_id":"f","_path":["c"],"_value":{"_v":"1|2|3","_in":"2018-09-24"}},{"_id":"f","_path":["c"],"_value":{"_v":["a"]}}]`,
		`[{"_operation":"_profile_link","_id":"f","_value":{"_v":"g"}},{"_operation":"_profile_link","_id":"g","_value":{"_v":"f"}}]`,
		`[{"_operation":"_set_ttl","_id":"f","_path":["p"],"_value":{"_v":"P1Y2M3DT4H5M6.5S","_ttl":"-P1D"}}]`,
		`[1, null, "x", [], {}]`,
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
			input = []byte(`{"_id":"f","_path":["p"],"_value":{"_v":` + string(v) + `,"_in":1000}}`)
		}
		tx := dbtest.Tx(t)
		// Input PostgreSQL cannot even read as jsonb (a \u0000, a number beyond numeric, too deep)
		// never reaches the function.
		if dbtest.Savepoint(t, tx, func(tx pgx.Tx) error {
			_, err := tx.Exec(ctx, `SELECT $1::text::jsonb`, string(input))
			return err
		}) != nil {
			return // not the function's input: nothing to check
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
		var rows []db.ProfileApplyBatchRow
		err := dbtest.Savepoint(t, tx, func(tx pgx.Tx) error {
			var err error
			rows, err = db.New(tx).ProfileApplyBatch(ctx, db.ProfileApplyBatchParams{Updates: json.RawMessage(input)})
			return err
		})
		if want < 0 {
			requireSQLState(t, err, "SLINV")
			return
		}
		require.NoError(t, err)
		require.Len(t, rows, want)
		for i, r := range rows {
			require.Equal(t, int32(i+1), r.Ord)
			require.Contains(t, []string{"ok", "noop", "dead_letter"}, r.Status)
			if r.Status != "dead_letter" {
				require.Nil(t, r.DeadLetterID)
				continue
			}
			require.NotNil(t, r.DeadLetterID)
			require.NotNil(t, r.SQLState)
			var state, reason string
			require.NoError(t, tx.QueryRow(ctx, `SELECT sqlstate, reason FROM profile.dead_letters WHERE id = $1`,
				*r.DeadLetterID).Scan(&state, &reason))
			require.Equal(t, *r.SQLState, state)
			require.Equal(t, *r.Reason, reason)
		}
	})
}
