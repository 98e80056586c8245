package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	mqtt "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/listeners"
	"github.com/mochi-mqtt/server/v2/packets"

	"github.com/silo-db/silo/db"
)

// Series over MQTT (3.1.1 and 5): a broker (mochi-mqtt) whose only subscribers are the clients
// themselves, each to its own error topic. It is a transport into the series routes, not a
// message bus:
//
//   - CONNECT: username = the Pryv username, password = an access token of that user
//     (api.account_authenticate); nothing else gets in. A refused pair gets "bad username or
//     password", a database that cannot check it "server unavailable".
//   - PUBLISH to {username}/events/{eventId}/series: flatJSON (or CSV: MQTT 5 content type
//     text/csv, or a payload that does not start with '{'); to {username}/series/batch: seriesBatch.
//     Each message is one request of POST /{username}/events/{id}/series or /series/batch, with the
//     same rules and permissions, written through the same joiner (transport.go). An MQTT 5 user
//     property idempotency-key is the request's Idempotency-Key.
//   - The message is handled inside the broker's OnPublish hook, which mochi calls before it
//     sends PUBACK (processPublish in its server.go): a QoS 1 message is acknowledged only once
//     its points are committed.
//   - A message refused (malformed, forbidden, unknown event, wrong topic) is answered, and the
//     connection goes on: MQTT 5 gets PUBACK with a reason code (payload format invalid, not
//     authorized, topic name invalid, ...) and its reason string; every client gets the error as a
//     JSON message on {username}/errors/{clientId} when it subscribed to it (for MQTT 3.1.1, whose
//     PUBACK has no reason code, the only answer), and 3.1.1 gets PUBACK (the message was taken
//     and answered: sending it again would not help).
//   - Database trouble acknowledges nothing: the client is disconnected (MQTT 5: "server busy")
//     and sends its unacknowledged messages again when it reconnects; CONNACK says "server
//     unavailable" until the database is back.
//   - SUBSCRIBE is refused except to the client's own error topic. Nothing is retained, no will is
//     published, QoS 2 is served as QoS 1, and a process keeps no state another needs: a client
//     may reconnect to any Silo process.

// MQTTErrorTopic is the topic a client subscribes to for the answers to its refused messages.
func MQTTErrorTopic(username, clientID string) string {
	return username + "/errors/" + clientID
}

// MQTT is the broker: Serve it on a listener, Close it at shutdown.
type MQTT struct {
	broker *mqtt.Server
	hook   *mqttHook
	close  sync.Once
}

// NewWithMQTT returns the HTTP API (as New) and an MQTT broker that share its joiner and metrics.
func NewWithMQTT(cfg Config) (http.Handler, *MQTT, error) {
	s := newServer(cfg)
	caps := mqtt.NewDefaultServerCapabilities()
	caps.MaximumQos = 1
	caps.RetainAvailable = 0
	caps.MaximumPacketSize = uint32(min(s.maxBody+64<<10, 256<<20)) // a body as large as HTTP takes, and its topic
	caps.Compatibilities.NoInheritedPropertiesOnAck = true
	broker := mqtt.New(&mqtt.Options{Capabilities: caps, InlineClient: true,
		Logger: slog.New(mqttLogHandler{s.log.Handler()}).With("component", "mqtt")})
	h := &mqttHook{s: s, broker: broker}
	if err := broker.AddHook(h, nil); err != nil {
		return nil, nil, fmt.Errorf("error adding the MQTT hook: %w", err)
	}
	return s.routes(), &MQTT{broker: broker, hook: h}, nil
}

// Serve takes MQTT connections on ln (TLS or plain: the caller decided) until Close, and returns
// at once.
func (m *MQTT) Serve(ln net.Listener) error {
	if err := m.broker.AddListener(&mqttListener{ln: ln}); err != nil {
		return fmt.Errorf("error adding the MQTT listener: %w", err)
	}
	return m.broker.Serve()
}

// Close stops taking connections and closes the clients' (each may reconnect to another process).
// A write in progress finishes first; its PUBACK cannot reach the client any more, which sends
// the message again. Close may be called more than once.
func (m *MQTT) Close() error {
	var err error
	m.close.Do(func() { err = m.broker.Close() })
	return err
}

