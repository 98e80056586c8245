package db_test

import (
	"encoding/json"
	"os"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/silo-db/silo/db"
)

func TestConfigJSON(t *testing.T) {
	out, err := db.ConfigJSON([]byte("a: True\nb: [1, 'x', {c: null}]\n3: three\n"))
	require.NoError(t, err)
	require.JSONEq(t, `{"a": true, "b": [1, "x", {"c": null}], "3": "three"}`, string(out))
	for _, bad := range []string{"", "- a\n- b\n", "a: 'unterminated\n", "just text"} {
		_, err := db.ConfigJSON([]byte(bad))
		require.Error(t, err, bad)
	}
}

// FuzzConfigJSON: any input gives an error or a JSON object, never a panic.
func FuzzConfigJSON(f *testing.F) {
	seed, err := os.ReadFile("testdata/job_seed_config.yaml")
	require.NoError(f, err)
	f.Add(seed)
	f.Add([]byte(`{"GET/posts/": {"defaults": {"action": "cache"}}}`))
	f.Add([]byte("a: &x [1]\nb: *x\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		out, err := db.ConfigJSON(data)
		if err != nil {
			return
		}
		var m map[string]any
		require.NoError(t, json.Unmarshal(out, &m))
	})
}
