package db_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/silo-db/silo/db"
	"github.com/silo-db/silo/db/dbtest"
)

// A step counts its updates by operation from a closed set, the 21 operations and invalid: the
// counts become metric labels, and a client sending made-up operations must not add any.
func TestProfileInboxProcessCountsOperationsFromAClosedSet(t *testing.T) {
	tx := dbtest.Tx(t)
	q := db.New(tx)
	ctx := context.Background()
	msgs := []string{`{"_id":"ops","_path":["a"],"_value":{"_v":"1"}}`, `{"_id":"ops","_operation":"_inc","_path":["c"],"_value":{"_v":"0|1|1"}}`}
	for i := range 50 {
		msgs = append(msgs, fmt.Sprintf(`{"_id":"ops","_operation":"_made_up_%d","_path":["a"],"_value":{"_v":"1"}}`, i))
	}
	msgs = append(msgs, `{"_id":"ops","_operation":42,"_path":["a"],"_value":{"_v":"1"}}`)
	_, err := q.ProfileEnqueue(ctx, db.ProfileEnqueueParams{Updates: []byte("[" + strings.Join(msgs, ",") + "]"), Priority: "high"})
	require.NoError(t, err)
	max := int32(1000)
	res, err := q.ProfileInboxProcess(ctx, db.ProfileInboxProcessParams{Priority: "high", MaxUpdates: &max})
	require.NoError(t, err)
	require.EqualValues(t, len(msgs), res.Taken)
	var ops map[string]int
	require.NoError(t, json.Unmarshal(res.Operations, &ops))
	require.Equal(t, map[string]int{"_set": 1, "_inc": 1, "invalid": 51}, ops)
}
