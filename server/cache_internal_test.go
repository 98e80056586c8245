package server

// The API cache's rules (the seed's rules 1-5) and keys, without a database: which settings a
// request takes, and the key it is stored under.

import (
	"encoding/json"
	"net/url"
	"testing"

	"github.com/stretchr/testify/require"
)

func ptr[T any](v T) *T { return &v }

func endpointWith(t *testing.T, rules string) *cacheEndpoint {
	t.Helper()
	ep := &cacheEndpoint{method: "GET", segments: pathSegments("/posts"),
		defaults: cacheSettings{Action: "cache", Session: ptr(false), ExpiresMs: ptr(int64(1000))}}
	require.NoError(t, json.Unmarshal([]byte(rules), &ep.rules))
	for i := range ep.rules {
		ru := &ep.rules[i]
		ru.any, ru.values = map[string]bool{}, map[string][]string{}
		for name, v := range ru.Params {
			var vs []string
			if json.Unmarshal(v, &vs) == nil {
				ru.values[name] = vs
			} else {
				ru.any[name] = true
			}
		}
	}
	return ep
}

func TestCacheRuleSettings(t *testing.T) {
	// type:Group&id:* (session, 5 s) and type:User,Team&id:* (not cached: action invalidate).
	ep := endpointWith(t, `[
		{"rule": "type:Group&id:*", "params": {"type": ["Group"], "id": "*"}, "session": true, "expires_ms": 5000},
		{"rule": "type:Team,User&id:*", "params": {"type": ["Team", "User"], "id": "*"}, "action": "invalidate"}]`)
	check := func(query, action string, session bool, expires int64) {
		t.Helper()
		q, err := url.ParseQuery(query)
		require.NoError(t, err)
		s := settingsFor(ep, q)
		require.Equal(t, action, s.Action, query)
		if action == "" {
			return
		}
		require.Equal(t, session, s.Session != nil && *s.Session, query)
		require.Equal(t, expires, *s.ExpiresMs, query)
	}
	check("type=Group&id=7", "cache", true, 5000)
	check("id=7&type=Group&access_token=x", "cache", true, 5000)
	check("type=User&id=7", "invalidate", false, 1000)
	check("type=Other&id=7", "", false, 0)
	check("type=Group", "", false, 0)
	check("type=Group&id=7&filter_by=x", "cache", false, 1000)
	check("", "cache", false, 1000)                  // no parameter: the defaults
	check("access_token=x", "cache", false, 1000)    // access_token is no parameter of the rules
	check("type=Group&type=User&id=1", "", false, 0) // every value must be allowed by one rule

	// No rules: the defaults (rule 2).
	check2 := settingsFor(endpointWith(t, `[]`), url.Values{"anything": {"1"}})
	require.Equal(t, "cache", check2.Action)
}

func TestCacheKeyIsSorted(t *testing.T) {
	// Rule 5: the url with its parameters, and each parameter's values, in alphabetical order;
	// access_token left out; the owner last.
	a, _ := url.ParseQuery("type=Group&id=7&tag=b&tag=a&access_token=secret")
	b, _ := url.ParseQuery("tag=a&id=7&tag=b&type=Group")
	require.Equal(t, "GET /posts?id=7&tag=a&tag=b&type=Group | s:x", cacheKey("GET", "/posts", a, "s:x"))
	require.Equal(t, cacheKey("GET", "/posts", a, "s:x"), cacheKey("GET", "/posts", b, "s:x"))
	require.NotEqual(t, cacheKey("GET", "/posts", a, "s:x"), cacheKey("GET", "/posts", a, "s:y"))
	c, _ := url.ParseQuery("q=a%26b")
	require.Equal(t, "GET /posts?q=a%26b | r:", cacheKey("GET", "/posts", c, "r:"))
}

func TestCacheEndpointMatch(t *testing.T) {
	eps := []cacheEndpoint{{method: "GET", segments: pathSegments("/profiles/{profileType}/{correlationId}/")}}
	require.NotNil(t, match(eps, "GET", "/profiles/customer/42"))
	require.NotNil(t, match(eps, "GET", "/profiles/customer/42/"))
	require.Nil(t, match(eps, "POST", "/profiles/customer/42"))
	require.Nil(t, match(eps, "GET", "/profiles/customer"))
	require.Nil(t, match(eps, "GET", "/profiles/customer/42/grain/a"))
	require.True(t, etagMatches(`W/"abc", "def"`, `"abc"`))
	require.False(t, etagMatches(`"abd"`, `"abc"`))
}

// FuzzCacheKey: any query gives a key, the same whatever the order of its parameters, and rule
// matching never panics.
func FuzzCacheKey(f *testing.F) {
	f.Add("type=Group&id=7&access_token=x")
	f.Add("a=%zz&&=&b")
	f.Fuzz(func(t *testing.T, raw string) {
		q, err := url.ParseQuery(raw)
		if err != nil {
			return
		}
		k := cacheKey("GET", "/posts", q, "r:")
		rev := url.Values{}
		names := make([]string, 0, len(q))
		for n := range q {
			names = append(names, n)
		}
		for i := len(names) - 1; i >= 0; i-- {
			vs := q[names[i]]
			for j := len(vs) - 1; j >= 0; j-- {
				rev.Add(names[i], vs[j])
			}
		}
		require.Equal(t, k, cacheKey("GET", "/posts", rev, "r:"))
		_ = settingsFor(endpointWith(t, `[{"rule": "type:Group&id:*", "params": {"type": ["Group"], "id": "*"}}]`), q)
	})
}