// mqttLogHandler passes mochi's log on, with one change: a message that Silo refused (OnPublish
// returned its reason code) is mochi's "publish packet error", logged at ERROR with the whole
// packet. It is the client's error, answered and counted (silo_series_transport_rejects_total):
// it goes to DEBUG.
type mqttLogHandler struct{ slog.Handler }

func (h mqttLogHandler) Handle(ctx context.Context, r slog.Record) error {
	if r.Message == "publish packet error" {
		if !h.Handler.Enabled(ctx, slog.LevelDebug) {
			return nil
		}
		r.Level = slog.LevelDebug
	}
	return h.Handler.Handle(ctx, r)
}

func (h mqttLogHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return mqttLogHandler{h.Handler.WithAttrs(attrs)}
}

func (h mqttLogHandler) WithGroup(name string) slog.Handler {
	return mqttLogHandler{h.Handler.WithGroup(name)}
}

// mqttListener serves an open net.Listener to mochi (its own listeners open their address
// themselves, after Silo has checked its settings and opened the database).
type mqttListener struct {
	ln  net.Listener
	log *slog.Logger
	end atomic.Bool
}

func (l *mqttListener) Init(log *slog.Logger) error { l.log = log; return nil }
func (l *mqttListener) ID() string                  { return "silo" }
func (l *mqttListener) Address() string             { return l.ln.Addr().String() }
func (l *mqttListener) Protocol() string            { return "tcp" }

func (l *mqttListener) Serve(establish listeners.EstablishFn) {
	for {
		conn, err := l.ln.Accept()
		if err != nil {
			if l.end.Load() || errors.Is(err, net.ErrClosed) {
				return
			}
			// Out of file descriptors and the like: the listener stays, as http.Server's does.
			l.log.Warn("MQTT accept failed", "err", err)
			time.Sleep(100 * time.Millisecond)
			continue
		}
		if l.end.Load() {
			_ = conn.Close()
			return
		}
		go func() {
			if err := establish(l.ID(), conn); err != nil {
				l.log.Debug("MQTT connection ended", "remote", conn.RemoteAddr().String(), "err", err)
			}
		}()
	}
}

func (l *mqttListener) Close(closeClients listeners.CloseFn) {
	if l.end.CompareAndSwap(false, true) {
		closeClients(l.ID())
	}
	_ = l.ln.Close()
}

// mqttSession is a connected client as Silo authenticated it.
type mqttSession struct {
	username string
	access   string
}

// mqttHook is Silo's part of the broker: authentication, the topic rules and the writes.
type mqttHook struct {
	mqtt.HookBase
	s        *server
	broker   *mqtt.Server
	sessions sync.Map // *mqtt.Client → *mqttSession
}

func (h *mqttHook) ID() string { return "silo" }

func (h *mqttHook) Provides(b byte) bool {
	switch b {
	case mqtt.OnConnect, mqtt.OnConnectAuthenticate, mqtt.OnACLCheck, mqtt.OnPublish, mqtt.OnDisconnect, mqtt.OnPacketRead:
		return true
	}
	return false
}

// mqttAuthTimeout bounds the check of a CONNECT's token; mqttWriteTimeout the write of a message.
const (
	mqttAuthTimeout  = 10 * time.Second
	mqttWriteTimeout = 60 * time.Second
)

