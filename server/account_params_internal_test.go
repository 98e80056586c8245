package server

import (
	"encoding/base64"
	"net/http"
	"net/url"
	"testing"

	"github.com/stretchr/testify/require"
)

// Pryv's clients send lists in every shape a query string has.
func TestAccountListParam(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		query string
		want  []string
	}{
		{"", nil},
		{"streams=a", []string{"a"}},
		{"streams=a&streams=b", []string{"a", "b"}},
		{"streams[]=a&streams[]=b", []string{"a", "b"}},
		{"streams[1]=b&streams[0]=a", []string{"a", "b"}},
		{`streams=["a","b"]`, []string{"a", "b"}},
		{"other=x&streamsx=y", nil},
	} {
		q, err := url.ParseQuery(tc.query)
		require.NoError(t, err)
		got, err := listParam(q, "streams")
		require.NoError(t, err, tc.query)
		require.Equal(t, tc.want, got, tc.query)
	}
	_, err := listParam(url.Values{"types": {`["a", 1]`}}, "types")
	require.ErrorContains(t, err, "JSON array of strings")
}

func TestAccountEventsParams(t *testing.T) {
	t.Parallel()
	p, err := accountEventsParams(url.Values{"fromTime": {"1.5"}, "limit": {"3"}, "includeSeries": {"TRUE"}, "state": {"all"}})
	require.NoError(t, err)
	require.Equal(t, 1.5, *p.FromTime)
	require.Equal(t, int32(3), *p.MaxEvents)
	require.True(t, p.IncludeSeries)
	require.Equal(t, "all", p.State)
	for _, bad := range []url.Values{{"fromTime": {"NaN"}}, {"toTime": {"Inf"}}, {"toTime": {"tomorrow"}},
		{"limit": {"1.5"}}, {"skip": {"-1"}}, {"sortAscending": {"yes"}}} {
		_, err := accountEventsParams(bad)
		require.Error(t, err, "%v", bad)
	}
}

func TestAccountToken(t *testing.T) {
	t.Parallel()
	req := func(auth, query string) *http.Request {
		r, err := http.NewRequest("GET", "http://h/alice/events?"+query, nil)
		require.NoError(t, err)
		if auth != "" {
			r.Header.Set("Authorization", auth)
		}
		return r
	}
	basic := "Basic " + base64.StdEncoding.EncodeToString([]byte("tok:"))
	for _, tc := range []struct{ auth, query, want string }{
		{"tok", "", "tok"},
		{"Bearer tok", "", "tok"},
		{"bearer  tok ", "", "tok"},
		{basic, "", "tok"},
		{"Basic " + base64.StdEncoding.EncodeToString([]byte("tok")), "", "tok"},
		{"", "auth=tok", "tok"},
		{"header", "auth=query", "header"}, // the header wins, as in Pryv
		{"Basic %%%", "auth=tok", ""},
		{"", "", ""},
	} {
		require.Equal(t, tc.want, accountToken(req(tc.auth, tc.query)), "%q %q", tc.auth, tc.query)
	}
}

// FuzzAccountEventsQuery: any query string is read or refused with a message, never a panic, and
// what is read is what was asked.
func FuzzAccountEventsQuery(f *testing.F) {
	for _, s := range []string{"", "streams[]=a&types=mass/*&fromTime=1.5&toTime=2&limit=3&skip=1&sortAscending=true&includeSeries=1&state=all",
		`types=["series:*"]`, "limit=-1", "fromTime=NaN", "streams[99999999999999999999]=x", "skip=1e3"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		q, err := url.ParseQuery(raw)
		if err != nil {
			return
		}
		p, err := accountEventsParams(q)
		if err != nil {
			require.NotEmpty(t, err.Error())
			return
		}
		require.GreaterOrEqual(t, p.Skip, int32(0))
		if p.MaxEvents != nil {
			require.GreaterOrEqual(t, *p.MaxEvents, int32(0))
		}
		require.NotEmpty(t, p.State)
	})
}
