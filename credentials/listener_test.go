package credentials_test

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/rdmarpc/rdmarpc/credentials"
)

func listen(t *testing.T, creds credentials.TransportCredentials, o credentials.ListenerOptions) *credentials.Listener {
	t.Helper()
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := credentials.NewListener(inner, creds, o)
	t.Cleanup(func() { l.Close() })
	return l
}

// dialTLS runs a client handshake to l, returning its error.
func dialTLS(t *testing.T, l *credentials.Listener, creds credentials.TransportCredentials) (net.Conn, error) {
	t.Helper()
	raw, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	conn, _, err := creds.ClientHandshake(context.Background(), "kv.test:7070", raw)
	return conn, err
}

// A plaintext client and a client that distrusts the server's certificate
// are refused, with the reason logged, and the listener goes on to accept
// a good client (issue 11 item 9).
func TestListenerKeepsServingAfterBadClients(t *testing.T) {
	ca, other := newCA(t, "test CA"), newCA(t, "other CA")
	core, logs := observer.New(zap.WarnLevel)
	refused := make(chan struct{}, 8)
	log := zap.New(core, zap.Hooks(func(zapcore.Entry) error { refused <- struct{}{}; return nil }))
	l := listen(t, serverCreds(t, ca, "kv.test"), credentials.ListenerOptions{Logger: log})

	// Plaintext: the server closes the connection after its failed handshake.
	raw, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := raw.Write([]byte("hello in the clear\r\n\r\n")); err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, raw)
	raw.Close()
	// A client that does not trust the server.
	if _, err := dialTLS(t, l, credentials.NewClientTLSFromCert(other.pool(), "")); err == nil {
		t.Fatal("a client that trusts another CA completed the handshake")
	}
	// A good client: its handshake completes before anyone calls Accept.
	cc, err := dialTLS(t, l, credentials.NewClientTLSFromCert(ca.pool(), ""))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	sc, err := l.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer sc.Close()
	info, ok := credentials.AuthInfoFromConn(sc)
	if !ok || info.AuthType() != "tls" {
		t.Fatalf("accepted connection's AuthInfo: %v, %v", info, ok)
	}
	go cc.Write([]byte("x"))
	if _, err := io.ReadFull(sc, make([]byte, 1)); err != nil {
		t.Fatal(err)
	}

	<-refused
	<-refused
	var reasons []string
	for _, e := range logs.All() {
		reasons = append(reasons, e.ContextMap()["error"].(string))
	}
	if len(reasons) != 2 || !strings.Contains(strings.Join(reasons, "\n"), "does not look like a TLS handshake") {
		t.Fatalf("logged refusals %q, want the plaintext one and the distrusted one", reasons)
	}
	l.Close()
	if _, err := l.Accept(); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("Accept after Close: %v", err)
	}
}

// A client that connects and says nothing holds up no other.
func TestListenerSilentClientBlocksNoOne(t *testing.T) {
	ca := newCA(t, "test CA")
	l := listen(t, serverCreds(t, ca, "kv.test"), credentials.ListenerOptions{HandshakeTimeout: time.Hour})
	silent, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	cc, err := dialTLS(t, l, credentials.NewClientTLSFromCert(ca.pool(), ""))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	sc, err := l.Accept()
	if err != nil {
		t.Fatal(err)
	}
	sc.Close()
}

// A client that says nothing is cut off when its handshake time is up.
func TestListenerHandshakeTimeout(t *testing.T) {
	ca := newCA(t, "test CA")
	l := listen(t, serverCreds(t, ca, "kv.test"), credentials.ListenerOptions{HandshakeTimeout: 50 * time.Millisecond})
	silent, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	// The server closes the connection (the listener is still open): the
	// read returns rather than blocking for ever.
	_, _ = io.Copy(io.Discard, silent)
}

// Close ends handshakes in progress and drops connections nobody accepted;
// goleak (TestMain) sees every goroutine gone.
func TestListenerCloseEndsEverything(t *testing.T) {
	ca := newCA(t, "test CA")
	l := listen(t, credentials.NewTLS(&tls.Config{Certificates: []tls.Certificate{ca.issue(t, leafOpts{cn: "kv.test", dnsNames: []string{"kv.test"}}).tls}}), credentials.ListenerOptions{})
	silent, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	// A handshaken connection no one accepts.
	cc, err := dialTLS(t, l, credentials.NewClientTLSFromCert(ca.pool(), ""))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(io.Discard, silent); err != nil {
		t.Fatalf("silent connection: %v", err)
	}
	if _, err := cc.Read(make([]byte, 1)); err == nil {
		t.Fatal("the unaccepted connection is still open")
	}
}
