package cluster

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"math/big"
	"net"
	"testing"
	"time"

	"github.com/gotp/gotp/gotptest"
)

// testTLS makes a CA and a certificate for 127.0.0.1 signed by it, and
// returns a config that serves it and verifies peers against the CA (for
// the embedded server's clients and routes, and for the client).
func testTLS(t testing.TB) *tls.Config {
	t.Helper()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	gotptest.Must(t, err)
	ca := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "gotp test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, ca, ca, &caKey.PublicKey, caKey)
	gotptest.Must(t, err)
	caCert, err := x509.ParseCertificate(caDER)
	gotptest.Must(t, err)
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	gotptest.Must(t, err)
	leaf := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "node"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, DNSNames: []string{"localhost"},
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, leaf, caCert, &key.PublicKey, caKey)
	gotptest.Must(t, err)
	pool := x509.NewCertPool()
	pool.AddCert(caCert)
	return &tls.Config{
		Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}},
		RootCAs:      pool, ClientCAs: pool, MinVersion: tls.VersionTLS12,
		ServerName: "localhost",
	}
}

func TestTLSRoutes(t *testing.T) {
	cfg := testTLS(t)
	oa := fastOpts(t)
	oa.TLS, oa.Token = cfg, "tok"
	a := startNode(t, "a", oa)
	ob := fastOpts(t)
	ob.TLS, ob.Token = cfg.Clone(), "tok"
	ob.Peers = []string{a.c.RouteURL()}
	b := startNode(t, "b", ob)
	waitMesh(t, []member{a, b})
	pidSink := gotptest.NewSink(t, b.n)
	pid, ch := pidSink.PID(), pidSink.C()
	a.n.Send(pid, "over tls")
	if got := gotptest.RecvWithin(t, 5*time.Second, ch); got != "over tls" {
		t.Fatalf("got %#v", got)
	}
	// A node without TLS cannot route to them.
	ox := fastOpts(t)
	ox.Token = "tok"
	ox.Peers = []string{a.c.RouteURL()}
	x := startNode(t, "x", ox)
	time.Sleep(2 * time.Second) // absence is the subject: give it time to fail
	for _, ni := range a.c.Nodes() {
		if ni.Name == "x" {
			t.Fatal("a node without TLS joined")
		}
	}
	if len(x.c.Nodes()) != 0 {
		t.Fatalf("x sees %v", x.c.Nodes())
	}
}
