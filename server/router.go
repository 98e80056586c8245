package server

import (
	"net/http"
	"strings"
)

// router serves two muxes: Silo's own routes, and the account routes under /{username}/ (Pryv's
// API). They cannot share one ServeMux: a pattern /{username}/events and a Silo route
// /events/{correlationId} both match /events/events and neither is more specific, so the mux
// refuses to register the second (a test shows it). A request goes to Silo's own routes when one
// matches it; otherwise to the account routes when its first segment is no first segment of Silo's
// own routes and a slash follows it. Usernames never equal such a segment
// (account.reserved_usernames, kept in step with this table by a test), so no user's path is
// ever taken by a Silo route, nor the reverse.
type router struct {
	main       *http.ServeMux
	accounts   *http.ServeMux
	top        map[string]bool // the first path segments of main's patterns
	instrument func(route string, h http.HandlerFunc) http.Handler
	missMain   http.Handler
	missAcct   http.Handler
	// ownRoutes serves the requests of Silo's own routes: main, or the API cache around it.
	ownRoutes http.Handler
}

func newRouter(instrument func(string, http.HandlerFunc) http.Handler) *router {
	rt := &router{main: http.NewServeMux(), accounts: http.NewServeMux(), top: map[string]bool{}, instrument: instrument}
	// No catch-all route: one would match every request and hide the mux's own answer for a path
	// that exists for other methods only (405 with Allow). A request no route serves gets the mux's
	// answer (404, 405, or a redirect to the cleaned path) with the JSON error body.
	rt.missMain = instrument("unmatched", func(w http.ResponseWriter, r *http.Request) {
		rt.main.ServeHTTP(&jsonMiss{ResponseWriter: w, r: r}, r)
	})
	rt.missAcct = instrument("unmatched", func(w http.ResponseWriter, r *http.Request) {
		rt.accounts.ServeHTTP(&jsonMiss{ResponseWriter: w, r: r}, r)
	})
	return rt
}

// patternSegment is the first path segment of a ServeMux pattern ("GET /profiles/{x}" →
// profiles).
func patternSegment(pattern string) string {
	_, path, ok := strings.Cut(pattern, "/")
	if !ok {
		return ""
	}
	seg, _, _ := strings.Cut(path, "/")
	return seg
}

// handle registers one of Silo's own routes. Its first segment must be a literal: that is what
// keeps Silo's routes and the users' apart.
func (rt *router) handle(pattern string, h http.Handler) {
	seg := patternSegment(pattern)
	if seg == "" || strings.ContainsAny(seg, "{}") {
		panic("a route of Silo's own must begin with a literal segment: " + pattern)
	}
	rt.top[seg] = true
	rt.main.Handle(pattern, h)
}

// account registers a route under /{username}/.
func (rt *router) account(pattern string, h http.Handler) {
	if i := strings.Index(pattern, "/"); i < 0 || !strings.HasPrefix(pattern[i:], "/{username}/") {
		panic("an account route begins with /{username}/: " + pattern)
	}
	rt.accounts.Handle(pattern, h)
}

// topLevel is the first path segments of Silo's own routes: no user may be named so.
func (rt *router) topLevel() []string {
	out := make([]string, 0, len(rt.top))
	for seg := range rt.top {
		out = append(out, seg)
	}
	return out
}

// accountPath tells whether path belongs to the account routes: /{first}/ and what follows,
// first not a first segment of Silo's own routes.
func (rt *router) accountPath(path string) bool {
	first, _, ok := strings.Cut(strings.TrimPrefix(path, "/"), "/")
	return ok && first != "" && !rt.top[first]
}

func (rt *router) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if _, pattern := rt.main.Handler(r); pattern != "" {
		if rt.ownRoutes != nil {
			rt.ownRoutes.ServeHTTP(w, r)
			return
		}
		rt.main.ServeHTTP(w, r)
		return
	}
	if !rt.accountPath(r.URL.Path) {
		rt.missMain.ServeHTTP(w, r)
		return
	}
	mw := &metaWriter{ResponseWriter: w}
	defer mw.finish()
	accountCORS(mw.Header(), r)
	if r.Method == http.MethodOptions {
		mw.WriteHeader(http.StatusOK) // a browser's preflight, answered as Pryv answers it
		return
	}
	if _, pattern := rt.accounts.Handler(r); pattern != "" {
		rt.accounts.ServeHTTP(mw, r)
		return
	}
	rt.missAcct.ServeHTTP(mw, r)
}

// jsonMiss writes the mux's 404 and 405 as Silo's JSON errors (the 405 keeps the mux's Allow
// header) and passes anything else through.
type jsonMiss struct {
	http.ResponseWriter
	r       *http.Request
	written bool // the JSON error is written: the mux's plain text body is dropped
}

func (w *jsonMiss) WriteHeader(code int) {
	switch code {
	case http.StatusNotFound:
		w.written = true
		writeError(w.ResponseWriter, code, "unknown-resource", "no route for "+w.r.Method+" "+w.r.URL.Path, nil)
	case http.StatusMethodNotAllowed:
		w.written = true
		allow := w.Header().Get("Allow")
		writeError(w.ResponseWriter, code, "method-not-allowed",
			w.r.URL.Path+" does not answer "+w.r.Method+": allowed are "+allow,
			map[string]any{"allow": strings.Split(allow, ", ")})
	default:
		w.ResponseWriter.WriteHeader(code)
	}
}

func (w *jsonMiss) Write(b []byte) (int, error) {
	if w.written {
		return len(b), nil
	}
	return w.ResponseWriter.Write(b)
}
