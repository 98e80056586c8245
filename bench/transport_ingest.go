package main

// Workload 9: series over the other transports (SILO_BENCH_ONLY=transport). One in-process Silo
// (HTTP API with its change hub, and the MQTT broker on TLS with a self-signed certificate) takes
// the same 1,000-point flatJSON bodies from transportClients clients, each on its own series, each
// waiting for every answer before it sends the next:
//   - HTTP: POST /{username}/events/{id}/series (the reference, measured in the same runs);
//   - MQTT over TLS, QoS 1 (paho, MQTT 3.1.1): a message is counted when its PUBACK came, which
//     Silo sends after the commit;
//   - websocket: series.append messages on GET /{username}/ws, counted when acknowledged.
// Targets: MQTT and websocket each ≥ 0.8× HTTP.

import (
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
	"log"
	"log/slog"
	"math/big"
	mrand "math/rand/v2"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"
	"github.com/gorilla/websocket"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/silo-db/silo/change"
	"github.com/silo-db/silo/server"
)

const (
	transportClients = 4
	transportEach    = 30 // messages per client per run
	transportRatioTo = 0.8
)

func init() {
	register(workload{order: 110, only: []string{"transport"}, run: transportWorkload})
}

// transportWork makes transportClients × transportEach bodies of 1,000 points; client c writes
// series c, and key picks a time range of its own (a run and a transport never overwrite points).
func (sb *seriesBench) transportWork(key int) [][]seriesReq {
	work := make([][]seriesReq, transportClients)
	for c := range work {
		f := &feed{rng: mrand.New(mrand.NewPCG(uint64(key), uint64(c))), v: 2000}
		for r := range transportEach {
			var b strings.Builder
			var rows [][]any
			sb.flatPoints(&b, &rows, sb.series[c], f, key*10000000+r*1000, 1000)
			work[c] = append(work[c], seriesReq{path: "/" + sb.user + "/events/" + sb.holders[c] + "/series", body: []byte(b.String()), rows: rows})
		}
	}
	return work
}

// benchTLS is a self-signed certificate for 127.0.0.1 and a client configuration trusting it.
func benchTLS() (*tls.Config, *tls.Config, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "bench"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true, IsCA: true, IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, nil, err
	}
	roots := x509.NewCertPool()
	roots.AddCert(cert)
	return &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}}},
		&tls.Config{RootCAs: roots, ServerName: "127.0.0.1"}, nil
}

