package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	paho "github.com/eclipse/paho.mqtt.golang"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/silo-db/silo/db/dbtest"
)

// syncBuffer is a process's stderr, read while it runs.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// silo serve with its MQTT broker on TLS (the self-signed pair made in the data directory, its
// fingerprint logged), killed between a QoS 1 PUBLISH and its PUBACK: the point is stored at most
// once meanwhile, and the client's retry to the restarted process is acknowledged and stored once.
func TestMQTTKill(t *testing.T) {
	bin := buildSilo(t)
	dbURL := dbtest.URL(t)
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dbURL)
	require.NoError(t, err)
	defer conn.Close(ctx)
	var personal, token, event string
	require.NoError(t, conn.QueryRow(ctx, `SELECT access_id, token FROM api.account_user_create('alice')`).Scan(&personal, &token))
	_, err = conn.Exec(ctx, `SELECT api.account_stream_create($1, '{"id": "heart", "name": "Heart"}')`, personal)
	require.NoError(t, err)
	require.NoError(t, conn.QueryRow(ctx, `SELECT api.account_event_create($1, '{"streamIds": ["heart"], "type": "series:mass/kg", "time": 1000}') #>> '{event,id}'`, personal).Scan(&event))
	stored := func() []float64 {
		rows, err := conn.Query(ctx, `SELECT extract(epoch FROM p.at)::float8 FROM series.points_all p JOIN account.events e ON e.series_id = p.series_id WHERE e.id = $1`, event)
		require.NoError(t, err)
		at, err := pgx.CollectRows(rows, pgx.RowTo[float64])
		require.NoError(t, err)
		return at
	}

	dataDir, addr, mqttAddr := t.TempDir(), freeAddr(t), freeAddr(t)
	start := func() (*exec.Cmd, chan struct{}, *syncBuffer) {
		cmd := exec.Command(bin, "serve")
		cmd.Env = cleanEnv("DATABASE_URL="+dbURL, "SILO_ADDR="+addr, "SILO_MQTT_ADDR="+mqttAddr, "SILO_DATA_DIR="+dataDir)
		logs := &syncBuffer{}
		cmd.Stderr, cmd.Stdout = logs, logs
		require.NoError(t, cmd.Start())
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		t.Cleanup(func() {
			_ = cmd.Process.Kill()
			<-done
		})
		deadline := time.Now().Add(60 * time.Second)
		for !strings.Contains(logs.String(), "MQTT broker listening") {
			select {
			case <-done:
				t.Fatalf("silo serve ended:\n%s", logs.String())
			default:
			}
			require.True(t, time.Now().Before(deadline), "silo serve did not start:\n%s", logs.String())
			time.Sleep(50 * time.Millisecond)
		}
		return cmd, done, logs
	}
	srv, done, logs := start()

	// The self-signed certificate, and its fingerprint in the log.
	certPEM, err := os.ReadFile(filepath.Join(dataDir, "mqtt-cert.pem"))
	require.NoError(t, err)
	block, _ := pem.Decode(certPEM)
	require.NotNil(t, block)
	sum := sha256.Sum256(block.Bytes)
	require.Contains(t, logs.String(), fingerprintHex(sum[:]))
	roots := x509.NewCertPool()
	require.True(t, roots.AppendCertsFromPEM(certPEM))
	tc := &tls.Config{RootCAs: roots, ServerName: "localhost"}

	// The HTTP API answers too (the broker is an addition to it).
	resp, err := http.Get("http://" + addr + "/healthz")
	require.NoError(t, err)
	resp.Body.Close()

	// Plain TCP is refused: the listener speaks TLS only.
	raw, err := net.DialTimeout("tcp", mqttAddr, 5*time.Second)
	require.NoError(t, err)
	_, _ = raw.Write([]byte{0x10, 0x00})
	_ = raw.SetReadDeadline(time.Now().Add(5 * time.Second))
	n, _ := raw.Read(make([]byte, 4))
	raw.Close()
	require.Zero(t, n, "no CONNACK without TLS")

	opts := paho.NewClientOptions().AddBroker("tls://" + mqttAddr).SetTLSConfig(tc).SetClientID("kill-1").
		SetUsername("alice").SetPassword(token).SetCleanSession(false).SetAutoReconnect(true).
		SetConnectRetry(true).SetConnectRetryInterval(200 * time.Millisecond).SetMaxReconnectInterval(500 * time.Millisecond)
	client := paho.NewClient(opts)
	ct := client.Connect()
	require.True(t, ct.WaitTimeout(30*time.Second))
	require.NoError(t, ct.Error())
	defer client.Disconnect(100)

	// The write waits for a lock; the process is killed before it could answer.
	tx, err := conn.Begin(ctx)
	require.NoError(t, err)
	_, err = tx.Exec(ctx, `LOCK TABLE series.points, series.points1 IN ACCESS EXCLUSIVE MODE`)
	require.NoError(t, err)
	pub := client.Publish("alice/events/"+event+"/series", 1, false, `{"format":"flatJSON","fields":["deltaTime","value"],"points":[[5,80.5]]}`)
	require.False(t, pub.WaitTimeout(time.Second), "PUBACK before the commit")
	require.NoError(t, srv.Process.Kill())
	<-done
	require.NoError(t, tx.Rollback(ctx))
	time.Sleep(500 * time.Millisecond) // the killed process's transaction, if it goes on, ends
	require.LessOrEqual(t, len(stored()), 1, "stored at most once")

	// The client reconnects to the new process and sends the message again.
	start()
	require.True(t, pub.WaitTimeout(60*time.Second), "no PUBACK after the restart")
	require.NoError(t, pub.Error())
	require.Equal(t, []float64{1005}, stored())
}

// The self-signed pair is made once, also when several processes start at the same time on one
// data directory: all of them use the same certificate.
func TestMQTTSelfSignedOnce(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "data")
	cfg := config{dataDir: dir}
	prints, errs := make([]string, 6), make([]error, 6)
	var wg sync.WaitGroup
	for i := range prints {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tc, fp, _, err := mqttTLS(cfg)
			if err == nil && len(tc.Certificates) != 1 {
				err = os.ErrInvalid
			}
			prints[i], errs[i] = fp, err
		}()
	}
	wg.Wait()
	for i, fp := range prints {
		require.NoError(t, errs[i])
		require.Equal(t, prints[0], fp)
	}
	_, again, created, err := mqttTLS(cfg)
	require.NoError(t, err)
	require.False(t, created)
	require.Equal(t, prints[0], again)
	info, err := os.Stat(filepath.Join(dir, "mqtt-key.pem"))
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o600), info.Mode().Perm())
	left, err := filepath.Glob(filepath.Join(dir, "*.tmp"))
	require.NoError(t, err)
	require.Empty(t, left)
}
