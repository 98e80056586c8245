package server

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"
)

type fakeRow struct {
	Request int32
	Body    string
}

// fakeCall answers one row per request with its body, and fails a call that holds a body with
// "bad" in it, as PostgreSQL refuses a whole call for one input it cannot read.
func fakeCall(calls *[]int) func(context.Context, string, []byte, []string) ([]fakeRow, error) {
	return func(_ context.Context, _ string, requests []byte, texts []string) ([]fakeRow, error) {
		var reqs []struct {
			Updates json.RawMessage `json:"updates"`
			Text    bool            `json:"text"`
		}
		if err := json.Unmarshal(requests, &reqs); err != nil {
			return nil, err
		}
		if len(texts) != len(reqs) {
			return nil, fmt.Errorf("%d texts for %d requests", len(texts), len(reqs))
		}
		*calls = append(*calls, len(reqs))
		if bytes.Contains(requests, []byte("bad")) {
			return nil, &pgconn.PgError{Code: "22P02", Message: "invalid input syntax for type json"}
		}
		rows := make([]fakeRow, len(reqs))
		for i, r := range reqs {
			rows[i] = fakeRow{Request: int32(i + 1), Body: string(r.Updates)}
			if r.Text {
				rows[i].Body = "text:" + texts[i]
			}
		}
		return rows, nil
	}
}

func joinItems(bodies ...string) []*joinItem[string, fakeRow] {
	items := make([]*joinItem[string, fakeRow], len(bodies))
	for i, b := range bodies {
		items[i] = &joinItem[string, fakeRow]{req: writeRequest{body: []byte(b), field: "updates"}, group: "g",
			key: "g", reply: make(chan joinReply[fakeRow], 1)}
	}
	return items
}

// Each joined request gets its own rows.
func TestJoinedRequestsGetTheirOwnRows(t *testing.T) {
	var calls []int
	j := &joiner[string, fakeRow]{call: fakeCall(&calls), requestOf: func(r fakeRow) int32 { return r.Request }}
	items := joinItems(`{"a":1}`, `[{"b":2}]`, `{"c":3}`)
	j.callGroup(items)
	require.Equal(t, []int{3}, calls, "one call")
	for i, want := range []string{`{"a":1}`, `[{"b":2}]`, `{"c":3}`} {
		r := <-items[i].reply
		require.NoError(t, r.err)
		require.Len(t, r.rows, 1)
		require.Equal(t, want, r.rows[0].Body)
	}
}

// A request's text goes apart from the JSON, at its request's place among the call's texts.
func TestJoinedRequestsCarryTheirTexts(t *testing.T) {
	var calls []int
	j := &joiner[string, fakeRow]{call: fakeCall(&calls), requestOf: func(r fakeRow) int32 { return r.Request }}
	items := joinItems(`{"a":1}`, ``, `{"c":3}`)
	items[1].req.text = []byte("{\"b\": 2}\n{\"b\": 3}")
	j.callGroup(items)
	require.Equal(t, []int{3}, calls, "one call")
	for i, want := range []string{`{"a":1}`, "text:{\"b\": 2}\n{\"b\": 3}", `{"c":3}`} {
		r := <-items[i].reply
		require.NoError(t, r.err)
		require.Equal(t, want, r.rows[0].Body)
	}
}

// One request the database cannot read fails alone: the others of its call are tried again on
// their own.
func TestJoinedCallFailingForOneRequest(t *testing.T) {
	var calls []int
	j := &joiner[string, fakeRow]{call: fakeCall(&calls), requestOf: func(r fakeRow) int32 { return r.Request }}
	items := joinItems(`{"a":1}`, `{"bad":2}`, `{"c":3}`)
	j.callGroup(items)
	require.Equal(t, []int{3, 1, 1, 1}, calls, "the joined call, then one per request")
	require.NoError(t, (<-items[0].reply).err)
	var pgErr *pgconn.PgError
	require.ErrorAs(t, (<-items[1].reply).err, &pgErr)
	require.Equal(t, "22P02", pgErr.Code)
	r := <-items[2].reply
	require.NoError(t, r.err)
	require.Equal(t, `{"c":3}`, r.rows[0].Body)
}

// Database trouble fails every request of the call at once: trying each again would only wait
// longer for the same answer.
func TestJoinedCallWhenTheDatabaseIsDown(t *testing.T) {
	n := 0
	j := &joiner[string, fakeRow]{call: func(context.Context, string, []byte, []string) ([]fakeRow, error) {
		n++
		return nil, &pgconn.PgError{Code: "57P01", Message: "terminating connection due to administrator command"}
	}, requestOf: func(r fakeRow) int32 { return r.Request }}
	items := joinItems(`{"a":1}`, `{"b":2}`)
	j.callGroup(items)
	require.Equal(t, 1, n)
	for _, it := range items {
		_, down := DatabaseUnavailable((<-it.reply).err)
		require.True(t, down)
	}
}
