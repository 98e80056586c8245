package db_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/silo-db/silo/db"
	"github.com/silo-db/silo/db/dbtest"
)

// Concurrent writers of an existing grain lose no update: the operations that build on the current
// value (_array_append, _array_put, their history forms, _inc) lock it, or read it inside their
// upsert. Each writer commits every update on its own, on its own connection, interleaved with the
// others. (Two writers that create the same grain at the same moment are another matter: the
// later one finds a row it did not read; see the header of sql/profile/01_types.sql.)
func TestProfileConcurrentWritersOfOneGrain(t *testing.T) {
	t.Parallel()
	pool := dbtest.Pool(t)
	ctx := context.Background()
	q := db.New(pool)
	const writers, each = 4, 25
	apply := func(op, path, v string) error {
		rows, err := q.ProfileApplyBatch(ctx, db.ProfileApplyBatchParams{Updates: json.RawMessage(fmt.Sprintf(
			`[{"_operation":%q,"_id":"c","_path":[%q],"_value":{"_v":%s}}]`, op, path, v))})
		if err == nil && rows[0].Status != "ok" {
			err = fmt.Errorf("%s: %s %v", op, rows[0].Status, rows[0].Reason)
		}
		return err
	}
	for _, step := range [][2]string{{"appended", "_array_append"}, {"put", "_array_put"}, {"appended_h", "_array_append"}} {
		require.NoError(t, apply(step[1], step[0], `["first"]`))
	}
	require.NoError(t, apply("_inc", "counter", `"0|1|0"`))
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				tag := fmt.Sprintf(`"w%d-%d"`, w, i)
				for _, step := range [][3]string{
					{"_array_append", "appended", "[" + tag + "]"},
					{"_array_put", "put", "[" + tag + "]"},
					{"_array_append_with_history", "appended_h", "[" + tag + "]"},
					{"_inc", "counter", `"0|1|1"`},
				} {
					if err := apply(step[0], step[1], step[2]); err != nil {
						errs <- err
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	var appended, put, appendedH int
	var counter string
	require.NoError(t, pool.QueryRow(ctx, `
		SELECT max(jsonb_array_length(value)) FILTER (WHERE path = '/appended'),
		       max(jsonb_array_length(value)) FILTER (WHERE path = '/put'),
		       max(jsonb_array_length(value)) FILTER (WHERE path = '/appended_h' AND pit = '_latest'),
		       max(value ->> '_current') FILTER (WHERE path = '/counter')
		FROM profile.profilestore WHERE correlation_id = 'c'`).Scan(&appended, &put, &appendedH, &counter))
	require.Equal(t, []any{writers*each + 1, writers*each + 1, writers*each + 1, fmt.Sprint(writers * each)},
		[]any{appended, put, appendedH, counter})
}
