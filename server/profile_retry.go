package server

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/silo-db/silo/db"
)

// applyBatch calls api.profile_apply_batch with the caller's readers (the results say nothing of
// grains they may not read), retrying when PostgreSQL aborted the transaction for a deadlock or a
// serialization failure: two concurrent batches that touch the same grains in different orders
// can deadlock, and the rolled-back call is safe to repeat.
func applyBatch(ctx context.Context, q *db.Queries, body json.RawMessage, readers []string) ([]db.ProfileApplyBatchRow, error) {
	arg := db.ProfileApplyBatchParams{Updates: body, Readers: readers}
	for attempt := 0; ; attempt++ {
		rows, err := q.ProfileApplyBatch(ctx, arg)
		var pgErr *pgconn.PgError
		if err == nil || attempt == 5 || !errors.As(err, &pgErr) || (pgErr.Code != "40P01" && pgErr.Code != "40001") {
			return rows, err
		}
		select {
		case <-time.After(time.Duration(1+attempt*attempt) * 5 * time.Millisecond):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}
