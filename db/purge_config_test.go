package db_test

// Purge configuration and periods (sql/purge/01_config.sql): the seed's keys and defaults, periods
// in the seed's forms (its Spanish letters included) and ISO-8601, the lower bound at the start of
// the day in UTC whatever the session's time zone.

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/silo-db/silo/db"
	"github.com/silo-db/silo/db/dbtest"
)

func TestPurgeConfigDefaultsAndSet(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	tx := dbtest.Tx(t)
	q := db.New(tx)
	raw, err := q.PurgeConfig(ctx)
	require.NoError(t, err)
	var cfg map[string]any
	require.NoError(t, json.Unmarshal(raw, &cfg))
	require.Equal(t, false, cfg["enabled"])
	require.Equal(t, "STANDARD", cfg["mode"])
	require.Equal(t, "2Y", cfg["retention-period"])
	require.Equal(t, "P2Y", cfg["retentionPeriod"])
	require.Equal(t, false, cfg["terminal-unit-of-works-only"])
	require.Equal(t, []any{}, cfg["archived-dependent-journey-types"])
	require.Equal(t, "1s", cfg["frequency"])
	require.Equal(t, float64(1000), cfg["frequencyMillis"])
	require.Equal(t, float64(16), cfg["fetch-size"])
	require.Equal(t, float64(8), cfg["parallelism"])

	raw, err = q.PurgeConfigSet(ctx, []byte(`{"enabled": true, "retention-period": "P1Y6M", "frequency": "PT0.5S",
		"archived-dependent-journey-types": ["RECALL", "PAYMENT", "PAYMENT"], "fetch-size": 500}`))
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(raw, &cfg))
	require.Equal(t, true, cfg["enabled"])
	require.Equal(t, "P1Y6M", cfg["retentionPeriod"])
	require.Equal(t, float64(500), cfg["frequencyMillis"])
	require.Equal(t, []any{"PAYMENT", "RECALL"}, cfg["archived-dependent-journey-types"])
	require.Equal(t, float64(500), cfg["fetch-size"])
	require.Equal(t, float64(8), cfg["parallelism"], "keys not given stay")
	raw, err = q.PurgeConfigSet(ctx, []byte(`{"parallelism": 4}`))
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(raw, &cfg))
	require.Equal(t, []any{"PAYMENT", "RECALL"}, cfg["archived-dependent-journey-types"], "keys not given stay")
	raw, err = q.PurgeConfigSet(ctx, []byte(`{"archived-dependent-journey-types": []}`))
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(raw, &cfg))
	require.Equal(t, []any{}, cfg["archived-dependent-journey-types"])

	var n int
	require.NoError(t, tx.QueryRow(ctx, `SELECT count(*) FROM change_private.outbox WHERE channel = 'purge' AND kind = 'config'`).Scan(&n))
	require.Equal(t, 3, n, "each change is published")

	for body, code := range map[string]string{
		`[]`:                  "SPCFG",
		`{"bogus": 1}`:        "SPCFG",
		`{"enabled": "yes"}`:  "SPCFG",
		`{"mode": "FAST"}`:    "SPCFG",
		`{"fetch-size": 0}`:   "SPCFG",
		`{"fetch-size": 1.5}`: "SPCFG",
		`{"parallelism": 65}`: "SPCFG",
		`{"archived-dependent-journey-types": ["TRAVEL"]}`: "SPCFG",
		`{"archived-dependent-journey-types": "PAYMENT"}`:  "SPCFG",
		`{"retention-period": "2H"}`:                       "SPPER",
		`{"retention-period": "0Y"}`:                       "SPPER",
		`{"frequency": "P1Y"}`:                             "SPPER",
		`{"frequency": "2 seconds"}`:                       "SPPER",
		`{"ttl-expire-after-seconds": 0}`:                  "SPCFG",
	} {
		err := dbtest.Savepoint(t, tx, func(tx pgx.Tx) error {
			_, err := db.New(tx).PurgeConfigSet(ctx, []byte(body))
			return err
		})
		requireSQLState(t, err, code)
	}
	// A DBA's UPDATE is checked as well.
	err = dbtest.Savepoint(t, tx, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `UPDATE purge.config SET retention_period = 'two years'`)
		return err
	})
	requireSQLState(t, err, "SPPER")
}

