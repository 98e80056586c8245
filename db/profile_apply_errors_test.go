package db_test

// A synchronous batch (api.profile_apply_batch) treats an unexpected error by its class
// (api.error_class): a deterministic one is the update's own fault and only that update is
// dead-lettered; a transient one says nothing of the update, so the call fails whole (nothing
// applied, nothing dead-lettered) and the caller retries it.

import (
	"context"
	"errors"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/silo-db/silo/db"
	"github.com/silo-db/silo/db/dbtest"
)

func TestProfileApplyBatchErrorsByClass(t *testing.T) {
	for _, c := range []struct {
		code, message string
		transient     bool
	}{
		{"54000", "index row requires 12040 bytes, maximum size is 8191", false},
		{"23514", "new row violates check constraint", false},
		{"P0001", "refused by a trigger", false},
		{"40P01", "deadlock detected", true},
		{"55P03", "could not obtain lock on row", true},
		{"53100", "could not extend file: No space left on device", true},
	} {
		t.Run(c.code, func(t *testing.T) {
			tx := dbtest.Tx(t)
			ctx := context.Background()
			failOn(t, tx, c.code, c.message)
			_, err := tx.Exec(ctx, `SAVEPOINT call`)
			require.NoError(t, err)
			rows, err := db.New(tx).ProfileApplyBatch(ctx, db.ProfileApplyBatchParams{Updates: []byte(`[
				{"_id": "fine", "_path": ["a"], "_value": {"_v": "1"}},
				{"_id": "poison", "_path": ["a"], "_value": {"_v": "bad"}},
				{"_id": "fine", "_path": ["b"], "_value": {"_v": "2"}}]`)})
			if c.transient {
				var pgErr *pgconn.PgError
				require.True(t, errors.As(err, &pgErr), "%v", err)
				require.Equal(t, c.code, pgErr.Code)
				_, err = tx.Exec(ctx, `ROLLBACK TO SAVEPOINT call`)
				require.NoError(t, err)
				var dead, written int
				require.NoError(t, tx.QueryRow(ctx, `SELECT (SELECT count(*) FROM profile.dead_letters),
					(SELECT count(*) FROM profile.profilestore WHERE correlation_id = 'fine')`).Scan(&dead, &written))
				require.Zero(t, dead, "a transient error dead-letters nothing")
				require.Zero(t, written)
				return
			}
			require.NoError(t, err)
			require.Len(t, rows, 3)
			require.Equal(t, "ok", rows[0].Status)
			require.Equal(t, "dead_letter", rows[1].Status)
			require.Equal(t, c.code, *rows[1].SQLState)
			require.NotNil(t, rows[1].DeadLetterID)
			require.Equal(t, "ok", rows[2].Status)
		})
	}
}
