package server_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/mochi-mqtt/server/v2/packets"
	"github.com/stretchr/testify/require"

	"github.com/silo-db/silo/db/dbtest"
	"github.com/silo-db/silo/server"
)

// mqttBundle: alice (personal token), a series:mass/kg holder at time 1000 in stream heart, a
// read-only access on heart, and a broker on TLS.
type mqttBundle struct {
	*accountBundle
	pool     *pgxpool.Pool
	event    string
	reader   string // a token that may read heart, not contribute
	addr     string
	clientTC *tls.Config // trusts the broker's certificate
	broker   *server.MQTT
}

// testCert makes a self-signed certificate for 127.0.0.1 and a client configuration that trusts it.
func testCert(t *testing.T) (server, client *tls.Config) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true, IsCA: true, IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	require.NoError(t, err)
	cert, err := x509.ParseCertificate(der)
	require.NoError(t, err)
	roots := x509.NewCertPool()
	roots.AddCert(cert)
	return &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}}},
		&tls.Config{RootCAs: roots, ServerName: "127.0.0.1"}
}

func mqttSetup(t *testing.T) *mqttBundle {
	t.Helper()
	pool := dbtest.Pool(t)
	handler, broker, err := server.NewWithMQTT(server.Config{Pool: pool, Version: "test"})
	require.NoError(t, err)
	b := &mqttBundle{accountBundle: &accountBundle{srv: httptest.NewServer(handler)}, pool: pool, broker: broker}
	t.Cleanup(b.srv.Close)
	require.NoError(t, pool.QueryRow(context.Background(), `SELECT token FROM api.account_user_create('alice')`).Scan(&b.token))
	require.Equal(t, http.StatusCreated, b.do(t, "POST", "/alice/streams", b.token, `{"id": "heart", "name": "Heart"}`).status)
	a := b.do(t, "POST", "/alice/events", b.token, `{"streamIds": ["heart"], "type": "series:mass/kg", "time": 1000}`)
	require.Equal(t, http.StatusCreated, a.status, a.body)
	b.event = a.object("event")["id"].(string)
	a = b.do(t, "POST", "/alice/accesses", b.token, `{"name": "reader", "permissions": [{"streamId": "heart", "level": "read"}]}`)
	require.Equal(t, http.StatusCreated, a.status, a.body)
	b.reader = a.object("access")["token"].(string)

	serverTC, clientTC := testCert(t)
	ln, err := tls.Listen("tcp", "127.0.0.1:0", serverTC)
	require.NoError(t, err)
	require.NoError(t, broker.Serve(ln))
	t.Cleanup(func() { _ = broker.Close() })
	b.addr, b.clientTC = ln.Addr().String(), clientTC
	return b
}

// points reads the points of the series, as HTTP answers them.
func (b *mqttBundle) points(t *testing.T) []any {
	t.Helper()
	a := b.do(t, "GET", "/alice/events/"+b.event+"/series", b.token, "")
	require.Equal(t, http.StatusOK, a.status, a.body)
	p, _ := a.body["points"].([]any)
	return p
}

// pahoConnect connects an MQTT 3.1.1 client (paho) over TLS.
func (b *mqttBundle) pahoConnect(t *testing.T, user, token, clientID string) (paho.Client, error) {
	t.Helper()
	o := paho.NewClientOptions().AddBroker("tls://" + b.addr).SetTLSConfig(b.clientTC).
		SetUsername(user).SetPassword(token).SetClientID(clientID).SetAutoReconnect(false).
		SetConnectTimeout(10 * time.Second).SetProtocolVersion(4)
	c := paho.NewClient(o)
	tok := c.Connect()
	if !tok.WaitTimeout(15 * time.Second) {
		return nil, errors.New("connect timed out")
	}
	if tok.Error() != nil {
		return nil, tok.Error()
	}
	t.Cleanup(func() { c.Disconnect(100) })
	return c, nil
}

func waitToken(t *testing.T, tok paho.Token) {
	t.Helper()
	require.True(t, tok.WaitTimeout(30*time.Second), "no answer")
	require.NoError(t, tok.Error())
}

