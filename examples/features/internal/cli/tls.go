package cli

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"

	"github.com/rdmarpc/rdmarpc/credentials"
)

// ServerTLS are a server's TLS credentials from PEM files: its certificate
// and key, and, when clientCA is not "", mutual TLS (a client certificate
// signed by clientCA required).
func ServerTLS(certFile, keyFile, clientCA string) (credentials.TransportCredentials, error) {
	if certFile == "" || keyFile == "" {
		return nil, errors.New("TLS needs --cert and --key")
	}
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, err
	}
	cfg := &tls.Config{Certificates: []tls.Certificate{cert}}
	if clientCA != "" {
		if cfg.ClientCAs, err = pool(clientCA); err != nil {
			return nil, err
		}
		cfg.ClientAuth = tls.RequireAndVerifyClientCert
	}
	return credentials.NewTLS(cfg), nil
}

// ClientTLS are a client's TLS credentials: the server's certificate is
// checked against caFile (the system's roots when ""), for serverName
// (the target's host when ""); certFile and keyFile, when given, are the
// client's certificate for mutual TLS.
func ClientTLS(caFile, certFile, keyFile, serverName string) (credentials.TransportCredentials, error) {
	cfg := &tls.Config{ServerName: serverName}
	if caFile != "" {
		var err error
		if cfg.RootCAs, err = pool(caFile); err != nil {
			return nil, err
		}
	}
	if certFile != "" || keyFile != "" {
		cert, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			return nil, err
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	return credentials.NewTLS(cfg), nil
}

func pool(file string) (*x509.CertPool, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	p := x509.NewCertPool()
	if !p.AppendCertsFromPEM(b) {
		return nil, fmt.Errorf("%s: no PEM certificate", file)
	}
	return p, nil
}
