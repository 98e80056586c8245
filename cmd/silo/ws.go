package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/gorilla/websocket"
)

// silo ws: a websocket client for scripts (and the README's examples). It sends each line of
// stdin as a text message and prints every message it receives, one per line, until stdin has
// ended and every message sent with an "id" has its answer (a message with the same "id").

// headerFlags are the repeated -H flags.
type headerFlags []string

func (h *headerFlags) String() string     { return strings.Join(*h, ", ") }
func (h *headerFlags) Set(v string) error { *h = append(*h, v); return nil }

func cmdWSRun(args []string, stdout io.Writer) error {
	fs, help, err := parse(cmdWS, args, stdout, true)
	if help || err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return &usageError{cmd: cmdWS, msg: "ws needs one URL, e.g. ws://localhost:8080/alice/ws"}
	}
	header := http.Header{}
	for _, h := range *fs.Lookup("H").Value.(*headerFlags) {
		k, v, ok := strings.Cut(h, ":")
		if !ok {
			return &usageError{cmd: cmdWS, msg: fmt.Sprintf("-H %q: want 'Name: value'", h)}
		}
		header.Add(strings.TrimSpace(k), strings.TrimSpace(v))
	}
	wait := fs.Lookup("wait").Value.(flag.Getter).Get().(time.Duration)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return wsRun(ctx, fs.Arg(0), header, wait, os.Stdin, stdout)
}

// wsRun runs the client on url until the messages of in are sent and answered; wait bounds how
// long answers are awaited after in has ended.
func wsRun(ctx context.Context, url string, header http.Header, wait time.Duration, in io.Reader, out io.Writer) error {
	dctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	conn, resp, err := websocket.DefaultDialer.DialContext(dctx, url, header)
	cancel()
	if err != nil {
		if resp != nil {
			body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
			resp.Body.Close()
			return fmt.Errorf("%s: %s %s", url, resp.Status, strings.TrimSpace(string(body)))
		}
		return fmt.Errorf("%s: %w", url, err)
	}
	defer conn.Close()
	resp.Body.Close()

	type received struct {
		data []byte
		err  error
	}
	msgs := make(chan received)
	go func() {
		for {
			_, data, err := conn.ReadMessage()
			msgs <- received{data, err}
			if err != nil {
				return
			}
		}
	}()
	lines := make(chan string)
	go func() {
		sc := bufio.NewScanner(in)
		sc.Buffer(make([]byte, 1<<20), 64<<20)
		for sc.Scan() {
			if l := strings.TrimSpace(sc.Text()); l != "" {
				lines <- l
			}
		}
		close(lines)
	}()

	pending := map[string]bool{} // ids sent and not answered yet
	var deadline <-chan time.Time
	for {
		if lines == nil && len(pending) == 0 {
			_ = conn.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseNormalClosure, ""), time.Now().Add(time.Second))
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case l, ok := <-lines:
			if !ok {
				lines, deadline = nil, time.After(wait)
				continue
			}
			var m struct {
				ID json.RawMessage `json:"id"`
			}
			if err := json.Unmarshal([]byte(l), &m); err != nil {
				return fmt.Errorf("stdin: a message is one JSON object per line: %w", err)
			}
			if len(m.ID) > 0 {
				pending[string(m.ID)] = true
			}
			if err := conn.WriteMessage(websocket.TextMessage, []byte(l)); err != nil {
				return fmt.Errorf("%s: %w", url, err)
			}
		case r := <-msgs:
			if r.err != nil {
				if len(pending) == 0 && lines == nil {
					return nil
				}
				return fmt.Errorf("%s: the connection ended: %w", url, r.err)
			}
			fmt.Fprintln(out, string(r.data))
			var m struct {
				ID json.RawMessage `json:"id"`
			}
			if json.Unmarshal(r.data, &m) == nil && len(m.ID) > 0 {
				delete(pending, string(m.ID))
			}
		case <-deadline:
			return errors.New(fmt.Sprint(len(pending), " messages sent with an id got no answer within ", wait))
		}
	}
}
