package server

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/gpuctl/gpuctl/errs"
	"github.com/gpuctl/gpuctl/remoting/tlsrec"
	"github.com/gpuctl/gpuctl/remoting/wire"
	"github.com/gpuctl/gpuctl/remoting/worker/testclient"
)

// resumeAnswers is a session table that answers every resume with err.
type resumeAnswers struct{ err error }

func (r resumeAnswers) Create(context.Context, *net.TCPConn, *tlsrec.State, *wire.Hello) (string, error) {
	return "", errs.New(errs.FailedPrecondition, "", "no new sessions here")
}

func (r resumeAnswers) Resume(context.Context, *net.TCPConn, *tlsrec.State, *wire.Hello) error {
	return r.err
}

type movedTo string

func (m movedTo) Error() string   { return "moved to " + string(m) }
func (m movedTo) MovedTo() string { return string(m) }

// locations answers Locate from a table: session -> {addr, wait}.
type locations map[string][2]string

func (l locations) Locate(_ context.Context, id string) (string, string) { return l[id][0], l[id][1] }

// TestResumeFollowsTheLocator: a resume of a session this host does not
// run is answered from the locator: sent on to the host that runs it,
// told to wait while it is in an image, or refused as unknown; a session
// that moved away follows the locator when it names a live host, and the
// recorded move otherwise. The token is checked first, as for any resume.
func TestResumeFollowsTheLocator(t *testing.T) {
	loc := locations{
		"s-live0000000a": {"10.0.0.2:7070", ""},
		"s-image000000b": {"", "session waits in image img-1"},
	}
	for _, tc := range []struct {
		name    string
		resume  error
		id      string
		token   string
		locator Locator
		status  wire.Status
		message string
	}{
		{"unknown here, live elsewhere", errs.New(errs.NotFound, "", "no"), "s-live0000000a", testToken, loc, wire.StatusMoved, "10.0.0.2:7070"},
		{"unknown here, in an image", errs.New(errs.NotFound, "", "no"), "s-image000000b", testToken, loc, wire.StatusRefused, "session waits in image img-1"},
		{"unknown everywhere", errs.New(errs.NotFound, "", "no"), "s-nowhere0000c", testToken, loc, wire.StatusUnknownSession, ""},
		{"moved, registry knows better", movedTo("10.0.0.9:7070"), "s-live0000000a", testToken, loc, wire.StatusMoved, "10.0.0.2:7070"},
		{"moved, registry waits", movedTo("10.0.0.9:7070"), "s-image000000b", testToken, loc, wire.StatusMoved, "10.0.0.9:7070"},
		{"no locator", errs.New(errs.NotFound, "", "no"), "s-live0000000a", testToken, nil, wire.StatusUnknownSession, ""},
		{"wrong token", errs.New(errs.NotFound, "", "no"), "s-live0000000a", "forged", loc, wire.StatusBadToken, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			l := &Listener{Sessions: resumeAnswers{tc.resume}, Token: testToken, HandshakeTimeout: time.Second, Locate: tc.locator}
			done := make(chan error, 1)
			go func() { done <- l.Serve(ctx, ln) }()
			defer func() { cancel(); <-done }()
			cl, err := testclient.Dial(ln.Addr().String(), wire.Hello{Token: tc.token, Flags: wire.HelloResume, SessionID: tc.id, Secret: "00112233445566778899aabbccddeeff"}, 5*time.Second)
			if cl == nil || cl.Welcome == nil {
				t.Fatalf("no Welcome: %v", err)
			}
			defer cl.Close()
			if cl.Welcome.Status != tc.status || (tc.message != "" && cl.Welcome.Message != tc.message) {
				t.Errorf("Welcome %s %q, want %s %q", cl.Welcome.Status, cl.Welcome.Message, tc.status, tc.message)
			}
		})
	}
}