// OnConnect authenticates the client; a refusal is answered here with its CONNACK code.
func (h *mqttHook) OnConnect(cl *mqtt.Client, pk packets.Packet) error {
	refuse := func(code packets.Code, result string) error {
		h.s.metrics.transport.mqttConnects.WithLabelValues(result).Inc()
		ack := code
		if code == packets.ErrBadUsernameOrPassword && cl.Properties.ProtocolVersion < 5 {
			// MQTT 3.1.1's own code (mochi would send 5, not authorized).
			ack = packets.Code{Code: 0x04, Reason: code.Reason}
		}
		_ = h.broker.SendConnack(cl, ack, false, nil)
		return code
	}
	username, token := string(pk.Connect.Username), string(pk.Connect.Password)
	if username == "" || token == "" || !pk.Connect.PasswordFlag {
		return refuse(packets.ErrBadUsernameOrPassword, "refused")
	}
	ctx, cancel := context.WithTimeout(context.Background(), mqttAuthTimeout)
	defer cancel()
	row, err := h.s.q.AccountAuthenticate(ctx, db.AccountAuthenticateParams{Username: username, Token: &token})
	if err != nil {
		var pgErr *pgconn.PgError
		if _, down := DatabaseUnavailable(err); down {
			return refuse(packets.ErrServerUnavailable, "unavailable")
		}
		if errors.As(err, &pgErr) {
			if _, known := lookupError(pgErr.Code); known {
				return refuse(packets.ErrBadUsernameOrPassword, "refused")
			}
		}
		h.s.log.Error("MQTT authentication failed", "err", err)
		return refuse(packets.ErrServerUnavailable, "unavailable")
	}
	// A will would go to subscribers, and a client can subscribe to its own error topic only: a
	// will is never published (it could only be another client's false error message).
	atomic.StoreUint32(&cl.Properties.Will.Flag, 0)
	h.sessions.Store(cl, &mqttSession{username: row.Username, access: row.AccessID})
	h.s.metrics.transport.mqttConnects.WithLabelValues("ok").Inc()
	h.s.metrics.transport.mqttConns.Inc()
	return nil
}

// OnConnectAuthenticate lets in the clients OnConnect authenticated.
func (h *mqttHook) OnConnectAuthenticate(cl *mqtt.Client, _ packets.Packet) bool {
	_, ok := h.sessions.Load(cl)
	return ok
}

func (h *mqttHook) OnDisconnect(cl *mqtt.Client, _ error, _ bool) {
	if _, ok := h.sessions.LoadAndDelete(cl); ok {
		h.s.metrics.transport.mqttConns.Dec()
	}
}

// mqttUnserved marks the topic of a PUBLISH that mochi would drop without an answer ($SYS/...,
// $share/...: topics no client may publish to), so that it reaches OnPublish and is refused there
// like any other topic Silo does not serve. No username contains '!'.
const mqttUnserved = "!unserved!/"

// OnPacketRead marks the PUBLISHes mochi would drop in silence (mqttUnserved). A topic with a
// wildcard is left to mochi: it is a protocol violation, which ends the connection.
func (h *mqttHook) OnPacketRead(_ *mqtt.Client, pk packets.Packet) (packets.Packet, error) {
	if pk.FixedHeader.Type == packets.Publish && pk.TopicName != "" && !strings.ContainsAny(pk.TopicName, "+#") &&
		!mqtt.IsValidFilter(pk.TopicName, true) {
		pk.TopicName = mqttUnserved + pk.TopicName
	}
	return pk, nil
}

// OnACLCheck allows every publish (OnPublish answers a refused one: mochi would drop the
// connection of an MQTT 3.1.1 client refused here) and a subscription to the client's own error
// topic only.
func (h *mqttHook) OnACLCheck(cl *mqtt.Client, topic string, write bool) bool {
	if write {
		return true
	}
	v, ok := h.sessions.Load(cl)
	return ok && topic == MQTTErrorTopic(v.(*mqttSession).username, cl.ID)
}

// mqttRefusal is the MQTT 5 reason code of a refusal, by the error id of the HTTP answer.
func mqttRefusal(id string) byte {
	switch id {
	case "forbidden", "invalid-access-token", "missing-header":
		return packets.ErrNotAuthorized.Code
	case "unknown-resource", "invalid-topic":
		return packets.ErrTopicNameInvalid.Code
	case "invalid-request-structure", "invalid-parameters-format", "invalid-event-type":
		return packets.ErrPayloadFormatInvalid.Code
	case "unexpected-error":
		return packets.ErrUnspecifiedError.Code
	}
	return packets.ErrImplementationSpecificError.Code
}

// mqttAnswer is the message on a client's error topic.
type mqttAnswer struct {
	Topic      string  `json:"topic"`
	PacketID   uint16  `json:"packetId"`
	ReasonCode byte    `json:"reasonCode"`
	Error      wsError `json:"error"`
}

