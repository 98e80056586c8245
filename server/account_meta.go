package server

import (
	"bufio"
	"bytes"
	"encoding/json"
	"net"
	"net/http"
	"strconv"
	"time"
)

// Pryv's envelope: every answer of the account routes, errors and the mux's own 404 and 405
// included, carries meta {apiVersion, serverTime, serial} and the API-Version header. Pryv's
// JavaScript client refuses an answer without meta.serverTime.

// accountMeta is the meta object of an answer made now.
func accountMeta(now time.Time) []byte {
	server := float64(now.UnixMicro()) / 1e6
	return []byte(`{"apiVersion":` + strconv.Quote(AccountAPIVersion) +
		`,"serverTime":` + strconv.FormatFloat(server, 'f', -1, 64) +
		`,"serial":` + strconv.Quote(accountSerial) + `}`)
}

// withMeta adds meta to a JSON object body, ending it with a newline as json.Encoder does; a
// body that is not one is returned as it is.
func withMeta(body []byte, meta []byte) []byte {
	trimmed := bytes.TrimSpace(body)
	if len(trimmed) < 2 || trimmed[0] != '{' || trimmed[len(trimmed)-1] != '}' || !json.Valid(trimmed) {
		return body
	}
	inner := bytes.TrimSpace(trimmed[1 : len(trimmed)-1])
	out := make([]byte, 0, len(trimmed)+len(meta)+16)
	out = append(out, '{')
	if len(inner) > 0 {
		out = append(out, inner...)
		out = append(out, ',')
	}
	out = append(out, `"meta":`...)
	out = append(out, meta...)
	return append(out, '}', '\n')
}

// metaWriter holds an answer back until the handler is done, then writes it with meta. A handler
// that streams a large answer flushes (http.NewResponseController(w).Flush()): from then on its
// writes go straight out, and the handler writes meta itself (accountMeta) where its body ends.
type metaWriter struct {
	http.ResponseWriter
	status    int
	body      bytes.Buffer
	streaming bool
}

func (w *metaWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
}

func (w *metaWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	if w.streaming {
		return w.ResponseWriter.Write(b)
	}
	return w.body.Write(b)
}

// Flush starts streaming: the header and what was written so far go out as they are.
func (w *metaWriter) Flush() {
	if !w.streaming {
		w.streaming = true
		if w.status == 0 {
			w.status = http.StatusOK
		}
		w.Header().Set("API-Version", AccountAPIVersion)
		w.ResponseWriter.WriteHeader(w.status)
		_, _ = w.ResponseWriter.Write(w.body.Bytes())
		w.body.Reset()
	}
	_ = http.NewResponseController(w.ResponseWriter).Flush()
}

// Hijack hands the connection over to a websocket (GET /{username}/ws): nothing is written after.
func (w *metaWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	w.streaming = true
	return http.NewResponseController(w.ResponseWriter).Hijack()
}

// Unwrap gives http.ResponseController the writer underneath.
func (w *metaWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// finish writes the held answer: meta added to a JSON object, the API-Version header set.
func (w *metaWriter) finish() {
	if w.streaming {
		return
	}
	if w.status == 0 {
		w.status = http.StatusOK
	}
	body := w.body.Bytes()
	if w.Header().Get("Content-Type") == "application/json" {
		body = withMeta(body, accountMeta(time.Now()))
	}
	w.Header().Set("API-Version", AccountAPIVersion)
	w.Header().Del("Content-Length")
	w.ResponseWriter.WriteHeader(w.status)
	_, _ = w.ResponseWriter.Write(body)
}

// accountCORS sets Pryv's CORS headers, so that a Pryv web app on another origin may call the
// account routes with its token: the request's origin is allowed, with credentials.
func accountCORS(h http.Header, r *http.Request) {
	origin := r.Header.Get("Origin")
	if origin == "" {
		origin = "*"
	}
	h.Set("Access-Control-Allow-Origin", origin)
	h.Set("Access-Control-Allow-Credentials", "true")
	h.Set("Access-Control-Allow-Methods", "GET, POST, PUT, DELETE, OPTIONS")
	h.Set("Access-Control-Allow-Headers", "Authorization, Content-Type, Accept, Origin, X-Requested-With")
	h.Set("Access-Control-Expose-Headers", "API-Version")
	h.Add("Vary", "Origin")
}
