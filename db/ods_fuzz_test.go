package db_test

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/silo-db/silo/db/dbtest"
)

// FuzzOdsIngest feeds arbitrary input to api.ods_ingest and api.ods_append. Whatever they get,
// they answer one row per item (only SLINV for input that is neither an object nor an array),
// each stored, duplicate or refused with one of the ODS's SQLSTATEs. Bytes that are not JSON become
// the fields of an otherwise valid item. The seed corpus is in testdata/fuzz/FuzzOdsIngest.
//
//	go test ./db/ -run '^$' -fuzz FuzzOdsIngest -fuzztime 60s
func FuzzOdsIngest(f *testing.F) {
	for _, s := range []string{
		`{"unitOfWorkId": "u", "globalStatus": "PENDING", "createdAt": "2021-02-29T00:00:00Z"}`,
		`[{"unitOfWorkId": "u", "globalStatus": "COMPLETED", "journeyType": "BULK", "ttl": 5}, {"unitOfWorkId": "u", "kind": "MDS", "type": "t", "payload": null}]`,
		`[1, null, "x", [], {}, {"unitOfWorkId": ""}]`,
		`{"unitOfWorkId": "u", "globalStatus": "PENDING", "createdAt": 99999999999999999999}`,
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
			input = []byte(`{"unitOfWorkId":` + string(v) + `,"globalStatus":"PENDING","kind":"CUSTOM","type":` + string(v) +
				`,"createdAt":` + string(v) + `,"id":` + string(v) + `,"payload":` + string(v) + `}`)
		}
		tx := dbtest.Tx(t)
		if dbtest.Savepoint(t, tx, func(tx pgx.Tx) error {
			_, err := tx.Exec(ctx, `SELECT $1::text::jsonb`, string(input))
			return err
		}) != nil {
			return
		}
		trimmed := bytes.TrimSpace(input)
		want := -1
		switch trimmed[0] {
		case '{':
			want = 1
		case '[':
			var elems []json.RawMessage
			require.NoError(t, json.Unmarshal(trimmed, &elems))
			want = len(elems)
		}
		for _, fn := range []string{"api.ods_ingest", "api.ods_append"} {
			var statuses []string
			err := dbtest.Savepoint(t, tx, func(tx pgx.Tx) error {
				rows, err := tx.Query(ctx, `SELECT status || coalesce(':' || sqlstate, '') FROM `+fn+`($1::text::jsonb)`, string(input))
				if err != nil {
					return err
				}
				statuses, err = pgx.CollectRows(rows, pgx.RowTo[string])
				return err
			})
			if want < 0 {
				requireSQLState(t, err, "SLINV")
				continue
			}
			require.NoError(t, err, fn)
			require.Len(t, statuses, want, fn)
			for _, s := range statuses {
				require.Contains(t, []string{"stored", "duplicate", "refused:SOINV", "refused:SOSTA", "refused:SOTIM"}, s, fn)
			}
		}
	})
}

// FuzzPurgePeriod feeds arbitrary text to the period parsers: they answer a period or NULL, never
// an error, and what the configuration accepts is a positive period of its kind.
//
//	go test ./db/ -run '^$' -fuzz FuzzPurgePeriod -fuzztime 60s
func FuzzPurgePeriod(f *testing.F) {
	for _, s := range []string{"2Y", "P1Y6M", "1S", "PT0.5S", "500ms", "1m30s", "99999999999Y", "P", "", "1.5Y", "PT1D"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		s = strings.ToValidUTF8(strings.ReplaceAll(s, "\x00", ""), "?")
		tx := dbtest.Tx(t)
		var date, tm *string
		err := dbtest.Savepoint(t, tx, func(tx pgx.Tx) error {
			return tx.QueryRow(context.Background(), `SELECT purge_private.iso_period(purge_private.date_period($1)),
				purge_private.time_period($1)::text`, s).Scan(&date, &tm)
		})
		require.NoError(t, err, "%q", s)
		if date != nil {
			require.True(t, strings.HasPrefix(*date, "P"), *date)
		}
	})
}
