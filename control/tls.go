package control

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/gpuctl/gpuctl/errs"
)

// TLS on the control API is plain crypto/tls: gpud serves --api over HTTPS
// when given a certificate, and every caller (gpuctl, a peer gpud pushing a
// migration) verifies it against a CA bundle it is given explicitly. The
// scheme follows the configuration, never the address: addresses stay
// HOST:PORT everywhere.

// ServerTLS loads gpud's certificate and key (PEM) for serving the API
// (and --listen, through package tlsrec). TLS 1.3 is the minimum: every caller is ours, so there is no older
// client to accommodate. A certificate that has already expired is refused
// here, at startup, rather than at every caller's handshake.
func ServerTLS(certFile, keyFile string, now time.Time) (*tls.Config, error) {
	if certFile == "" || keyFile == "" {
		return nil, errs.New(errs.InvalidArgument, "", "--tls-cert and --tls-key go together: pass both, or neither for plaintext")
	}
	pair, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, errs.Wrap(err, errs.InvalidArgument, "", "load --tls-cert %s and --tls-key %s (PEM certificate chain and its private key)", certFile, keyFile)
	}
	leaf := pair.Leaf
	if leaf == nil {
		if leaf, err = x509.ParseCertificate(pair.Certificate[0]); err != nil {
			return nil, errs.Wrap(err, errs.InvalidArgument, "", "parse --tls-cert %s", certFile)
		}
	}
	if now.After(leaf.NotAfter) {
		return nil, errs.New(errs.FailedPrecondition, "", "the certificate in --tls-cert %s expired at %s; renew it", certFile, leaf.NotAfter.UTC().Format(time.RFC3339))
	}
	return &tls.Config{MinVersion: tls.VersionTLS13, Certificates: []tls.Certificate{pair}}, nil
}

// ClientTLS builds the configuration a caller uses to reach a gpud that
// serves its API over TLS: the server's certificate must chain to a CA in
// caFile (PEM, one or more certificates). The name checked against the
// certificate is the host part of the address dialled, unless serverName
// overrides it.
func ClientTLS(caFile, serverName string) (*tls.Config, error) {
	b, err := os.ReadFile(caFile)
	if err != nil {
		return nil, errs.Wrap(err, errs.InvalidArgument, "", "read --tls-ca")
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(b) {
		return nil, errs.New(errs.InvalidArgument, "", "--tls-ca %s holds no PEM certificate; pass the CA certificate that signed gpud's certificate", caFile)
	}
	return &tls.Config{MinVersion: tls.VersionTLS13, RootCAs: pool, ServerName: serverName}, nil
}

// httpToHTTPS is what Go's HTTP server answers a plain request that
// arrives on its TLS port.
const httpToHTTPS = "Client sent an HTTP request to an HTTPS server"

// dialError turns a failed request into one line that says what to check.
// TLS failures get their own wording; anything else is "cannot reach".
func (c *Client) dialError(err error) error {
	host := errs.Host(c.addr)
	var (
		rec      tls.RecordHeaderError
		unknown  x509.UnknownAuthorityError
		hostname x509.HostnameError
		invalid  x509.CertificateInvalidError
		verify   *tls.CertificateVerificationError
	)
	switch {
	case errors.Is(err, http.ErrSchemeMismatch):
		return errs.New(errs.Unavailable, host, "answered in plain HTTP, not TLS: gpud there runs without --tls-cert; start it with --tls-cert and --tls-key, or drop --tls-ca to talk plain HTTP")
	case errors.As(err, &rec):
		return errs.New(errs.Unavailable, host, "does not speak TLS on this port; check that --host (or --to) is gpud's --api address and that gpud there runs with --tls-cert")
	case errors.As(err, &unknown):
		return errs.New(errs.Unavailable, host, "TLS handshake failed: certificate signed by unknown authority; pass the CA that signed gpud's certificate with --tls-ca")
	case errors.As(err, &hostname):
		return errs.New(errs.Unavailable, host, "TLS handshake failed: the certificate is not valid for %q (%s); reach gpud by a name or IP its certificate holds (gpuctl also takes --tls-server-name), or reissue the certificate", hostname.Host, certNames(hostname.Certificate))
	case errors.As(err, &invalid) && invalid.Reason == x509.Expired:
		return errs.New(errs.Unavailable, host, "TLS handshake failed: gpud's certificate is expired or not yet valid (valid %s to %s); renew it and check both hosts' clocks",
			invalid.Cert.NotBefore.UTC().Format(time.RFC3339), invalid.Cert.NotAfter.UTC().Format(time.RFC3339))
	case errors.As(err, &verify), errors.As(err, &invalid):
		return errs.New(errs.Unavailable, host, "TLS handshake failed: %s; check gpud's --tls-cert and the CA passed with --tls-ca", tlsReason(err))
	case c.tls != nil && strings.Contains(err.Error(), "tls: "):
		// Alerts from the server (a refused version, a bad message)
		// carry no exported type.
		return errs.New(errs.Unavailable, host, "TLS handshake failed: %s; gpud speaks TLS 1.3 only, with the certificate given by its --tls-cert", tlsReason(err))
	}
	return errs.Wrap(err, errs.Unavailable, host, "cannot reach gpud's API; is gpud running there with --api %s?", c.addr)
}

// tlsReason is the innermost part of a TLS error, without the request line
// that net/http puts in front of it.
func tlsReason(err error) string {
	s := err.Error()
	if i := strings.LastIndex(s, "x509: "); i >= 0 {
		return s[i+len("x509: "):]
	}
	if i := strings.LastIndex(s, "tls: "); i >= 0 {
		return s[i+len("tls: "):]
	}
	return s
}

// certNames lists the names and addresses a certificate is valid for.
func certNames(cert *x509.Certificate) string {
	if cert == nil {
		return "no certificate"
	}
	var names []string
	names = append(names, cert.DNSNames...)
	for _, ip := range cert.IPAddresses {
		names = append(names, ip.String())
	}
	if len(names) == 0 {
		return "it names no host"
	}
	return fmt.Sprintf("it is for %s", strings.Join(names, ", "))
}