func TestPurgePeriods(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	tx := dbtest.Tx(t)
	date := func(s string) *string {
		var out *string
		require.NoError(t, tx.QueryRow(ctx, `SELECT purge_private.iso_period(purge_private.date_period($1))`, s).Scan(&out))
		return out
	}
	for in, want := range map[string]string{
		"2Y": "P2Y", "2y": "P2Y", "P2Y": "P2Y", "1M": "P1M", "1W": "P7D", "P1W": "P7D", "30D": "P30D",
		"1A": "P1Y", "1S": "P7D", "P1Y6M": "P1Y6M", " 3m ": "P3M",
	} {
		got := date(in)
		require.NotNil(t, got, in)
		require.Equal(t, want, *got, in)
	}
	for _, bad := range []string{"", "P", "2", "Y", "PT1S", "1H", "two years", "-1Y", "1.5Y"} {
		require.Nil(t, date(bad), "%q", bad)
	}
	timePeriod := func(s string) *time.Duration {
		var ms *float64
		require.NoError(t, tx.QueryRow(ctx, `SELECT extract(epoch FROM purge_private.time_period($1)) * 1000`, s).Scan(&ms))
		if ms == nil {
			return nil
		}
		d := time.Duration(*ms * float64(time.Millisecond))
		return &d
	}
	for in, want := range map[string]time.Duration{
		"1s": time.Second, "2S": 2 * time.Second, "1m": time.Minute, "1M": time.Minute, "500ms": 500 * time.Millisecond,
		"PT1S": time.Second, "PT0.5S": 500 * time.Millisecond, "PT1M30S": 90 * time.Second, "1h": time.Hour, "1m30s": 90 * time.Second,
	} {
		got := timePeriod(in)
		require.NotNil(t, got, in)
		require.Equal(t, want, *got, in)
	}
	for _, bad := range []string{"", "PT", "1", "P1Y", "1Y", "1W", "PT1D", "s"} {
		require.Nil(t, timePeriod(bad), bad)
	}
	var iso []string
	rows, err := tx.Query(ctx, `SELECT purge_private.iso_duration(d) FROM unnest(ARRAY[
		interval '32 minutes 1.01 seconds', interval '0', interval '48 hours', interval '1 hour 2 minutes 3.5 seconds',
		interval '0.001 seconds']) d`)
	require.NoError(t, err)
	iso, err = pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	require.Equal(t, []string{"PT32M1.01S", "PT0S", "PT48H", "PT1H2M3.5S", "PT0.001S"}, iso)
}

// The lower bound: the UTC date of the run minus the period, at 00:00 UTC, whatever the session's
// time zone.
func TestPurgeLowerBound(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	tx := dbtest.Tx(t)
	cases := []struct{ zone, now, period, want string }{
		{"UTC", "2023-05-17T00:00:00Z", "2Y", "2021-05-17T00:00:00Z"},
		{"UTC", "2023-05-17T23:59:59.999Z", "P2Y", "2021-05-17T00:00:00Z"},
		{"UTC", "2023-05-17T10:00:00Z", "1M", "2023-04-17T00:00:00Z"},
		{"UTC", "2023-05-17T10:00:00Z", "1W", "2023-05-10T00:00:00Z"},
		{"UTC", "2023-03-31T10:00:00Z", "1M", "2023-02-28T00:00:00Z"},
		{"UTC", "2024-02-29T10:00:00Z", "1Y", "2023-02-28T00:00:00Z"},
		// 23:30 in New York on the 17th is the 18th in UTC.
		{"America/New_York", "2023-05-17T23:30:00-04:00", "2Y", "2021-05-18T00:00:00Z"},
		// 08:00 in Auckland on the 17th is the 16th in UTC.
		{"Pacific/Auckland", "2023-05-17T08:00:00+12:00", "2Y", "2021-05-16T00:00:00Z"},
	}
	for _, c := range cases {
		_, err := tx.Exec(ctx, `SELECT set_config('TimeZone', $1, true)`, c.zone)
		require.NoError(t, err)
		var got time.Time
		require.NoError(t, tx.QueryRow(ctx, `SELECT api.purge_lower_bound($1::timestamptz, $2)`, c.now, c.period).Scan(&got))
		want, err := time.Parse(time.RFC3339, c.want)
		require.NoError(t, err)
		require.True(t, want.Equal(got), "%+v: got %s", c, got.UTC())
	}
	err := dbtest.Savepoint(t, tx, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `SELECT api.purge_lower_bound(now(), '2 years')`)
		return err
	})
	requireSQLState(t, err, "SPPER")
}
