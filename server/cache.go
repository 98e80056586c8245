package server

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/silo-db/silo/db"
)

// The API cache middleware (the seed's caching middleware; rules in sql/cache/01_store.sql):
// requests that match an endpoint of the loaded rules (api.cache_rules) are answered from the
// process's front cache, else from the shared store (cache.entries, api.cache_get), else by the
// handler, whose 200 answer is stored (api.cache_put). Invalidations notified on silo_cache drop
// the front entries of every process. Every answer it gives carries X-Silo-Cache (hit or miss), an
// ETag, and Cache-Control: private for session entries; If-None-Match with the ETag answers 304.
//
// The rule matching runs here, before any database call, so that a front hit costs none. A shared
// (not session) entry is still served only to a caller the server authenticates, and is keyed by
// the caller's readers: two callers who may read different grains never share an entry.

// CacheChannel is the channel api.cache_invalidate and api.cache_config_load notify.
const CacheChannel = "silo_cache"

// cacheHeader tells whether the cache answered.
const cacheHeader = "X-Silo-Cache"

type cacheSettings struct {
	Action    string `json:"action"`
	Session   *bool  `json:"session"`
	ExpiresMs *int64 `json:"expires_ms"`
	XX        *bool  `json:"xx"`
	NX        *bool  `json:"nx"`
}

type cacheRule struct {
	cacheSettings
	Rule   string                     `json:"rule"`
	Params map[string]json.RawMessage `json:"params"`
	// any: the parameters with *; values: the others' allowed values.
	any    map[string]bool
	values map[string][]string
}

type cacheEndpoint struct {
	method   string
	segments []string
	defaults cacheSettings
	rules    []cacheRule
}

type frontEntry struct {
	path, session string
	status        int
	contentType   string
	body          []byte
	etag          string
	expires       time.Time
}

// apiCache is the middleware's state in one process.
type apiCache struct {
	q        *db.Queries
	log      *slog.Logger
	listened bool // a LISTEN connection keeps the front cache coherent; without it, no front cache

	mu        sync.RWMutex
	endpoints []cacheEndpoint
	loadedAt  time.Time
	front     map[string]frontEntry
	epoch     uint64

	requests *prometheus.CounterVec
}

const (
	frontMax       = 10000
	rulesTTLPolled = time.Second // without a listener, rules are read again this often
	rulesTTLListen = time.Second // besides the notification of a new configuration
)

func newAPICache(q *db.Queries, log *slog.Logger, reg prometheus.Registerer) *apiCache {
	c := &apiCache{q: q, log: log, front: map[string]frontEntry{},
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "silo_cache_requests_total",
			Help: "Requests the API cache saw, by result: hit_front (this process's memory), hit_shared (cache.entries), miss (stored or not), bypass (no rule applies, or no token for a session rule), invalidate.",
		}, []string{"result"})}
	if reg != nil {
		_ = reg.Register(c.requests)
	}
	return c
}

// listen holds a LISTEN connection on CacheChannel until ctx ends, reconnecting with back-off;
// each (re)connection empties the front cache (what was notified meanwhile is unknown).
func (c *apiCache) listen(ctx context.Context, pool *pgxpool.Pool) {
	c.listened = true
	go func() {
		backoff := 100 * time.Millisecond
		for ctx.Err() == nil {
			err := c.listenOnce(ctx, pool)
			if ctx.Err() != nil {
				return
			}
			c.log.Warn("api cache: LISTEN connection lost, front cache off until it is back", "err", err)
			c.clear(true)
			select {
			case <-ctx.Done():
				return
			case <-time.After(backoff):
			}
			backoff = min(backoff*2, 10*time.Second)
		}
	}()
}

func (c *apiCache) listenOnce(ctx context.Context, pool *pgxpool.Pool) error {
	cc := pool.Config().ConnConfig.Copy()
	if cc.RuntimeParams == nil {
		cc.RuntimeParams = map[string]string{}
	}
	cc.RuntimeParams["application_name"] = "silo cache listener"
	conn, err := pgx.ConnectConfig(ctx, cc)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.Exec(ctx, "LISTEN "+CacheChannel); err != nil {
		return err
	}
	c.clear(true)
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			return err
		}
		var msg struct {
			Path    string `json:"path"`
			Session string `json:"session"`
			Config  *int   `json:"config"`
		}
		if json.Unmarshal([]byte(n.Payload), &msg) != nil {
			c.clear(true)
			continue
		}
		if msg.Config != nil {
			c.clear(true)
			continue
		}
		c.dropPath(msg.Path, msg.Session)
	}
}

