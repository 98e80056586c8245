package server

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"

	"github.com/silo-db/silo/db"
)

// Pryv's batch call, POST /{username}/ with [{method, params}, ...]: what Pryv's JavaScript client
// sends for connection.api(...). Each call is one call of an api.account_* function, made one
// after another with the batch's access, and answers its own result or its own error, as in Pryv
// (a failed call does not undo the others). Database trouble fails the whole batch (503).

type accountCall struct {
	Method string          `json:"method"`
	Params json.RawMessage `json:"params"`
}

// accountMethods maps Pryv's method ids to the account operations.
var accountMethods = map[string]func(s *server, ctx context.Context, access string, params json.RawMessage) (json.RawMessage, error){
	"getAccessInfo": func(s *server, ctx context.Context, access string, _ json.RawMessage) (json.RawMessage, error) {
		return s.q.AccountAccessInfo(ctx, access)
	},
	"accesses.get": func(s *server, ctx context.Context, access string, _ json.RawMessage) (json.RawMessage, error) {
		return s.q.AccountAccessesGet(ctx, access)
	},
	"accesses.create": func(s *server, ctx context.Context, access string, p json.RawMessage) (json.RawMessage, error) {
		return s.q.AccountAccessCreate(ctx, db.AccountAccessCreateParams{AccessID: access, Access: p})
	},
	"streams.get": func(s *server, ctx context.Context, access string, p json.RawMessage) (json.RawMessage, error) {
		var arg struct {
			ParentID *string `json:"parentId"`
			State    *string `json:"state"`
		}
		if err := decodeParams(p, &arg); err != nil {
			return nil, err
		}
		state := "default"
		if arg.State != nil {
			state = *arg.State
		}
		return s.q.AccountStreamsGet(ctx, db.AccountStreamsGetParams{AccessID: access, ParentID: arg.ParentID, State: state})
	},
	"streams.create": func(s *server, ctx context.Context, access string, p json.RawMessage) (json.RawMessage, error) {
		return s.q.AccountStreamCreate(ctx, db.AccountStreamCreateParams{AccessID: access, Stream: p})
	},
	"events.get": func(s *server, ctx context.Context, access string, p json.RawMessage) (json.RawMessage, error) {
		q, err := paramsQuery(p)
		if err != nil {
			return nil, err
		}
		arg, err := accountEventsParams(q)
		if err != nil {
			return nil, &APIError{Status: http.StatusBadRequest, ID: "invalid-parameters-format", Message: err.Error()}
		}
		arg.AccessID = access
		return s.q.AccountEventsGet(ctx, arg)
	},
	"events.getOne": func(s *server, ctx context.Context, access string, p json.RawMessage) (json.RawMessage, error) {
		var arg struct {
			ID string `json:"id"`
		}
		if err := decodeParams(p, &arg); err != nil {
			return nil, err
		}
		return s.q.AccountEventGet(ctx, db.AccountEventGetParams{AccessID: access, ID: arg.ID})
	},
	"events.create": func(s *server, ctx context.Context, access string, p json.RawMessage) (json.RawMessage, error) {
		return s.q.AccountEventCreate(ctx, db.AccountEventCreateParams{AccessID: access, Event: p})
	},
	"events.update": func(s *server, ctx context.Context, access string, p json.RawMessage) (json.RawMessage, error) {
		var arg struct {
			ID     string          `json:"id"`
			Update json.RawMessage `json:"update"`
		}
		if err := decodeParams(p, &arg); err != nil {
			return nil, err
		}
		if arg.Update == nil {
			arg.Update = json.RawMessage("null")
		}
		return s.q.AccountEventUpdate(ctx, db.AccountEventUpdateParams{AccessID: access, ID: arg.ID, Update: arg.Update})
	},
	"events.delete": func(s *server, ctx context.Context, access string, p json.RawMessage) (json.RawMessage, error) {
		var arg struct {
			ID string `json:"id"`
		}
		if err := decodeParams(p, &arg); err != nil {
			return nil, err
		}
		return s.q.AccountEventDelete(ctx, db.AccountEventDeleteParams{AccessID: access, ID: arg.ID})
	},
}

func decodeParams(p json.RawMessage, v any) error {
	if len(bytes.TrimSpace(p)) == 0 || bytes.Equal(bytes.TrimSpace(p), []byte("null")) {
		return nil
	}
	if err := json.Unmarshal(p, v); err != nil {
		return &APIError{Status: http.StatusBadRequest, ID: "invalid-parameters-format", Message: "invalid params: " + err.Error()}
	}
	return nil
}

// paramsQuery turns the params object of events.get into the query its route reads: arrays as
// repeated values, numbers and booleans as text.
func paramsQuery(p json.RawMessage) (url.Values, error) {
	var m map[string]any
	if err := decodeParams(p, &m); err != nil {
		return nil, err
	}
	q := url.Values{}
	for k, v := range m {
		values := []any{v}
		if list, ok := v.([]any); ok {
			values = list
			if len(list) == 0 {
				q[k] = []string{"[]"}
			}
		}
		for _, x := range values {
			switch x := x.(type) {
			case string:
				q.Add(k, x)
			case float64:
				q.Add(k, strconv.FormatFloat(x, 'f', -1, 64))
			case bool:
				q.Add(k, strconv.FormatBool(x))
			case nil:
			default:
				return nil, &APIError{Status: http.StatusBadRequest, ID: "invalid-parameters-format",
					Message: fmt.Sprintf("params.%s must be a string, a number, a boolean or an array of them", k)}
			}
		}
	}
	return q, nil
}

// accountBatch answers POST /{username}/: {"results": [...]}, one result per call, in order.
func (s *server) accountBatch(w http.ResponseWriter, r *http.Request) {
	access, ok := s.accountAccess(w, r)
	if !ok {
		return
	}
	body, ok := s.readBody(w, r)
	if !ok {
		return
	}
	var calls []accountCall
	if err := json.Unmarshal(body, &calls); err != nil {
		writeError(w, http.StatusBadRequest, "invalid-request-structure",
			"a batch is a JSON array of method calls {method, params}", nil)
		return
	}
	results := make([]json.RawMessage, len(calls))
	for i, c := range calls {
		op, known := accountMethods[c.Method]
		if !known {
			results[i] = batchError(&APIError{Status: http.StatusNotFound, ID: "invalid-method",
				Message: fmt.Sprintf("Invalid method id %q", c.Method)})
			continue
		}
		params := c.Params
		if params == nil {
			params = json.RawMessage("{}")
		}
		out, err := op(s, r.Context(), access, params)
		if err == nil {
			results[i] = out
			continue
		}
		apiErr, isAPI := err.(*APIError)
		if !isAPI {
			apiErr, isAPI = ErrorFor(err)
		}
		if _, down := DatabaseUnavailable(err); down || !isAPI || apiErr.Status == http.StatusServiceUnavailable {
			s.fail(w, r, err) // the batch as a whole: retry it
			return
		}
		results[i] = batchError(apiErr)
	}
	writeJSON(w, http.StatusOK, map[string]any{"results": results})
}

func batchError(e *APIError) json.RawMessage {
	b, _ := json.Marshal(errorBody{Error: errorObject{ID: e.ID, Message: e.Message, Data: e.Data}})
	return b
}
