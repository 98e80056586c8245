package server

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"net/url"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"github.com/silo-db/silo/db"
)

// Accounts in Pryv's model: the routes /{username}/accesses, /{username}/streams and
// /{username}/events, with Pryv's token forms, bodies, errors and meta. Each handler authenticates
// (api.account_authenticate: the access id), then makes one call of an api.account_* function,
// whose answer is Pryv's body; accountMeta adds meta to every answer, errors included.

// AccountAPIVersion is the version of Pryv's API that the account routes follow: meta.apiVersion
// and the API-Version header of every answer.
const AccountAPIVersion = "1.9.0"

// accountSerial is meta.serial: Pryv's serial of the service information, which clients compare
// to know when to reload it. Silo's does not change.
const accountSerial = "1"

// accountToken is the request's access token, in Pryv's order: the Authorization header (a bare
// token, or Bearer), the user part of basic auth (http://{token}@host/...), then ?auth=.
func accountToken(r *http.Request) string {
	if h := strings.TrimSpace(r.Header.Get("Authorization")); h != "" {
		switch {
		case len(h) > 6 && strings.EqualFold(h[:6], "basic "):
			raw, err := base64.StdEncoding.DecodeString(strings.TrimSpace(h[6:]))
			if err != nil {
				return ""
			}
			user, _, _ := strings.Cut(string(raw), ":")
			return user
		case len(h) > 7 && strings.EqualFold(h[:7], "bearer "):
			return strings.TrimSpace(h[7:])
		}
		return h
	}
	return r.URL.Query().Get("auth")
}

// accountAccess authenticates the request to /{username}/...: the access id that every operation
// takes. On failure it answers and returns false.
func (s *server) accountAccess(w http.ResponseWriter, r *http.Request) (string, bool) {
	var tok *string
	if t := accountToken(r); t != "" {
		tok = &t
	}
	row, err := s.q.AccountAuthenticate(r.Context(), db.AccountAuthenticateParams{Username: r.PathValue("username"), Token: tok})
	if err != nil {
		s.fail(w, r, err)
		return "", false
	}
	return row.AccessID, true
}