func TestMQTTSeries311(t *testing.T) {
	t.Parallel()
	b := mqttSetup(t)
	topic := "alice/events/" + b.event + "/series"

	// TLS only: a plain MQTT client gets no CONNACK.
	plain := paho.NewClient(paho.NewClientOptions().AddBroker("tcp://" + b.addr).SetUsername("alice").
		SetPassword(b.token).SetAutoReconnect(false).SetConnectTimeout(3 * time.Second))
	tok := plain.Connect()
	tok.WaitTimeout(10 * time.Second)
	require.Error(t, tok.Error())

	// A wrong password, a wrong user, no password: refused.
	for _, c := range []struct{ user, token string }{{"alice", "not-a-token"}, {"bobby", b.token}, {"alice", ""}} {
		_, err := b.pahoConnect(t, c.user, c.token, "x")
		require.Error(t, err, c)
		require.Contains(t, err.Error(), "bad user name or password", c)
	}

	c, err := b.pahoConnect(t, "alice", b.token, "sensor-1")
	require.NoError(t, err)
	// flatJSON and CSV, QoS 1 and 0; the points are there once PUBACK came.
	waitToken(t, c.Publish(topic, 1, false, `{"format":"flatJSON","fields":["deltaTime","value"],"points":[[0,70.25],[1,70.5]]}`))
	waitToken(t, c.Publish(topic, 1, false, "deltaTime,value\n2,71\n3,71.5\n"))
	require.Equal(t, []any{[]any{0.0, 70.25}, []any{1.0, 70.5}, []any{2.0, 71.0}, []any{3.0, 71.5}}, b.points(t))
	batch := `{"format":"seriesBatch","data":[{"eventId":"` + b.event + `","data":{"format":"flatJSON","fields":["deltaTime","value"],"points":[[4,72]]}}]}`
	waitToken(t, c.Publish("alice/series/batch", 1, false, batch))
	require.Len(t, b.points(t), 5)

	// Subscriptions: only the client's own error topic.
	st := c.Subscribe("alice/events/#", 1, nil)
	waitToken(t, st)
	require.Equal(t, byte(0x80), st.(*paho.SubscribeToken).Result()["alice/events/#"])
	st = c.Subscribe("alice/errors/other-client", 1, nil)
	waitToken(t, st)
	require.Equal(t, byte(0x80), st.(*paho.SubscribeToken).Result()["alice/errors/other-client"])
	errs := make(chan []byte, 10)
	st = c.Subscribe(server.MQTTErrorTopic("alice", "sensor-1"), 1, func(_ paho.Client, m paho.Message) { errs <- m.Payload() })
	waitToken(t, st)
	require.Equal(t, byte(1), st.(*paho.SubscribeToken).Result()[server.MQTTErrorTopic("alice", "sensor-1")])

	// A will is not published: it could only reach an error topic, as a false error.
	w := b.v5Dial(t)
	w.send(t, packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Connect}, ProtocolVersion: 5,
		Connect: packets.ConnectParams{ProtocolName: []byte("MQTT"), Clean: true, Keepalive: 60, ClientIdentifier: "willer",
			UsernameFlag: true, Username: []byte("alice"), PasswordFlag: true, Password: []byte(b.token),
			WillFlag: true, WillTopic: server.MQTTErrorTopic("alice", "sensor-1"), WillPayload: []byte(`{"error":{"id":"fake"}}`)}})
	pk, err := w.read(t, 30*time.Second)
	require.NoError(t, err)
	require.Equal(t, packets.CodeSuccess.Code, pk.ReasonCode)
	require.NoError(t, w.c.Close()) // gone without DISCONNECT: a will would be sent now
	select {
	case raw := <-errs:
		t.Fatalf("a will reached an error topic: %s", raw)
	case <-time.After(time.Second):
	}

	// Refused messages are acknowledged (3.1.1 has no reason code) and answered on the error
	// topic; the connection goes on.
	for _, r := range []struct {
		topic, body string
		id          string
		code        byte
	}{
		{topic, `{"format":"flatJSON","fields":["deltaTime","value"],"points":[[5,`, "invalid-request-structure", 0x99},
		{topic, `{"format":"flatJSON","fields":["deltaTime","value"],"points":[[5,"heavy"]]}`, "invalid-request-structure", 0x99},
		{topic, "deltaTime,value\n5,\"unclosed\n", "invalid-request-structure", 0x99},
		{"alice/events/nosuchevent/series", `{"format":"flatJSON","fields":["deltaTime","value"],"points":[[5,1]]}`, "unknown-resource", 0x90},
		{"alice/profile", `{}`, "invalid-topic", 0x90},
		{"bobby/events/" + b.event + "/series", `{"format":"flatJSON","fields":["deltaTime","value"],"points":[[5,1]]}`, "forbidden", 0x87},
	} {
		waitToken(t, c.Publish(r.topic, 1, false, r.body))
		select {
		case raw := <-errs:
			var m struct {
				Topic      string
				ReasonCode byte
				Error      struct{ ID, Message string }
			}
			require.NoError(t, json.Unmarshal(raw, &m), string(raw))
			require.Equal(t, r.topic, m.Topic)
			require.Equal(t, r.id, m.Error.ID, m.Error.Message)
			require.Equal(t, r.code, m.ReasonCode)
			require.NotEmpty(t, m.Error.Message)
		case <-time.After(30 * time.Second):
			t.Fatalf("no error message for %s %s", r.topic, r.body)
		}
	}
	require.True(t, c.IsConnectionOpen())
	require.Len(t, b.points(t), 5, "nothing refused was stored")

	// A token that may only read: every series message refused, the connection kept.
	rc, err := b.pahoConnect(t, "alice", b.reader, "reader-1")
	require.NoError(t, err)
	rerrs := make(chan []byte, 10)
	waitToken(t, rc.Subscribe(server.MQTTErrorTopic("alice", "reader-1"), 0, func(_ paho.Client, m paho.Message) { rerrs <- m.Payload() }))
	for _, tp := range []string{topic, "alice/series/batch"} {
		body := `{"format":"flatJSON","fields":["deltaTime","value"],"points":[[9,1]]}`
		if tp == "alice/series/batch" {
			body = batch
		}
		waitToken(t, rc.Publish(tp, 1, false, body))
		select {
		case raw := <-rerrs:
			require.Contains(t, string(raw), `"id":"forbidden"`)
		case <-time.After(30 * time.Second):
			t.Fatal("no error message for the reader's publish")
		}
	}
	require.Len(t, b.points(t), 5)
}

