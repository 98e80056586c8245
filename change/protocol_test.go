package change_test

import (
	"net/url"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/silo-db/silo/change"
)

// The opening parameters of a session: where it resumes, what it subscribes to, its debounce.
func TestParseQuery(t *testing.T) {
	t.Parallel()
	five := int64(5)
	for _, tc := range []struct {
		query string
		want  change.SessionOptions
		err   string
	}{
		{query: "", want: change.SessionOptions{}},
		{query: "after=5", want: change.SessionOptions{After: &five}},
		{query: "after=0&after=9", want: change.SessionOptions{After: new(int64)}},
		{query: "after=-1", err: "after must be a change id"},
		{query: "after=x", err: "after must be a change id"},
		{query: "channel=a&channel=b*&channels=c,%20d,,e", want: change.SessionOptions{Channels: []string{"a", "b*", "c", "d", "e"}}},
		{query: "debounce_ms=200", want: change.SessionOptions{Debounce: 200 * time.Millisecond}},
		{query: "debounce_ms=60000", want: change.SessionOptions{Debounce: time.Minute}},
		{query: "debounce_ms=60001", err: "debounce_ms must be"},
		{query: "debounce_ms=-1", err: "debounce_ms must be"},
		{query: "debounce_ms=x", err: "debounce_ms must be"},
	} {
		q, err := url.ParseQuery(tc.query)
		require.NoError(t, err)
		got, err := change.ParseQuery(q)
		if tc.err != "" {
			require.ErrorContains(t, err, tc.err, tc.query)
			continue
		}
		require.NoError(t, err, tc.query)
		require.Equal(t, tc.want, got, tc.query)
	}
}