// clear empties the front cache; rules: the rules are read again at the next request.
func (c *apiCache) clear(rules bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.front = map[string]frontEntry{}
	c.epoch++
	if rules {
		c.loadedAt = time.Time{}
	}
}

// dropPath drops the front entries of path and the paths under it (of session only, when given).
func (c *apiCache) dropPath(path, session string) {
	prefix := strings.TrimRight(path, "/") + "/"
	c.mu.Lock()
	defer c.mu.Unlock()
	c.epoch++
	for k, e := range c.front {
		if (e.path == path || strings.HasPrefix(e.path, prefix)) && (session == "" || e.session == session) {
			delete(c.front, k)
		}
	}
}

// rules returns the endpoints, read again when stale.
func (c *apiCache) rules(ctx context.Context) []cacheEndpoint {
	ttl := rulesTTLPolled
	if c.listened {
		ttl = rulesTTLListen
	}
	c.mu.RLock()
	eps, at := c.endpoints, c.loadedAt
	c.mu.RUnlock()
	if time.Since(at) < ttl {
		return eps
	}
	rows, err := c.q.CacheRules(ctx)
	if err != nil {
		return eps // keep what we had; the next request tries again
	}
	eps = make([]cacheEndpoint, 0, len(rows))
	for _, r := range rows {
		ep := cacheEndpoint{method: r.Method, segments: pathSegments(r.Path)}
		ep.defaults = cacheSettings{Action: textOf(r.Action), Session: r.Session, ExpiresMs: r.ExpiresMs, XX: r.Xx, NX: r.Nx}
		if json.Unmarshal(r.Rules, &ep.rules) != nil {
			continue
		}
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
		eps = append(eps, ep)
	}
	c.mu.Lock()
	c.endpoints, c.loadedAt = eps, time.Now()
	c.mu.Unlock()
	return eps
}

func pathSegments(p string) []string {
	p = strings.Trim(p, "/")
	if p == "" {
		return nil
	}
	return strings.Split(p, "/")
}

// match is the endpoint of method and path (nil when none).
func match(eps []cacheEndpoint, method, path string) *cacheEndpoint {
	segs := pathSegments(path)
	for i := range eps {
		ep := &eps[i]
		if ep.method != method || len(ep.segments) != len(segs) {
			continue
		}
		ok := true
		for k, s := range ep.segments {
			if !(strings.HasPrefix(s, "{") && strings.HasSuffix(s, "}") && segs[k] != "") && s != segs[k] {
				ok = false
				break
			}
		}
		if ok {
			return ep
		}
	}
	return nil
}

// settingsFor applies the seed's rules 1-4 to the query (access_token left out): the first rule
// the query agrees with (exactly its parameters, each value allowed), else the defaults when the
// query has no parameter or one that no rule names, else no caching (Action "").
func settingsFor(ep *cacheEndpoint, query url.Values) cacheSettings {
	if len(ep.rules) == 0 {
		return ep.defaults
	}
	named := map[string]bool{}
	for _, ru := range ep.rules {
		for p := range ru.Params {
			named[p] = true
		}
		if agrees(ru, query) {
			s := ep.defaults
			if ru.Action != "" {
				s.Action = ru.Action
			}
			if ru.Session != nil {
				s.Session = ru.Session
			}
			if ru.ExpiresMs != nil {
				s.ExpiresMs = ru.ExpiresMs
			}
			if ru.XX != nil {
				s.XX = ru.XX
			}
			if ru.NX != nil {
				s.NX = ru.NX
			}
			return s
		}
	}
	params := 0
	for p := range query {
		if p == "access_token" {
			continue
		}
		params++
		if !named[p] {
			return ep.defaults
		}
	}
	if params == 0 {
		return ep.defaults
	}
	return cacheSettings{}
}