// v5conn is a bare MQTT 5 client made of mochi's packet codecs: paho.mqtt.golang speaks 3.1.1
// only, and the reason codes are MQTT 5's.
type v5conn struct {
	c net.Conn
	r *bufio.Reader
}

func (b *mqttBundle) v5Dial(t *testing.T) *v5conn {
	t.Helper()
	c, err := tls.Dial("tcp", b.addr, b.clientTC)
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	return &v5conn{c: c, r: bufio.NewReader(c)}
}

func (v *v5conn) send(t *testing.T, pk packets.Packet) {
	t.Helper()
	var buf bytes.Buffer
	var err error
	switch pk.FixedHeader.Type {
	case packets.Connect:
		err = pk.ConnectEncode(&buf)
	case packets.Publish:
		err = pk.PublishEncode(&buf)
	}
	require.NoError(t, err)
	_, err = v.c.Write(buf.Bytes())
	require.NoError(t, err)
}

// read reads the next packet (io.EOF or a timeout as the error).
func (v *v5conn) read(t *testing.T, wait time.Duration) (packets.Packet, error) {
	t.Helper()
	_ = v.c.SetReadDeadline(time.Now().Add(wait))
	hb, err := v.r.ReadByte()
	if err != nil {
		return packets.Packet{}, err
	}
	pk := packets.Packet{ProtocolVersion: 5}
	require.NoError(t, pk.FixedHeader.Decode(hb))
	n, _, err := packets.DecodeLength(v.r)
	require.NoError(t, err)
	pk.FixedHeader.Remaining = n
	body := make([]byte, n)
	_, err = io.ReadFull(v.r, body)
	require.NoError(t, err)
	switch pk.FixedHeader.Type {
	case packets.Connack:
		require.NoError(t, pk.ConnackDecode(body))
	case packets.Puback:
		require.NoError(t, pk.PubackDecode(body))
	case packets.Disconnect:
		require.NoError(t, pk.DisconnectDecode(body))
	case packets.Publish:
		require.NoError(t, pk.PublishDecode(body))
	}
	return pk, nil
}

