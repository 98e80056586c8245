package server

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"

	"github.com/silo-db/silo/db"
)

// The Belt API (admin tokens only), in the shape of Granary's: belt documents as api.belt_get
// answers them. Every route is for admins because a belt's callback runs inside PostgreSQL: SQL
// with the rights of Silo's role, Python (extractorFn) as the database server's operating system
// user. The rules (fields, settings, validation) are in SQL (sql/belt/02_registry.sql).

// beltID reads the path's {id}. Belt ids are positive integers (answered as strings, as Granary's
// were); anything else names no belt, which is a 404.
func beltID(w http.ResponseWriter, r *http.Request) (int64, bool) {
	id, err := strconv.ParseInt(r.PathValue("id"), 10, 64)
	if err != nil || id <= 0 {
		writeError(w, http.StatusNotFound, "unknown-resource", fmt.Sprintf("no belt %q", r.PathValue("id")), nil)
		return 0, false
	}
	return id, true
}

// GET /belts?offset=&pagesize= (default 20, at most 1000): {"totalCount", "items", "_links"}.
func (s *server) beltList(w http.ResponseWriter, r *http.Request) {
	if !s.admin(w, r) {
		return
	}
	offset, pageSize, err := pageParams(r.URL.Query())
	if err != nil {
		badParam(w, err)
		return
	}
	raw, err := s.q.BeltList(r.Context(), db.BeltListParams{PageOffset: int32(offset), PageSize: int32(pageSize)})
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writePage(w, r, raw, offset, pageSize)
}

// pageParams reads offset (default 0) and pagesize (default 20, at most 1000).
func pageParams(q url.Values) (offset, pageSize int, err error) {
	pageSize, err1 := intParam(q, "pagesize", 20, 1, 1000)
	offset, err2 := intParam(q, "offset", 0, 0, 1<<30)
	return offset, pageSize, errors.Join(err1, err2)
}

// writePage answers page, a {"totalCount", "items"} document of the SQL, with "_links": "self"
// and, when more items follow, "next", whose offset and pagesize replace the request's.
func writePage(w http.ResponseWriter, r *http.Request, raw json.RawMessage, offset, pageSize int) {
	var page struct {
		TotalCount int64           `json:"totalCount"`
		Items      json.RawMessage `json:"items"`
		Links      map[string]any  `json:"_links"`
	}
	if err := json.Unmarshal(raw, &page); err != nil {
		writeError(w, http.StatusInternalServerError, "unexpected-error", "the page could not be read", nil)
		return
	}
	link := func(off int) map[string]string {
		u := *r.URL
		v := u.Query()
		v.Set("offset", strconv.Itoa(off))
		v.Set("pagesize", strconv.Itoa(pageSize))
		u.RawQuery = v.Encode()
		return map[string]string{"href": u.RequestURI()}
	}
	page.Links = map[string]any{"self": link(offset)}
	if int64(offset+pageSize) < page.TotalCount {
		page.Links["next"] = link(offset + pageSize)
	}
	writeJSON(w, http.StatusOK, page)
}

// POST /belts: 201 with the belt, Location /belts/{id}.
func (s *server) beltCreate(w http.ResponseWriter, r *http.Request) {
	if !s.admin(w, r) {
		return
	}
	body, ok := s.readBody(w, r)
	if !ok {
		return
	}
	doc, err := s.q.BeltCreate(r.Context(), body)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	var created struct {
		ID string `json:"id"`
	}
	if json.Unmarshal(doc, &created) == nil && created.ID != "" {
		w.Header().Set("Location", "/belts/"+created.ID)
	}
	writeJSON(w, http.StatusCreated, json.RawMessage(doc))
}

// GET /belts/{id}
func (s *server) beltGet(w http.ResponseWriter, r *http.Request) {
	if !s.admin(w, r) {
		return
	}
	id, ok := beltID(w, r)
	if !ok {
		return
	}
	doc, err := s.q.BeltGet(r.Context(), id)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, json.RawMessage(doc))
}

// PUT /belts/{id}: the fields given replace the old ones; version + 1.
func (s *server) beltUpdate(w http.ResponseWriter, r *http.Request) {
	if !s.admin(w, r) {
		return
	}
	id, ok := beltID(w, r)
	if !ok {
		return
	}
	body, ok := s.readBody(w, r)
	if !ok {
		return
	}
	doc, err := s.q.BeltUpdate(r.Context(), db.BeltUpdateParams{ID: id, Belt: body})
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, json.RawMessage(doc))
}

