package db_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/silo-db/silo/db"
	"github.com/silo-db/silo/db/dbtest"
)

// The profile store's example profile ("_id": "0815"), built by a sequence of profile updates and
// read back as a document. History pits are named after the archived value's insertion time
// (_YYYYMMDDTHHMISS.mmmZ) where the example shows dates, and _in is epoch milliseconds.
func TestProfileSeedExampleFromUpdates(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	q := db.New(dbtest.Tx(t))
	rows, err := q.ProfileApplyBatch(ctx, db.ProfileApplyBatchParams{Updates: json.RawMessage(`[
	  {"_id":"0815","_path":["a1"],"_value":{"_v":"abc","_c":0.4,"_in":123,"_reader":"_all"}},
	  {"_id":"0815","_path":["a2","b1"],"_operation":"_set_with_history","_value":{"_v":"21","_c":0.1,"_in":"2018-09-21","_reader":"_all"}},
	  {"_id":"0815","_path":["a2","b1"],"_operation":"_set_with_history","_value":{"_v":"22","_c":0.2,"_in":"2018-09-22","_reader":"_all"}},
	  {"_id":"0815","_path":["a2","b1"],"_operation":"_set_with_history","_value":{"_v":"23","_c":0.3,"_in":"2018-09-23","_reader":"_all"}},
	  {"_id":"0815","_path":["a2","b2"],"_value":{"_v":"123456","_c":0.4,"_in":"2018-09-20","_reader":"_all"}},
	  {"_id":"0815","_path":["a3","b3","c3","d3","e3"],"_value":{"_v":"123456","_c":0.5,"_in":"2018-09-20","_reader":"_all"}}
	]`)})
	require.NoError(t, err)
	require.Len(t, rows, 6)
	for _, r := range rows {
		require.Equal(t, "ok", r.Status)
	}
	got, err := q.ProfileGet(ctx, db.ProfileGetParams{ProfileType: "_d", CorrelationID: "0815", WithHistory: true, Readers: []string{"_all"}})
	require.NoError(t, err)
	require.JSONEq(t, `{
	  "_id": "0815",
	  "a1": {"_latest": {"_v": "abc", "_c": 0.4, "_in": 123, "_ttl": "P100Y", "_ttn": "P100Y", "_origin": null, "_reader": "_all"}},
	  "a2": {
	    "b1": {
	      "_20180921T000000.000Z": {"_v": "21", "_c": 0.1, "_in": 1537488000000, "_ttl": "P100Y", "_ttn": "P100Y", "_origin": null, "_reader": "_all"},
	      "_20180922T000000.000Z": {"_v": "22", "_c": 0.2, "_in": 1537574400000, "_ttl": "P100Y", "_ttn": "P100Y", "_origin": null, "_reader": "_all"},
	      "_latest": {"_v": "23", "_c": 0.3, "_in": 1537660800000, "_ttl": "P100Y", "_ttn": "P100Y", "_origin": null, "_reader": "_all"}
	    },
	    "b2": {"_latest": {"_v": "123456", "_c": 0.4, "_in": 1537401600000, "_ttl": "P100Y", "_ttn": "P100Y", "_origin": null, "_reader": "_all"}}
	  },
	  "a3": {"b3": {"c3": {"d3": {"e3": {"_latest": {"_v": "123456", "_c": 0.5, "_in": 1537401600000, "_ttl": "P100Y", "_ttn": "P100Y", "_origin": null, "_reader": "_all"}}}}}}
	}`, string(got.JSONPayload))
}