func transportWorkload(ctx context.Context, bn *bench, rp *report) error {
	sb, err := seriesSetup(ctx, bn)
	if err != nil {
		return err
	}
	hub := change.NewHub(change.Config{Pool: bn.silo, Logger: slog.New(slog.DiscardHandler)})
	if err := hub.Start(ctx); err != nil {
		return err
	}
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		_ = hub.Stop(sctx)
	}()
	handler, broker, err := server.NewWithMQTT(server.Config{Pool: bn.silo, Logger: slog.New(slog.DiscardHandler),
		Version: "bench", Registry: prometheus.NewRegistry(), Hub: hub})
	if err != nil {
		return err
	}
	httpLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: handler, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(httpLn) }()
	defer func() { _ = srv.Close() }()
	serverTC, clientTC, err := benchTLS()
	if err != nil {
		return err
	}
	mqttLn, err := tls.Listen("tcp", "127.0.0.1:0", serverTC)
	if err != nil {
		return err
	}
	if err := broker.Serve(mqttLn); err != nil {
		return err
	}
	defer func() { _ = broker.Close() }()
	for deadline := time.Now().Add(30 * time.Second); !hub.Ready(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			return errors.New("the change hub did not get ready")
		}
	}
	base := "http://" + httpLn.Addr().String()

	// The clients, connected once: MQTT and websocket connections live across runs as a
	// gateway's would; HTTP keeps its connections alive.
	mqttClients := make([]paho.Client, transportClients)
	for c := range mqttClients {
		o := paho.NewClientOptions().AddBroker("tls://" + mqttLn.Addr().String()).SetTLSConfig(clientTC).
			SetClientID(fmt.Sprintf("bench-%d", c)).SetUsername(sb.user).SetPassword(sb.token).
			SetAutoReconnect(false).SetWriteTimeout(time.Minute)
		mqttClients[c] = paho.NewClient(o)
		if t := mqttClients[c].Connect(); !t.WaitTimeout(30*time.Second) || t.Error() != nil {
			return fmt.Errorf("MQTT connect: %v", t.Error())
		}
		defer mqttClients[c].Disconnect(100)
	}
	wsConns := make([]*websocket.Conn, transportClients)
	for c := range wsConns {
		conn, resp, err := websocket.DefaultDialer.Dial("ws"+strings.TrimPrefix(base, "http")+"/"+sb.user+"/ws?channel=account:"+sb.user+":streams",
			http.Header{"Authorization": {sb.token}})
		if err != nil {
			return fmt.Errorf("websocket dial: %w", err)
		}
		resp.Body.Close()
		defer conn.Close()
		wsConns[c] = conn
	}
	// Which client sent a request: the websocket and MQTT sends know it by the feed's series.
	clientOf := map[string]int{}
	for c := range transportClients {
		clientOf["/"+sb.user+"/events/"+sb.holders[c]+"/series"] = c
	}
	var wsSeq [transportClients]int // each client's sends are sequential: a counter per client

	httpPost := func(r seriesReq) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+r.path, strings.NewReader(string(r.body)))
		if err != nil {
			return err
		}
		req.Header.Set("Authorization", sb.token)
		req.Header.Set("Content-Type", "application/json")
		resp, err := bn.client.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("POST %s: %d", r.path, resp.StatusCode)
		}
		return nil
	}
	mqttPublish := func(r seriesReq) error {
		c := clientOf[r.path]
		t := mqttClients[c].Publish(strings.TrimPrefix(r.path, "/"), 1, false, r.body)
		if !t.WaitTimeout(time.Minute) {
			return errors.New("MQTT: no PUBACK within a minute")
		}
		return t.Error()
	}
	wsAppend := func(r seriesReq) error {
		c := clientOf[r.path]
		conn := wsConns[c]
		wsSeq[c]++
		id := strconv.Itoa(wsSeq[c])
		event := sb.holders[c]
		msg := make([]byte, 0, len(r.body)+128)
		msg = append(msg, `{"type":"series.append","id":"`+id+`","eventId":"`+event+`","body":`...)
		msg = append(msg, r.body...)
		msg = append(msg, '}')
		if err := conn.WriteMessage(websocket.TextMessage, msg); err != nil {
			return err
		}
		_ = conn.SetReadDeadline(time.Now().Add(time.Minute))
		for {
			var m struct {
				Type  string
				ID    json.RawMessage
				Error json.RawMessage
			}
			if err := conn.ReadJSON(&m); err != nil {
				return err
			}
			switch m.Type {
			case "ack":
				return nil
			case "error":
				return fmt.Errorf("websocket append: %s", m.Error)
			}
		}
	}

	var work [3][][]seriesReq
	name := fmt.Sprintf("series flatJSON, 1,000 points/message, %d clients", transportClients)
	log.Printf("%s: HTTP, MQTT (TLS, QoS 1), websocket ...", name)
	res, err := takeTurns(runs, 1,
		func(run int) error {
			for k := range work {
				work[k] = sb.transportWork(run*3 + k + 1)
			}
			_, err := bn.raw.Exec(ctx, `TRUNCATE series.points, series.points1, series.pending_updates`)
			return err
		},
		func() (float64, error) { return seriesRate(work[0], httpPost) },
		func() (float64, error) { return seriesRate(work[1], mqttPublish) },
		func() (float64, error) { return seriesRate(work[2], wsAppend) })
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	rp.throughput("MQTT TLS QoS 1, "+name, "pt/s", "pt/s (HTTP)", res[1], res[0], 0, 0)
	rp.throughput("websocket appends, "+name, "pt/s", "pt/s (HTTP)", res[2], res[0], 0, 0)
	for _, f := range []struct {
		name string
		x    []float64
	}{{"MQTT", res[1]}, {"websocket", res[2]}} {
		ratio := median(f.x) / median(res[0])
		rp.notes = append(rp.notes, fmt.Sprintf("%s, %s: %.2f× HTTP (target ≥ %.1f×: %s)", f.name, name, ratio, transportRatioTo, verdict(ratio >= transportRatioTo)))
	}
	_, err = bn.raw.Exec(ctx, `TRUNCATE series.points, series.points1, series.pending_updates`)
	return err
}
