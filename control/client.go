package control

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/gpuctl/gpuctl/errs"
)

// Client calls one gpud's control API.
type Client struct {
	addr  string // HOST:PORT
	token string
	tls   *tls.Config // nil: plain HTTP
	http  *http.Client
}

// Option adjusts a Client.
type Option func(*Client)

// WithTLS makes the client speak HTTPS, verifying gpud's certificate with
// cfg (see ClientTLS). A nil cfg leaves the client on plain HTTP, so a
// caller can pass its configuration through whether or not TLS is on.
func WithTLS(cfg *tls.Config) Option {
	return func(c *Client) { c.tls = cfg }
}

// NewClient returns a client for the gpud whose --api address is addr.
func NewClient(addr, token string, opts ...Option) *Client {
	c := &Client{addr: addr, token: token}
	for _, o := range opts {
		o(c)
	}
	tr := &http.Transport{
		DialContext:         (&net.Dialer{Timeout: 5 * time.Second}).DialContext,
		MaxIdleConnsPerHost: 4,
		TLSHandshakeTimeout: 5 * time.Second,
	}
	if c.tls != nil {
		// The transport fills in ServerName from the address when the
		// configuration leaves it empty; cloning keeps the caller's copy
		// untouched.
		tr.TLSClientConfig = c.tls.Clone()
	}
	c.http = &http.Client{Transport: tr}
	return c
}

// Addr is the API address this client talks to.
func (c *Client) Addr() string { return c.addr }

// do sends a JSON request (in may be nil) and decodes a JSON reply into out
// (which may be nil). A failure to reach the host is errs.Unavailable and
// names the host.
func (c *Client) do(ctx context.Context, method, path string, in, out any) error {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return fmt.Errorf("encode request for %s: %w", path, err)
		}
		body = bytes.NewReader(b)
	}
	resp, err := c.stream(ctx, method, path, body, "application/json")
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if out == nil {
		_, _ = io.Copy(io.Discard, resp.Body)
		return nil
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		return errs.Wrap(err, errs.Internal, errs.Host(c.addr), "decode reply to %s", path)
	}
	return nil
}

// stream sends body as is and returns the successful response for the
// caller to read and close; a non-2xx response is returned as an error.
// It serves bulk transfers (image export and import, chunk pushes).
func (c *Client) stream(ctx context.Context, method, path string, body io.Reader, contentType string) (*http.Response, error) {
	scheme := "http://"
	if c.tls != nil {
		scheme = "https://"
	}
	req, err := http.NewRequestWithContext(ctx, method, scheme+c.addr+path, body)
	if err != nil {
		return nil, errs.Wrap(err, errs.InvalidArgument, errs.Host(c.addr), "build request")
	}
	req.Header.Set("Authorization", "Bearer "+c.token)
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, c.dialError(err)
	}
	if resp.StatusCode/100 != 2 {
		defer resp.Body.Close()
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		if c.tls == nil && resp.StatusCode == http.StatusBadRequest && strings.Contains(string(b), httpToHTTPS) {
			return nil, errs.New(errs.Unavailable, errs.Host(c.addr), "serves its API over TLS; pass the CA that signed its certificate with --tls-ca")
		}
		return nil, decodeError(resp.Status, b, errs.Host(c.addr))
	}
	return resp, nil
}
