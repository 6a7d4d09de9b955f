package control

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"

	"github.com/gpuctl/gpuctl/errs"
)

// Client calls one gpud's control API.
type Client struct {
	addr  string // HOST:PORT
	token string
	http  *http.Client
}

// NewClient returns a client for the gpud whose --api address is addr.
func NewClient(addr, token string) *Client {
	tr := &http.Transport{
		DialContext:         (&net.Dialer{Timeout: 5 * time.Second}).DialContext,
		MaxIdleConnsPerHost: 4,
	}
	return &Client{addr: addr, token: token, http: &http.Client{Transport: tr}}
}

// Addr is the API address this client talks to.
func (c *Client) Addr() string { return c.addr }

// Do sends a JSON request (in may be nil) and decodes a JSON reply into out
// (which may be nil). A failure to reach the host is errs.Unavailable and
// names the host.
func (c *Client) Do(ctx context.Context, method, path string, in, out any) error {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return fmt.Errorf("encode request for %s: %w", path, err)
		}
		body = bytes.NewReader(b)
	}
	resp, err := c.Stream(ctx, method, path, body, "application/json")
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

// Stream sends body as is and returns the successful response for the
// caller to read and close; a non-2xx response is returned as an error.
// It serves bulk transfers (image export and import, chunk pushes).
func (c *Client) Stream(ctx context.Context, method, path string, body io.Reader, contentType string) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, method, "http://"+c.addr+path, body)
	if err != nil {
		return nil, errs.Wrap(err, errs.InvalidArgument, errs.Host(c.addr), "build request")
	}
	req.Header.Set("Authorization", "Bearer "+c.token)
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, errs.Wrap(err, errs.Unavailable, errs.Host(c.addr), "cannot reach gpud's API; is gpud running there with --api %s?", c.addr)
	}
	if resp.StatusCode/100 != 2 {
		defer resp.Body.Close()
		return nil, decodeError(resp, errs.Host(c.addr))
	}
	return resp, nil
}
