package tenant

import (
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/gpuctl/gpuctl/errs"
)

// maxTokenBytes bounds a token file; a token is a line of text. The
// client handshake carries at most 512 bytes of it.
const maxTokenBytes = 512

// ReadTokenFile reads a token from path: the file's content without
// surrounding white space. It refuses a file that group or others may
// read or write, an empty one, and one longer than a token can be; each
// error is one line that names the file and says what to do. what names
// the token's role in the message ("host token", `tenant "alice"'s
// token`).
func ReadTokenFile(path, what string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", errs.Wrap(err, errs.InvalidArgument, "", "read the %s", what)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return "", errs.Wrap(err, errs.InvalidArgument, "", "read the %s", what)
	}
	if err := CheckPrivate(path, st.Mode()); err != nil {
		return "", err
	}
	if !st.Mode().IsRegular() {
		return "", errs.New(errs.InvalidArgument, "", "%s file %s is not a regular file", what, path)
	}
	b, err := io.ReadAll(io.LimitReader(f, maxTokenBytes+2))
	if err != nil {
		return "", errs.Wrap(err, errs.InvalidArgument, "", "read the %s from %s", what, path)
	}
	tok := strings.TrimSpace(string(b))
	switch {
	case tok == "":
		return "", errs.New(errs.InvalidArgument, "", "%s file %s is empty", what, path)
	case len(tok) > maxTokenBytes:
		return "", errs.New(errs.InvalidArgument, "", "%s file %s holds more than %d bytes; a token is one line", what, path, maxTokenBytes)
	case strings.ContainsAny(tok, "\r\n"):
		return "", errs.New(errs.InvalidArgument, "", "%s file %s holds more than one line; a token is one line", what, path)
	}
	return tok, nil
}

// CheckPrivate refuses a token file whose mode lets group or others read
// or write it: anyone who can read a token acts as its owner.
func CheckPrivate(path string, mode os.FileMode) error {
	if perm := mode.Perm(); perm&0o077 != 0 {
		return errs.New(errs.FailedPrecondition, "", "token file %s is open to group or others (mode %s); run chmod 600 %s",
			path, fmt.Sprintf("%04o", uint32(perm)), path)
	}
	return nil
}