// accountAnswer writes the body an api.account_* function returned, or the error it raised.
func (s *server) accountAnswer(w http.ResponseWriter, r *http.Request, status int, body json.RawMessage, err error) {
	if err != nil {
		s.fail(w, r, err)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

func (s *server) accountAccessCreate(w http.ResponseWriter, r *http.Request) {
	id, ok := s.accountAccess(w, r)
	if !ok {
		return
	}
	body, ok := s.readBody(w, r)
	if !ok {
		return
	}
	out, err := s.q.AccountAccessCreate(r.Context(), db.AccountAccessCreateParams{AccessID: id, Access: body})
	s.accountAnswer(w, r, http.StatusCreated, out, err)
}

func (s *server) accountAccessesGet(w http.ResponseWriter, r *http.Request) {
	id, ok := s.accountAccess(w, r)
	if !ok {
		return
	}
	out, err := s.q.AccountAccessesGet(r.Context(), id)
	s.accountAnswer(w, r, http.StatusOK, out, err)
}

// accountAccessInfo answers what the request's access is, with the user's name: what Pryv's
// clients ask first of an API endpoint.
func (s *server) accountAccessInfo(w http.ResponseWriter, r *http.Request) {
	id, ok := s.accountAccess(w, r)
	if !ok {
		return
	}
	out, err := s.q.AccountAccessInfo(r.Context(), id)
	s.accountAnswer(w, r, http.StatusOK, out, err)
}

func (s *server) accountStreamCreate(w http.ResponseWriter, r *http.Request) {
	id, ok := s.accountAccess(w, r)
	if !ok {
		return
	}
	body, ok := s.readBody(w, r)
	if !ok {
		return
	}
	out, err := s.q.AccountStreamCreate(r.Context(), db.AccountStreamCreateParams{AccessID: id, Stream: body})
	s.accountAnswer(w, r, http.StatusCreated, out, err)
}

func (s *server) accountStreamsGet(w http.ResponseWriter, r *http.Request) {
	id, ok := s.accountAccess(w, r)
	if !ok {
		return
	}
	q := r.URL.Query()
	p := db.AccountStreamsGetParams{AccessID: id, State: "default"}
	if v := q.Get("parentId"); v != "" {
		p.ParentID = &v
	}
	if v := q.Get("state"); v != "" {
		p.State = v
	}
	out, err := s.q.AccountStreamsGet(r.Context(), p)
	s.accountAnswer(w, r, http.StatusOK, out, err)
}

func (s *server) accountEventCreate(w http.ResponseWriter, r *http.Request) {
	id, ok := s.accountAccess(w, r)
	if !ok {
		return
	}
	body, ok := s.readBody(w, r)
	if !ok {
		return
	}
	out, err := s.q.AccountEventCreate(r.Context(), db.AccountEventCreateParams{AccessID: id, Event: body})
	s.accountAnswer(w, r, http.StatusCreated, out, err)
}

func (s *server) accountEventGet(w http.ResponseWriter, r *http.Request) {
	id, ok := s.accountAccess(w, r)
	if !ok {
		return
	}
	out, err := s.q.AccountEventGet(r.Context(), db.AccountEventGetParams{AccessID: id, ID: r.PathValue("id")})
	s.accountAnswer(w, r, http.StatusOK, out, err)
}

func (s *server) accountEventUpdate(w http.ResponseWriter, r *http.Request) {
	id, ok := s.accountAccess(w, r)
	if !ok {
		return
	}
	body, ok := s.readBody(w, r)
	if !ok {
		return
	}
	out, err := s.q.AccountEventUpdate(r.Context(), db.AccountEventUpdateParams{AccessID: id, ID: r.PathValue("id"), Update: body})
	s.accountAnswer(w, r, http.StatusOK, out, err)
}

func (s *server) accountEventDelete(w http.ResponseWriter, r *http.Request) {
	id, ok := s.accountAccess(w, r)
	if !ok {
		return
	}
	out, err := s.q.AccountEventDelete(r.Context(), db.AccountEventDeleteParams{AccessID: id, ID: r.PathValue("id")})
	s.accountAnswer(w, r, http.StatusOK, out, err)
}

func (s *server) accountEventsGet(w http.ResponseWriter, r *http.Request) {
	id, ok := s.accountAccess(w, r)
	if !ok {
		return
	}
	p, err := accountEventsParams(r.URL.Query())
	if err != nil {
		badParam(w, err)
		return
	}
	p.AccessID = id
	out, err := s.q.AccountEventsGet(r.Context(), p)
	s.accountAnswer(w, r, http.StatusOK, out, err)
}

// accountEventsParams reads the query of GET /{username}/events: Pryv's names, arrays as
// name=a&name=b, name[]=a, name[0]=a or a JSON array, booleans true or false.
func accountEventsParams(q url.Values) (db.AccountEventsGetParams, error) {
	p := db.AccountEventsGetParams{State: "default"}
	var err error
	if p.Streams, err = listParam(q, "streams"); err != nil {
		return p, err
	}
	if p.Types, err = listParam(q, "types"); err != nil {
		return p, err
	}
	if p.FromTime, err = floatParam(q, "fromTime"); err != nil {
		return p, err
	}
	if p.ToTime, err = floatParam(q, "toTime"); err != nil {
		return p, err
	}
	if v := q.Get("limit"); v != "" {
		n, err := intParam(q, "limit", 0, 0, 1<<31-1)
		if err != nil {
			return p, err
		}
		m := int32(n)
		p.MaxEvents = &m
	}
	skip, err := intParam(q, "skip", 0, 0, 1<<31-1)
	if err != nil {
		return p, err
	}
	p.Skip = int32(skip)
	if p.SortAscending, err = boolParam(q, "sortAscending", false); err != nil {
		return p, err
	}
	if p.IncludeSeries, err = boolParam(q, "includeSeries", false); err != nil {
		return p, err
	}
	if v := q.Get("state"); v != "" {
		p.State = v
	}
	return p, nil
}

var indexedParam = regexp.MustCompile(`^(\w+)\[(\d*)\]$`)

// listParam collects a list parameter of the query: repeated name=..., name[]=..., name[N]=...
// (in index order), or one value that is a JSON array of strings. nil when absent.
func listParam(q url.Values, name string) ([]string, error) {
	type item struct {
		index int
		value string
	}
	var items []item
	for key, values := range q {
		idx := -1
		if key != name {
			m := indexedParam.FindStringSubmatch(key)
			if m == nil || m[1] != name {
				continue
			}
			if m[2] != "" {
				idx, _ = strconv.Atoi(m[2])
			}
		}
		for _, v := range values {
			items = append(items, item{idx, v})
		}
	}
	if len(items) == 0 {
		return nil, nil
	}
	sort.SliceStable(items, func(i, j int) bool { return items[i].index < items[j].index })
	if len(items) == 1 && strings.HasPrefix(strings.TrimSpace(items[0].value), "[") {
		var list []string
		if err := json.Unmarshal([]byte(items[0].value), &list); err != nil {
			return nil, fmt.Errorf("query parameter %s must be a JSON array of strings, not %q", name, items[0].value)
		}
		return list, nil
	}
	out := make([]string, len(items))
	for i, it := range items {
		out[i] = it.value
	}
	return out, nil
}

func floatParam(q url.Values, name string) (*float64, error) {
	v := q.Get(name)
	if v == "" {
		return nil, nil
	}
	f, err := strconv.ParseFloat(v, 64)
	if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
		return nil, fmt.Errorf("query parameter %s must be a number (seconds since the epoch), not %q", name, v)
	}
	return &f, nil
}