func agrees(ru cacheRule, query url.Values) bool {
	n := 0
	for p, vs := range query {
		if p == "access_token" {
			continue
		}
		n++
		if ru.any[p] {
			continue
		}
		allowed, ok := ru.values[p]
		if !ok {
			return false
		}
		for _, v := range vs {
			if !slices.Contains(allowed, v) {
				return false
			}
		}
	}
	return n == len(ru.Params)
}

// cacheKey is the seed's rule 5: the method and path, then the query parameters sorted by name
// with their values sorted (access_token left out), then the entry's owner (a session's token
// hash, or the caller's readers).
func cacheKey(method, path string, query url.Values, owner string) string {
	names := make([]string, 0, len(query))
	for p := range query {
		if p != "access_token" {
			names = append(names, p)
		}
	}
	sort.Strings(names)
	var b strings.Builder
	b.WriteString(method)
	b.WriteByte(' ')
	b.WriteString(path)
	sep := byte('?')
	for _, p := range names {
		vs := slices.Clone(query[p])
		sort.Strings(vs)
		for _, v := range vs {
			b.WriteByte(sep)
			sep = '&'
			b.WriteString(url.QueryEscape(p))
			b.WriteByte('=')
			b.WriteString(url.QueryEscape(v))
		}
	}
	b.WriteString(" | ")
	b.WriteString(owner)
	return b.String()
}

// cacheWrap is the middleware around Silo's own routes; authenticate is the server's.
func cacheWrap(c *apiCache, authenticate func(context.Context, string) (db.TokenAuthenticateRow, error), next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		eps := c.rules(r.Context())
		if len(eps) == 0 {
			next.ServeHTTP(w, r)
			return
		}
		method := r.Method
		if method == http.MethodHead {
			method = http.MethodGet
		}
		ep := match(eps, method, r.URL.Path)
		if ep == nil {
			next.ServeHTTP(w, r)
			return
		}
		query := r.URL.Query()
		set := settingsFor(ep, query)
		token := bearerToken(r)
		if token == "" && query.Get("access_token") != "" {
			// The token of the URL, as the seed's API took it: the handler authenticates it too.
			token = query.Get("access_token")
			r.Header.Set("Authorization", "Bearer "+token)
		}
		switch {
		case set.Action == "invalidate":
			c.requests.WithLabelValues("invalidate").Inc()
			// The answer is held until the entries are gone, so that a client that reads right
			// after its own write never gets what the write replaced.
			rec := &captureWriter{ResponseWriter: w, status: http.StatusOK}
			next.ServeHTTP(rec, r)
			if rec.status/100 == 2 {
				if _, err := c.q.CacheInvalidate(context.WithoutCancel(r.Context()), db.CacheInvalidateParams{Path: r.URL.Path}); err == nil {
					c.dropPath(r.URL.Path, "")
				}
			}
			rec.flush(w, "")
			return
		case set.Action != "cache" || set.ExpiresMs == nil || (r.Method != http.MethodGet && r.Method != http.MethodHead):
			c.requests.WithLabelValues("bypass").Inc()
			next.ServeHTTP(w, r)
			return
		}
		session := set.Session != nil && *set.Session
		if session && token == "" {
			c.requests.WithLabelValues("bypass").Inc()
			next.ServeHTTP(w, r)
			return
		}
		id, err := authenticate(r.Context(), token)
		if err != nil {
			c.requests.WithLabelValues("bypass").Inc()
			next.ServeHTTP(w, r) // the handler answers the refusal
			return
		}
		owner, sessionHash := "", ""
		if session {
			sum := sha256.Sum256([]byte(token))
			sessionHash = hex.EncodeToString(sum[:])
			owner = "s:" + sessionHash
		} else {
			readers := slices.Clone(id.Readers)
			sort.Strings(readers)
			owner = "r:" + strings.Join(readers, ",")
		}
		key := cacheKey(method, r.URL.Path, query, owner)
		since := time.Now()

		c.mu.RLock()
		fe, ok := c.front[key]
		epoch := c.epoch
		c.mu.RUnlock()
		if ok && time.Now().Before(fe.expires) {
			c.requests.WithLabelValues("hit_front").Inc()
			serveEntry(w, r, fe, session, "hit")
			return
		}
		rows, err := c.q.CacheGet(r.Context(), key)
		if err == nil && len(rows) == 1 {
			e := rows[0]
			fe = frontEntry{path: e.Path, session: e.Session, status: int(e.Status), contentType: e.ContentType, body: e.Body,
				etag: e.Etag, expires: e.ExpiresAt}
			c.remember(key, fe, epoch)
			c.requests.WithLabelValues("hit_shared").Inc()
			serveEntry(w, r, fe, session, "hit")
			return
		}
		c.requests.WithLabelValues("miss").Inc()
		rec := &captureWriter{ResponseWriter: w, status: http.StatusOK}
		next.ServeHTTP(rec, r)
		if rec.status != http.StatusOK {
			rec.flush(w, "")
			return
		}
		sum := sha256.Sum256(rec.buf.Bytes())
		fe = frontEntry{path: r.URL.Path, session: sessionHash, status: rec.status,
			contentType: rec.Header().Get("Content-Type"), body: rec.buf.Bytes(),
			etag:    `"` + hex.EncodeToString(sum[:16]) + `"`,
			expires: time.Now().Add(time.Duration(*set.ExpiresMs) * time.Millisecond)}
		stored, err := c.q.CachePut(context.WithoutCancel(r.Context()), db.CachePutParams{Key: key, Path: fe.path, Session: sessionHash,
			Status: int32(fe.status), ContentType: fe.contentType, Body: fe.body, Etag: fe.etag, ExpiresMs: *set.ExpiresMs,
			Since: since, Xx: set.XX != nil && *set.XX, Nx: set.NX != nil && *set.NX})
		if err == nil && stored {
			c.remember(key, fe, epoch)
		}
		w.Header().Set("ETag", fe.etag)
		if session {
			w.Header().Set("Cache-Control", "private")
		}
		rec.flush(w, "miss")
	})
}

