package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// The MQTT broker's settings: SILO_MQTT_ADDR (default :8883, "off" for none), TLS with
// SILO_MQTT_CERT and SILO_MQTT_KEY, or else a self-signed pair made once in SILO_DATA_DIR; plain
// TCP only with SILO_MQTT_PLAIN=1 and a loopback address.

// loadMQTT reads the MQTT settings into cfg.
func (cfg *config) loadMQTT() error {
	cfg.mqttAddr = envOr("SILO_MQTT_ADDR", ":8883")
	if cfg.mqttAddr == "off" {
		cfg.mqttAddr = ""
	}
	cfg.mqttCert, cfg.mqttKey = os.Getenv("SILO_MQTT_CERT"), os.Getenv("SILO_MQTT_KEY")
	if (cfg.mqttCert == "") != (cfg.mqttKey == "") {
		return errors.New("SILO_MQTT_CERT and SILO_MQTT_KEY go together: set both (PEM files) or neither (a self-signed pair in SILO_DATA_DIR)")
	}
	switch v := os.Getenv("SILO_MQTT_PLAIN"); v {
	case "", "0", "false":
	case "1", "true":
		cfg.mqttPlain = true
	default:
		return fmt.Errorf("SILO_MQTT_PLAIN: 1 or true (plain TCP on a loopback address), or unset: %q", v)
	}
	if cfg.mqttPlain && cfg.mqttAddr != "" {
		host, _, err := net.SplitHostPort(cfg.mqttAddr)
		if err != nil {
			return fmt.Errorf("SILO_MQTT_ADDR=%q is not a listen address: want host:port, e.g. :8883 or 127.0.0.1:1883", cfg.mqttAddr)
		}
		ip := net.ParseIP(host)
		if host != "localhost" && (ip == nil || !ip.IsLoopback()) {
			return fmt.Errorf("SILO_MQTT_PLAIN=1 sends tokens and data unencrypted, which Silo allows on a loopback address only: set SILO_MQTT_ADDR to 127.0.0.1:<port> or [::1]:<port>, or unset SILO_MQTT_PLAIN to use TLS (SILO_MQTT_ADDR=%s)", cfg.mqttAddr)
		}
	}
	return nil
}

// mqttTLS returns the broker's TLS configuration and its certificate's SHA-256 fingerprint: the
// pair of SILO_MQTT_CERT and SILO_MQTT_KEY, or the self-signed pair in the data directory, made
// on first use (created says so).
func mqttTLS(cfg config) (tc *tls.Config, fingerprint string, created bool, err error) {
	certFile, keyFile := cfg.mqttCert, cfg.mqttKey
	if certFile == "" {
		certFile, keyFile = mqttSelfSignedFiles(cfg.dataDir)
		if _, err := os.Stat(certFile); errors.Is(err, os.ErrNotExist) {
			if err := writeSelfSigned(certFile, keyFile); err != nil {
				return nil, "", false, fmt.Errorf("error making the MQTT broker's self-signed certificate in %s: %w (set SILO_DATA_DIR to a writable directory, or SILO_MQTT_CERT and SILO_MQTT_KEY)", filepath.Dir(certFile), err)
			}
			created = true
		}
	}
	pair, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, "", false, fmt.Errorf("the MQTT broker's certificate (%s, %s) cannot be used: %w", certFile, keyFile, err)
	}
	sum := sha256.Sum256(pair.Certificate[0])
	return &tls.Config{Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12}, fingerprintHex(sum[:]), created, nil
}

// mqttSelfSignedFiles are the files of the self-signed pair in the data directory.
func mqttSelfSignedFiles(dataDir string) (cert, key string) {
	return filepath.Join(dataDir, "mqtt-cert.pem"), filepath.Join(dataDir, "mqtt-key.pem")
}

// fingerprintHex writes a digest as openssl x509 -fingerprint does: AA:BB:...
func fingerprintHex(sum []byte) string {
	h := strings.ToUpper(hex.EncodeToString(sum))
	var b strings.Builder
	for i := 0; i < len(h); i += 2 {
		if i > 0 {
			b.WriteByte(':')
		}
		b.WriteString(h[i : i+2])
	}
	return b.String()
}

// writeSelfSigned makes a self-signed ECDSA P-256 certificate for localhost, 127.0.0.1, ::1 and
// the machine's name, valid ten years, and its key (readable by its owner only).
func writeSelfSigned(certFile, keyFile string) error {
	if err := os.MkdirAll(filepath.Dir(certFile), 0o755); err != nil {
		return err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 120))
	if err != nil {
		return err
	}
	names := []string{"localhost"}
	if h, err := os.Hostname(); err == nil && h != "" && h != "localhost" {
		names = append(names, h)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: "Silo MQTT (self-signed)"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().AddDate(10, 0, 0),
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		IsCA:                  true, // so that clients can trust it as its own authority (mosquitto_pub --cafile)
		DNSNames:              names,
		IPAddresses:           []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return err
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return err
	}
	// Two processes sharing the data directory may both get here: each writes its pair under
	// names of its own, and the first to link its key into place wins; the other uses the
	// winner's pair. The key goes first, so a certificate on disk always has its key.
	keyTmp, err := writeTemp(keyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}), 0o600)
	if err != nil {
		return err
	}
	defer os.Remove(keyTmp)
	certTmp, err := writeTemp(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644)
	if err != nil {
		return err
	}
	defer os.Remove(certTmp)
	if err := os.Link(keyTmp, keyFile); err != nil {
		if !errors.Is(err, os.ErrExist) {
			return err
		}
		// Another process won: wait for its certificate.
		for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
			if _, err := os.Stat(certFile); err == nil {
				return nil
			}
		}
		return fmt.Errorf("%s exists without %s: remove it to have a new pair made", keyFile, certFile)
	}
	return os.Link(certTmp, certFile)
}

// writeTemp writes data to a new file beside name and returns its name.
func writeTemp(name string, data []byte, mode os.FileMode) (string, error) {
	f, err := os.CreateTemp(filepath.Dir(name), filepath.Base(name)+".*.tmp")
	if err != nil {
		return "", err
	}
	if err := f.Chmod(mode); err != nil {
		f.Close()
		os.Remove(f.Name())
		return "", err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		os.Remove(f.Name())
		return "", err
	}
	if err := f.Close(); err != nil {
		os.Remove(f.Name())
		return "", err
	}
	return f.Name(), nil
}