// DELETE /belts/{id}: {"content": true}, 404 when there is no such belt.
func (s *server) beltDelete(w http.ResponseWriter, r *http.Request) {
	if !s.admin(w, r) {
		return
	}
	id, ok := beltID(w, r)
	if !ok {
		return
	}
	deleted, err := s.q.BeltDelete(r.Context(), id)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if !deleted {
		writeError(w, http.StatusNotFound, "unknown-resource", fmt.Sprintf("no belt %d", id), nil)
		return
	}
	writeJSON(w, http.StatusOK, map[string]bool{"content": true})
}

// GET /belts/{id}/state: {"status", "reason"}.
func (s *server) beltStateGet(w http.ResponseWriter, r *http.Request) {
	if !s.admin(w, r) {
		return
	}
	id, ok := beltID(w, r)
	if !ok {
		return
	}
	state, err := s.q.BeltState(r.Context(), id)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, json.RawMessage(state))
}

// beltCommand reads an admin's command to the belt of the path: its id, and the body decoded into
// req with no unknown field; a body that does not fit is a 400 saying usage.
func (s *server) beltCommand(w http.ResponseWriter, r *http.Request, req any, usage string) (int64, bool) {
	if !s.admin(w, r) {
		return 0, false
	}
	id, ok := beltID(w, r)
	if !ok {
		return 0, false
	}
	body, ok := s.readBody(w, r)
	if !ok {
		return 0, false
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(req); err != nil {
		writeError(w, http.StatusBadRequest, "invalid-request-structure", usage, nil)
		return 0, false
	}
	return id, true
}

// POST /belts/{id}/state with {"action": "START" | "STOP"}: the new {"status", "reason"}.
func (s *server) beltStateSet(w http.ResponseWriter, r *http.Request) {
	const usage = `the body must be {"action": "START"} or {"action": "STOP"}`
	var req struct {
		Action *string `json:"action"`
	}
	id, ok := s.beltCommand(w, r, &req, usage)
	if !ok {
		return
	}
	if req.Action == nil {
		writeError(w, http.StatusBadRequest, "invalid-request-structure", usage, nil)
		return
	}
	state, err := s.q.BeltSetState(r.Context(), db.BeltSetStateParams{ID: id, Action: *req.Action})
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, json.RawMessage(state))
}

// GET /belts/{id}/dead-letters?offset=&pagesize=&replayed=: the belt's dead letters, oldest first,
// {"totalCount", "items", "_links"}; replayed=false lists those not replayed yet, true the others.
func (s *server) beltDeadLetterList(w http.ResponseWriter, r *http.Request) {
	if !s.admin(w, r) {
		return
	}
	id, ok := beltID(w, r)
	if !ok {
		return
	}
	q := r.URL.Query()
	offset, pageSize, err1 := pageParams(q)
	var replayed *bool
	var err2 error
	if v := q.Get("replayed"); v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			err2 = fmt.Errorf("replayed must be true or false, got %q", v)
		}
		replayed = &b
	}
	if err := errors.Join(err1, err2); err != nil {
		badParam(w, err)
		return
	}
	raw, err := s.q.BeltDeadLetterList(r.Context(), db.BeltDeadLetterListParams{
		BeltID: id, PageOffset: int32(offset), PageSize: int32(pageSize), Replayed: replayed})
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writePage(w, r, raw, offset, pageSize)
}

// POST /belts/{id}/dead-letters/replay with {"ids": ["12", 13]} (the dead letters to replay) or {}
// (every dead letter not replayed yet): {"replayed": n}.
func (s *server) beltDeadLetterReplay(w http.ResponseWriter, r *http.Request) {
	var req struct {
		IDs *[]json.Number `json:"ids"`
	}
	id, ok := s.beltCommand(w, r, &req, `the body must be {} or {"ids": [dead letter ids]}`)
	if !ok {
		return
	}
	var ids []int64
	if req.IDs != nil {
		ids = make([]int64, 0, len(*req.IDs))
		for _, n := range *req.IDs {
			v, err := strconv.ParseInt(n.String(), 10, 64)
			if err != nil || v <= 0 {
				writeError(w, http.StatusBadRequest, "invalid-request-structure",
					fmt.Sprintf("a dead letter id is a positive integer, got %q", n.String()), nil)
				return
			}
			ids = append(ids, v)
		}
	}
	n, err := s.q.BeltDeadLetterReplay(r.Context(), db.BeltDeadLetterReplayParams{BeltID: id, IDs: ids})
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]int32{"replayed": n})
}