func (v *v5conn) connect(t *testing.T, user, token string) packets.Packet {
	t.Helper()
	v.send(t, packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Connect}, ProtocolVersion: 5,
		Connect: packets.ConnectParams{ProtocolName: []byte("MQTT"), Clean: true, Keepalive: 60, ClientIdentifier: "v5-" + user,
			UsernameFlag: true, Username: []byte(user), PasswordFlag: token != "", Password: []byte(token)}})
	pk, err := v.read(t, 30*time.Second)
	require.NoError(t, err)
	require.Equal(t, packets.Connack, pk.FixedHeader.Type)
	return pk
}

func (v *v5conn) publish(t *testing.T, id uint16, topic, contentType, body string, user ...packets.UserProperty) {
	t.Helper()
	v.send(t, packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Publish, Qos: 1}, ProtocolVersion: 5,
		PacketID: id, TopicName: topic, Payload: []byte(body), Properties: packets.Properties{ContentType: contentType, User: user}})
}

// puback publishes and returns the PUBACK's reason code and reason string.
func (v *v5conn) puback(t *testing.T, id uint16, topic, contentType, body string, user ...packets.UserProperty) (byte, string) {
	t.Helper()
	v.publish(t, id, topic, contentType, body, user...)
	pk, err := v.read(t, 30*time.Second)
	require.NoError(t, err)
	require.Equal(t, packets.Puback, pk.FixedHeader.Type, "%+v", pk)
	require.Equal(t, id, pk.PacketID)
	return pk.ReasonCode, pk.Properties.ReasonString
}

func TestMQTTSeries5(t *testing.T) {
	t.Parallel()
	b := mqttSetup(t)
	topic := "alice/events/" + b.event + "/series"

	require.Equal(t, packets.ErrBadUsernameOrPassword.Code, b.v5Dial(t).connect(t, "alice", "wrong").ReasonCode)
	require.Equal(t, packets.ErrBadUsernameOrPassword.Code, b.v5Dial(t).connect(t, "alice", "").ReasonCode)

	v := b.v5Dial(t)
	require.Equal(t, packets.CodeSuccess.Code, v.connect(t, "alice", b.token).ReasonCode)
	code, _ := v.puback(t, 1, topic, "", `{"format":"flatJSON","fields":["deltaTime","value"],"points":[[0,1.5],[1,2.5]]}`)
	require.Less(t, code, byte(0x80))
	code, _ = v.puback(t, 2, topic, "text/csv", "deltaTime,value\n2,3.5\n")
	require.Less(t, code, byte(0x80))
	require.Len(t, b.points(t), 3)

	for i, r := range []struct {
		topic, ctype, body string
		code               byte
		reason             string
	}{
		{topic, "", `{"format":"flatJSON"`, 0x99, "invalid-request-structure"},
		{topic, "", `{"format":"flatJSON","fields":["deltaTime","value"],"points":[[3,"x"]]}`, 0x99, "field value must be a number"},
		{topic, "application/json", "deltaTime,value\n3,1\n", 0x99, "invalid-request-structure"},
		{"alice/events/nosuchevent/series", "", `{"format":"flatJSON","fields":["deltaTime","value"],"points":[[3,1]]}`, 0x90, "unknown-resource"},
		{"alice/events/" + b.event, "", `{}`, 0x90, "invalid-topic"},
		{"bobby/series/batch", "", `{"format":"seriesBatch","data":[]}`, 0x87, "forbidden"},
		{"$SYS/alice/series/batch", "", `{}`, 0x90, "reserved"},
		{"$share/g/alice/series/batch", "", `{}`, 0x90, "invalid-topic"},
	} {
		code, reason := v.puback(t, uint16(10+i), r.topic, r.ctype, r.body)
		require.Equal(t, r.code, code, "%s %s: %s", r.topic, r.body, reason)
		require.Contains(t, reason, r.reason)
	}
	require.Len(t, b.points(t), 3, "nothing refused was stored")
	code, _ = v.puback(t, 30, topic, "", `{"format":"flatJSON","fields":["deltaTime","value"],"points":[[3,4.5]]}`)
	require.Less(t, code, byte(0x80), "the connection goes on after refusals")

	// An idempotency key (user property): repeated with the same body, answered again; with
	// another body, refused.
	key := packets.UserProperty{Key: "idempotency-key", Val: "reading-42"}
	for i := range 2 {
		code, reason := v.puback(t, uint16(40+i), topic, "", `{"format":"flatJSON","fields":["deltaTime","value"],"points":[[4,5.5]]}`, key)
		require.Less(t, code, byte(0x80), reason)
	}
	code, reason := v.puback(t, 42, topic, "", `{"format":"flatJSON","fields":["deltaTime","value"],"points":[[4,6.5]]}`, key)
	require.Equal(t, packets.ErrImplementationSpecificError.Code, code)
	require.Contains(t, reason, "idempotency-key-reused")
	require.Len(t, b.points(t), 5)
	require.Equal(t, []any{4.0, 5.5}, b.points(t)[4])

	// The reader's token: not authorized, per message, on both topics.
	rv := b.v5Dial(t)
	require.Equal(t, packets.CodeSuccess.Code, rv.connect(t, "alice", b.reader).ReasonCode)
	code, reason = rv.puback(t, 1, topic, "", `{"format":"flatJSON","fields":["deltaTime","value"],"points":[[8,1]]}`)
	require.Equal(t, packets.ErrNotAuthorized.Code, code, reason)
	code, reason = rv.puback(t, 2, "alice/series/batch", "", `{"format":"seriesBatch","data":[{"eventId":"`+b.event+`","data":{"format":"flatJSON","fields":["deltaTime","value"],"points":[[8,1]]}}]}`)
	require.Equal(t, packets.ErrNotAuthorized.Code, code, reason)
	require.Len(t, b.points(t), 5)

	// The metrics: messages and points applied, refusals by reason, connections.
	resp, err := http.Get(b.srv.URL + "/metrics")
	require.NoError(t, err)
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	for _, line := range []string{
		`silo_series_transport_messages_total{transport="mqtt"} 5`,
		`silo_series_transport_points_total{transport="mqtt"} 6`,
		`silo_series_transport_rejects_total{reason="forbidden",transport="mqtt"} 3`,
		`silo_series_transport_rejects_total{reason="invalid-topic",transport="mqtt"} 3`,
		`silo_series_transport_rejects_total{reason="invalid-request-structure",transport="mqtt"} 3`,
		`silo_series_transport_rejects_total{reason="unknown-resource",transport="mqtt"} 1`,
		`silo_mqtt_connections 1`, // the reader's connection took the first one's client id over
		`silo_mqtt_connects_total{result="ok"} 2`,
		`silo_mqtt_connects_total{result="refused"} 2`,
	} {
		require.Contains(t, string(raw), line+"\n")
	}
}

