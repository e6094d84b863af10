package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/guardkit/guardkit/guard"
	"github.com/guardkit/guardkit/internal/redistest"
)

// selfSigned writes a self-signed certificate for 127.0.0.1 and its key into dir and
// returns their paths.
func selfSigned(t *testing.T, dir string) (cert, key string) {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "guardkit test"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		IPAddresses:           []net.IP{net.ParseIP("127.0.0.1")},
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &k.PublicKey, k)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(k)
	if err != nil {
		t.Fatal(err)
	}
	cert, key = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if err := os.WriteFile(cert, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(key, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), 0o600); err != nil {
		t.Fatal(err)
	}
	return cert, key
}

// The TLS flags: a server that takes TLS only on its TLS port (and asks clients for
// certificates) is inspected with --tls-ca, --tls-cert and --tls-key; without them the
// command fails, saying it could not reach the server.
func TestTLS(t *testing.T) {
	dir := t.TempDir()
	cert, key := selfSigned(t, dir)
	srv := redistest.Start(t, redistest.TLS(cert, key, cert))
	l, err := guard.New(srv.Client(t), guard.Label("tls@web-3 pid 11"))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	le, err := l.Acquire(context.Background(), "secure:1")
	if err != nil {
		t.Fatal(err)
	}
	defer le.Release(context.Background())
	addr := srv.TLSAddr()
	out, errOut, code := guardkit(t, "", "--addr", addr, "--tls-ca", cert, "--tls-cert", cert, "--tls-key", key, "--timeout", "2s", "inspect", "secure:1")
	if code != 0 || !strings.Contains(out, "tls@web-3 pid 11") {
		t.Fatalf("inspect over TLS: status %d:\n%s%s", code, out, errOut)
	}
	_, errOut, code = guardkit(t, "", "--addr", addr, "--timeout", "1s", "inspect", "secure:1")
	if code == 0 {
		t.Fatalf("inspect of a TLS port without TLS succeeded: %s", errOut)
	}
	_, errOut, code = guardkit(t, "", "--addr", addr, "--tls-ca", cert, "--timeout", "1s", "inspect", "secure:1")
	if code == 0 {
		t.Fatalf("inspect without the client certificate the server asks for succeeded: %s", errOut)
	}
}
