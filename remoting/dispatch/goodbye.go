package dispatch

import (
	"context"
	"errors"
	"fmt"
)

// ErrGoodbye ends Serve when the client said goodbye (wire.OpGoodbye):
// its program exited normally, after every request before the goodbye
// was executed. The session has no client to wait for: its owner ends it
// rather than keep it for a reconnect, as it would after a lost
// connection.
var ErrGoodbye = errors.New("dispatch: the client's program exited")

// doGoodbye ends the connection's Serve with ErrGoodbye. It is fatal to
// the connection, so nothing is read or answered after it; replies to
// the requests before it are flushed as Serve returns.
func (s *Session) doGoodbye(ctx context.Context, x *call) error {
	s.log.Debug("client said goodbye", "seq", x.h.Seq)
	return fmt.Errorf("%w: %w", errFatal, ErrGoodbye)
}