// OnPublish writes the message's points and decides its answer (see the top of the file).
func (h *mqttHook) OnPublish(cl *mqtt.Client, pk packets.Packet) (packets.Packet, error) {
	if cl.Net.Inline {
		return pk, nil // Silo's own answers on error topics
	}
	v, ok := h.sessions.Load(cl)
	if !ok {
		return pk, packets.ErrRejectPacket
	}
	sess := v.(*mqttSession)
	event, body, key, err := mqttMessage(sess.username, pk)
	if err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), mqttWriteTimeout)
		_, _, err = h.s.seriesSubmit(ctx, sess.access, event, body, key)
		cancel()
		if err == nil {
			h.s.metrics.transport.add("mqtt", countPoints(body))
			return pk, packets.CodeSuccessIgnore // acknowledged, and passed on to nobody
		}
	}
	e, unavailable := h.s.transportError(err, "mqtt")
	h.s.metrics.transport.reject("mqtt", e.ID)
	code := mqttRefusal(e.ID)
	if unavailable {
		code = packets.ErrServerBusy.Code
	}
	answer, _ := json.Marshal(mqttAnswer{Topic: strings.TrimPrefix(pk.TopicName, mqttUnserved), PacketID: pk.PacketID, ReasonCode: code,
		Error: wsError{ID: e.ID, Message: e.Message, Data: e.Data}}) // always marshals
	if err := h.broker.Publish(MQTTErrorTopic(sess.username, cl.ID), answer, false, 0); err != nil {
		h.s.log.Warn("MQTT error answer not published", "client", cl.ID, "err", err)
	}
	if unavailable {
		// Nothing is acknowledged: the client sends the message again when it reconnects.
		_ = h.broker.DisconnectClient(cl, packets.ErrServerBusy)
		return pk, packets.ErrRejectPacket
	}
	if cl.Properties.ProtocolVersion == 5 && pk.FixedHeader.Qos > 0 {
		return pk, packets.Code{Code: code, Reason: e.ID + ": " + e.Message}
	}
	return pk, packets.CodeSuccessIgnore
}

// mqttMessage reads a PUBLISH of username's client: the event of its topic ("" for a batch), its
// body as flatJSON or seriesBatch, and its idempotency key. Errors are *APIError.
func mqttMessage(username string, pk packets.Packet) (string, []byte, *string, error) {
	topic := strings.TrimPrefix(pk.TopicName, mqttUnserved)
	parts := strings.Split(pk.TopicName, "/")
	var event string
	switch {
	case topic != pk.TopicName:
		return "", nil, nil, &APIError{Status: http.StatusBadRequest, ID: "invalid-topic",
			Message: fmt.Sprintf("topic %q is reserved: publish to {username}/events/{eventId}/series or {username}/series/batch", topic)}
	case len(parts) == 4 && parts[1] == "events" && parts[2] != "" && parts[3] == "series":
		event = parts[2]
	case len(parts) == 3 && parts[1] == "series" && parts[2] == "batch":
	default:
		return "", nil, nil, &APIError{Status: http.StatusBadRequest, ID: "invalid-topic",
			Message: fmt.Sprintf("topic %q is not {username}/events/{eventId}/series or {username}/series/batch", pk.TopicName)}
	}
	if parts[0] != username {
		return "", nil, nil, &APIError{Status: http.StatusForbidden, ID: "forbidden",
			Message: fmt.Sprintf("this connection writes as %q: topic %q is another user's", username, pk.TopicName)}
	}
	var key *string
	for _, p := range pk.Properties.User {
		if strings.EqualFold(p.Key, "idempotency-key") {
			k := p.Val
			key = &k
		}
	}
	body := pk.Payload
	ct := strings.ToLower(strings.TrimSpace(strings.Split(pk.Properties.ContentType, ";")[0]))
	trimmed := bytes.TrimLeft(body, " \t\r\n")
	csv := ct == "text/csv" || (ct == "" && (len(trimmed) == 0 || trimmed[0] != '{'))
	if csv && len(trimmed) > 0 {
		if event == "" {
			return "", nil, nil, &APIError{Status: http.StatusBadRequest, ID: "invalid-request-structure",
				Message: "a series batch is a JSON object: {\"format\":\"seriesBatch\",\"data\":[...]}"}
		}
		flat, err := seriesCSV(body)
		if err != nil {
			return "", nil, nil, badCSV(err)
		}
		body = flat
	}
	return event, body, key, nil
}
