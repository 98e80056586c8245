package db_test

// Retention (sql/purge/05_retention.sql): every target of purge.retention_targets applied as of a
// given time with its silo.settings retention; a failing target is recorded and costs the others
// nothing.

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/silo-db/silo/db"
	"github.com/silo-db/silo/db/dbtest"
)

func TestRetentionRun(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	tx := dbtest.Tx(t)
	q := db.New(tx)
	_, err := tx.Exec(ctx, `INSERT INTO silo.idempotency_keys (scope, key, request, request_hash, answer, created) VALUES
		('token:1', 'a', 'POST /x', '\x00', '[]', now()), ('token:1', 'b', 'POST /x', '\x00', '[]', now() - interval '2 hours');
		UPDATE silo.settings SET value = 'soon' WHERE key = 'change_retention'`)
	require.NoError(t, err)

	var now time.Time
	require.NoError(t, tx.QueryRow(ctx, `SELECT now()`).Scan(&now))
	// As of 23 hours from now, the key of two hours ago is past the 24-hour window, the other not.
	rows, err := q.RetentionRun(ctx, db.RetentionRunParams{Now: now.Add(23 * time.Hour)})
	require.NoError(t, err)
	require.Len(t, rows, 6)
	byTarget := map[string]db.RetentionRunRow{}
	for _, r := range rows {
		byTarget[r.Target] = r
	}
	require.JSONEq(t, `1`, string(byTarget["idempotency"].Result))
	require.Equal(t, "SLINV", *byTarget["change"].SQLState, "a bad setting fails its target only")
	require.Nil(t, byTarget["change"].Result)
	require.Nil(t, byTarget["event"].SQLState)
	require.JSONEq(t, `0`, string(byTarget["belt_dead_letters"].Result), "no belt dead letters to delete")
	require.JSONEq(t, `{"jobs": 0, "claims": 0}`, string(byTarget["job"].Result), "no finished jobs to delete")
	require.JSONEq(t, `{"dropped_partitions": 0, "deleted_ids": 0, "deleted_deliveries": 0}`, string(byTarget["event"].Result))
	require.JSONEq(t, `{"dropped_chunks": 0, "deleted_points": 0}`, string(byTarget["series"].Result))
	require.False(t, byTarget["series"].Retention.Valid, "series.retention is empty by default: no default retention")
	require.Nil(t, byTarget["series"].Cutoff)
	var keys []string
	require.NoError(t, tx.QueryRow(ctx, `SELECT array(SELECT key FROM silo.idempotency_keys ORDER BY key)`).Scan(&keys))
	require.Equal(t, []string{"a"}, keys)
	var lastError *string
	require.NoError(t, tx.QueryRow(ctx, `SELECT last_error FROM purge.retention_targets WHERE name = 'change'`).Scan(&lastError))
	require.Contains(t, *lastError, "SLINV")

	// One target, even a disabled one; an unknown one is refused.
	_, err = tx.Exec(ctx, `UPDATE purge.retention_targets SET enabled = false WHERE name = 'idempotency'`)
	require.NoError(t, err)
	target := "idempotency"
	rows, err = q.RetentionRun(ctx, db.RetentionRunParams{Now: now.Add(25 * time.Hour), Target: &target})
	require.NoError(t, err)
	require.Len(t, rows, 1)
	require.JSONEq(t, `1`, string(rows[0].Result))
	rows, err = q.RetentionRun(ctx, db.RetentionRunParams{Now: now})
	require.NoError(t, err)
	require.Len(t, rows, 5, "a disabled target is skipped")
	err = dbtest.Savepoint(t, tx, func(tx pgx.Tx) error {
		nope := "nope"
		_, err := db.New(tx).RetentionRun(ctx, db.RetentionRunParams{Now: now, Target: &nope})
		return err
	})
	requireSQLState(t, err, "SLNFD")
}