// PUBACK comes after the commit: while the write waits for a lock, no PUBACK; a broker that shuts
// down meanwhile acknowledges nothing, and the client's retry to another broker is acknowledged,
// the point stored once. (cmd/silo's TestMQTTKill kills the process instead.)
func TestMQTTAckAfterCommit(t *testing.T) {
	t.Parallel()
	b := mqttSetup(t)
	ctx := context.Background()
	topic := "alice/events/" + b.event + "/series"
	v := b.v5Dial(t)
	require.Equal(t, packets.CodeSuccess.Code, v.connect(t, "alice", b.token).ReasonCode)

	lock, err := b.pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = lock.Rollback(ctx) }()
	_, err = lock.Exec(ctx, `LOCK TABLE series.points, series.points1 IN ACCESS EXCLUSIVE MODE`)
	require.NoError(t, err)
	body := `{"format":"flatJSON","fields":["deltaTime","value"],"points":[[7,7.5]]}`
	v.publish(t, 1, topic, "", body)
	_, err = v.read(t, 500*time.Millisecond)
	var netErr net.Error
	require.True(t, errors.As(err, &netErr) && netErr.Timeout(), "no PUBACK before the commit: %v", err)

	// The broker shuts down while the write waits (Close waits for it: the lock goes meanwhile).
	// The client is disconnected without a PUBACK, though the write then commits.
	go func() {
		time.Sleep(300 * time.Millisecond)
		_ = lock.Rollback(ctx)
	}()
	require.NoError(t, b.broker.Close())
	for {
		pk, err := v.read(t, 10*time.Second)
		if err != nil {
			break // the connection is closed
		}
		require.NotEqual(t, packets.Puback, pk.FixedHeader.Type, "PUBACK on a connection the broker closed")
	}
	require.Equal(t, []any{[]any{7.0, 7.5}}, b.points(t), "stored, not acknowledged")

	// The client sends the message again, to a new broker: stored once, acknowledged.
	_, broker2, err := server.NewWithMQTT(server.Config{Pool: b.pool, Version: "test"})
	require.NoError(t, err)
	serverTC, clientTC := testCert(t)
	ln, err := tls.Listen("tcp", "127.0.0.1:0", serverTC)
	require.NoError(t, err)
	require.NoError(t, broker2.Serve(ln))
	t.Cleanup(func() { _ = broker2.Close() })
	b.addr, b.clientTC = ln.Addr().String(), clientTC
	v = b.v5Dial(t)
	require.Equal(t, packets.CodeSuccess.Code, v.connect(t, "alice", b.token).ReasonCode)
	code, _ := v.puback(t, 1, topic, "", body)
	require.Less(t, code, byte(0x80))
	require.Equal(t, []any{[]any{7.0, 7.5}}, b.points(t))
}

