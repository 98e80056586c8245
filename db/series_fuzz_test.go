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

// FuzzSeriesAppend feeds arbitrary flatJSON bodies (and, as a seriesBatch, the same body as the
// data of one operation) to api.series_append of a position/wgs84 holder, the type with required,
// optional and numeric fields. Whatever the body, the function stores it or raises SASTR
// (invalid-request-structure, a 400), never anything an HTTP client would see as a 500; what it
// stores reads back. Bytes that are not JSON become the cells of a point. The seed corpus is in
// testdata/fuzz/FuzzSeriesAppend.
//
//	go test ./db/ -run '^$' -fuzz FuzzSeriesAppend -fuzztime 60s
func FuzzSeriesAppend(f *testing.F) {
	for _, s := range []string{
		`{"format": "flatJSON", "fields": ["deltaTime", "latitude", "longitude"], "points": [[0, 46.5, 6.6]]}`,
		`{"format": "flatJSON", "fields": ["timestamp", "longitude", "latitude", "speed"], "points": [[2000.5, "1e3", "-0.5", null]]}`,
		`{"format": "flatJSON", "fields": ["deltaTime", "latitude", "longitude"], "points": [[1e400, 1, 2], [0, 1e-400, 1e308]]}`,
		`{"format": "flatJSON", "fields": ["deltaTime", "latitude", "longitude"], "points": [[0, 1, 2], [0, 3]]}`,
		`{"format": "flatJSON", "fields": ["deltaTime", "deltaTime"], "points": []}`,
		`{"format": "flatJSON", "fields": [null], "points": [[]]}`,
		`{"format": "flatJSON", "fields": ["deltaTime", "latitude", "longitude"], "points": [[0, 123456789012345678901234, 0.30000000000000004]]}`,
		`[{"format": "flatJSON"}]`,
		`"points"`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		ctx := context.Background()
		if !json.Valid(data) {
			v, err := json.Marshal(strings.ToValidUTF8(strings.ReplaceAll(string(data), "\x00", ""), "?"))
			require.NoError(t, err)
			data = []byte(`{"format": "flatJSON", "fields": ["deltaTime", "latitude", "longitude"], "points": [[` + string(v) + `, 1, ` + string(v) + `]]}`)
		}
		tx := dbtest.Tx(t)
		if dbtest.Savepoint(t, tx, func(tx pgx.Tx) error {
			_, err := tx.Exec(ctx, `SELECT $1::text::jsonb`, string(data))
			return err
		}) != nil {
			return // PostgreSQL cannot read it as jsonb (\u0000, too deep, a number beyond numeric): never the function's input
		}
		q := db.New(tx)
		user, err := q.AccountUserCreate(ctx, db.AccountUserCreateParams{Username: "fuzzer", AccessName: "silo"})
		require.NoError(t, err)
		_, err = q.AccountStreamCreate(ctx, db.AccountStreamCreateParams{AccessID: user.AccessID, Stream: json.RawMessage(`{"id": "s", "name": "S"}`)})
		require.NoError(t, err)
		out, err := q.AccountEventCreate(ctx, db.AccountEventCreateParams{AccessID: user.AccessID,
			Event: json.RawMessage(`{"streamId": "s", "type": "series:position/wgs84", "time": 1000}`)})
		require.NoError(t, err)
		var e struct{ Event struct{ ID string } }
		require.NoError(t, json.Unmarshal(out, &e))
		check := func(err error) {
			if err == nil {
				return
			}
			var pgErr *pgconn.PgError
			require.True(t, errors.As(err, &pgErr), "%v", err)
			require.Equal(t, "SASTR", pgErr.Code, "%s for %s", pgErr.Message, data)
		}
		err = dbtest.Savepoint(t, tx, func(tx pgx.Tx) error {
			_, err := db.New(tx).SeriesAppend(ctx, db.SeriesAppendParams{AccessID: user.AccessID, EventID: e.Event.ID, Data: data})
			return err
		})
		check(err)
		err = dbtest.Savepoint(t, tx, func(tx pgx.Tx) error {
			_, err := db.New(tx).SeriesAppendBatch(ctx, db.SeriesAppendBatchParams{AccessID: user.AccessID,
				Batch: json.RawMessage(`{"format": "seriesBatch", "data": [{"eventId": "` + e.Event.ID + `", "data": ` + string(data) + `}]}`)})
			return err
		})
		check(err)
		_, err = q.SeriesGet(ctx, db.SeriesGetParams{AccessID: user.AccessID, EventID: e.Event.ID, Relative: true, TimeField: "deltaTime"})
		require.NoError(t, err)
	})
}
