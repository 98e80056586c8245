package change

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"
)

// The channel and visibility rules of live changes, which mirror api.changes_since.
func TestMatchesAndVisible(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		pattern, channel string
		want             bool
	}{
		{"profile:customer:42", "profile:customer:42", true},
		{"profile:customer:42", "profile:customer:420", false},
		{"profile:customer:*", "profile:customer:42", true},
		{"profile:*", "profile:customer:42", true},
		{"*", "dead-letters", true},
		{"profile:contract:*", "profile:customer:42", false},
	} {
		require.Equal(t, tc.want, matches(tc.pattern, tc.channel), "%s %s", tc.pattern, tc.channel)
	}
	readers := map[string]struct{}{"_all": {}, "_auth": {}, "roleA": {}}
	require.True(t, visible([]string{"roleB", "roleA"}, readers, false))
	require.False(t, visible([]string{"roleB"}, readers, false))
	require.False(t, visible(nil, readers, false), "a change without readers is for admins only")
	require.True(t, visible(nil, nil, true))
}

// Coalescing two payloads keeps the later one with the union of the paths.
func TestMergePayload(t *testing.T) {
	t.Parallel()
	got := mergePayload(json.RawMessage(`{"paths":["/b","/a"],"n":1}`), json.RawMessage(`{"paths":["/c","/a"],"n":2}`))
	require.JSONEq(t, `{"paths":["/a","/b","/c"],"n":2}`, string(got))
	// Without paths on both sides, the later payload as it is.
	require.Equal(t, `{"n":2}`, string(mergePayload(json.RawMessage(`{"paths":["/a"]}`), json.RawMessage(`{"n":2}`))))
	require.Equal(t, `[1]`, string(mergePayload(json.RawMessage(`{}`), json.RawMessage(`[1]`))))
}