// A database that cannot be reached: CONNECT is answered "server unavailable" (MQTT 5 0x88,
// MQTT 3.1.1 return code 3), never "bad username or password".
func TestMQTTDatabaseUnavailable(t *testing.T) {
	t.Parallel()
	pool, err := pgxpool.New(context.Background(), "postgres://silo@127.0.0.1:1/silo?connect_timeout=2")
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	_, broker, err := server.NewWithMQTT(server.Config{Pool: pool, Version: "test"})
	require.NoError(t, err)
	serverTC, clientTC := testCert(t)
	ln, err := tls.Listen("tcp", "127.0.0.1:0", serverTC)
	require.NoError(t, err)
	require.NoError(t, broker.Serve(ln))
	t.Cleanup(func() { _ = broker.Close() })
	b := &mqttBundle{addr: ln.Addr().String(), clientTC: clientTC}

	require.Equal(t, packets.ErrServerUnavailable.Code, b.v5Dial(t).connect(t, "alice", "some-token").ReasonCode)
	_, err = b.pahoConnect(t, "alice", "some-token", "x")
	require.Error(t, err)
	require.Contains(t, strings.ToLower(err.Error()), "server unavailable")
}

// The database goes away while a client is connected: its message is not acknowledged, the
// client is disconnected with "server busy" (MQTT 5), and its retry once the database is back is
// acknowledged and stored.
func TestMQTTDatabaseLost(t *testing.T) {
	t.Parallel()
	b := mqttSetup(t)
	ctx := context.Background()
	topic := "alice/events/" + b.event + "/series"
	var name string
	require.NoError(t, b.pool.QueryRow(ctx, `SELECT current_database()`).Scan(&name))
	admin, err := pgx.Connect(ctx, dbtest.URL(t)) // another database of the same server
	require.NoError(t, err)
	t.Cleanup(func() { admin.Close(ctx) })
	allow := func(on bool) {
		_, err := admin.Exec(ctx, fmt.Sprintf(`ALTER DATABASE %s ALLOW_CONNECTIONS %t`, pgx.Identifier{name}.Sanitize(), on))
		require.NoError(t, err)
	}

	v := b.v5Dial(t)
	require.Equal(t, packets.CodeSuccess.Code, v.connect(t, "alice", b.token).ReasonCode)
	allow(false)
	t.Cleanup(func() { allow(true) })
	_, err = admin.Exec(ctx, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1`, name)
	require.NoError(t, err)
	body := `{"format":"flatJSON","fields":["deltaTime","value"],"points":[[6,6.5]]}`
	v.publish(t, 1, topic, "", body)
	pk, err := v.read(t, 90*time.Second)
	require.NoError(t, err)
	require.Equal(t, packets.Disconnect, pk.FixedHeader.Type, "%+v", pk)
	require.Equal(t, packets.ErrServerBusy.Code, pk.ReasonCode)
	_, err = v.read(t, 10*time.Second)
	require.Error(t, err, "the connection is closed")
	// CONNECT while the database is away: server unavailable.
	require.Equal(t, packets.ErrServerUnavailable.Code, b.v5Dial(t).connect(t, "alice", b.token).ReasonCode)

	allow(true)
	v = b.v5Dial(t)
	require.Equal(t, packets.CodeSuccess.Code, v.connect(t, "alice", b.token).ReasonCode)
	code, _ := v.puback(t, 1, topic, "", body)
	require.Less(t, code, byte(0x80))
	require.Equal(t, []any{[]any{6.0, 6.5}}, b.points(t))
}