// remember puts an entry in the front cache, unless an invalidation came since epoch was read
// (the entry may be older than it) or there is no listener to keep it coherent.
func (c *apiCache) remember(key string, fe frontEntry, epoch uint64) {
	if !c.listened {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.epoch != epoch {
		return
	}
	if len(c.front) >= frontMax {
		for k := range c.front { // drop one entry at random
			delete(c.front, k)
			break
		}
	}
	c.front[key] = fe
}

func serveEntry(w http.ResponseWriter, r *http.Request, fe frontEntry, session bool, result string) {
	h := w.Header()
	h.Set(cacheHeader, result)
	h.Set("ETag", fe.etag)
	if session {
		h.Set("Cache-Control", "private")
	}
	if inm := r.Header.Get("If-None-Match"); inm != "" && etagMatches(inm, fe.etag) {
		w.WriteHeader(http.StatusNotModified)
		return
	}
	if fe.contentType != "" {
		h.Set("Content-Type", fe.contentType)
	}
	w.WriteHeader(fe.status)
	if r.Method != http.MethodHead {
		_, _ = w.Write(fe.body)
	}
}

func etagMatches(header, etag string) bool {
	for _, t := range strings.Split(header, ",") {
		t = strings.TrimSpace(t)
		if t == "*" || strings.TrimPrefix(t, "W/") == etag {
			return true
		}
	}
	return false
}

// captureWriter holds a handler's answer and its status until flush writes them.
type captureWriter struct {
	http.ResponseWriter
	status int
	buf    bytes.Buffer
	wrote  bool
}

func (c *captureWriter) WriteHeader(status int) {
	if c.wrote {
		return
	}
	c.wrote = true
	c.status = status
}

func (c *captureWriter) Write(b []byte) (int, error) {
	if !c.wrote {
		c.WriteHeader(http.StatusOK)
	}
	return c.buf.Write(b)
}

// flush writes the held answer; result, when set, is the X-Silo-Cache header.
func (c *captureWriter) flush(w http.ResponseWriter, result string) {
	if result != "" {
		w.Header().Set(cacheHeader, result)
	}
	w.WriteHeader(c.status)
	_, _ = w.Write(c.buf.Bytes())
}

func textOf(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}
