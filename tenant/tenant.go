package tenant

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"regexp"

	"github.com/gpuctl/gpuctl/errs"
)

// Tenant is one entry of the tenants file.
type Tenant struct {
	// Name identifies the tenant in listings, image manifests and the
	// audit log; see ValidName.
	Name string `json:"name"`
	// TokenFile holds the tenant's token, as --token-file holds the
	// host's.
	TokenFile string `json:"token_file"`
	Limits
}

// Limits bound what a tenant may hold on one host; zero means no limit.
type Limits struct {
	// MaxMemBytes bounds the device memory the tenant's sessions on this
	// host allocate, summed over them.
	MaxMemBytes uint64 `json:"max_mem_bytes,omitempty"`
	// MaxSessions bounds the tenant's live sessions on this host (those
	// with a worker; a session that lives only in an image does not
	// count).
	MaxSessions int `json:"max_sessions,omitempty"`
}

// Limits on the file, so that a mistaken path (a log, a disk image) fails
// fast instead of being read whole.
const (
	MaxFileBytes = 1 << 20
	MaxTenants   = 4096
	maxPathLen   = 4096
	// maxSessionsLimit keeps max_sessions a sane number; no host runs
	// more workers than this.
	maxSessionsLimit = 1 << 20
)

var namePattern = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,62}$`)

// ValidName checks a tenant name: 1 to 63 lowercase letters, digits, '.',
// '_' or '-', starting with a letter or digit. Names travel in image
// manifests and log lines, so they are kept plain.
func ValidName(name string) error {
	if !namePattern.MatchString(name) {
		return errs.New(errs.InvalidArgument, "", "tenant name %q: use 1-63 lowercase letters, digits, '.', '_' or '-', starting with a letter or digit", clip(name))
	}
	return nil
}

// entry is a tenant as the file spells it: signed numbers, so that a
// negative limit gets its own message rather than a type error.
type entry struct {
	Name        *string `json:"name"`
	TokenFile   *string `json:"token_file"`
	MaxMemBytes *int64  `json:"max_mem_bytes"`
	MaxSessions *int64  `json:"max_sessions"`
}

// Parse reads a tenants file's content: one JSON array of objects with
// the fields of Tenant, and nothing else. Every entry needs a valid,
// unique name and a token file; limits must not be negative. The error
// (errs.InvalidArgument) says which entry is wrong and how.
func Parse(b []byte) ([]Tenant, error) {
	ts, err := parse(b)
	if err != nil {
		return nil, errs.New(errs.InvalidArgument, "", "tenants file: %v", err)
	}
	return ts, nil
}

func parse(b []byte) ([]Tenant, error) {
	if len(b) > MaxFileBytes {
		return nil, fileErr("%d bytes; at most %d allowed", len(b), MaxFileBytes)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var raw []entry
	if err := dec.Decode(&raw); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, fileErr("empty; write a JSON array of tenants, [] for none")
		}
		return nil, fileErr("not a JSON array of tenants: %v", err)
	}
	if raw == nil {
		return nil, fileErr("null; write a JSON array of tenants, [] for none")
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, fileErr("text after the array")
	}
	if len(raw) > MaxTenants {
		return nil, fileErr("%d tenants; at most %d allowed", len(raw), MaxTenants)
	}
	out := make([]Tenant, 0, len(raw))
	seen := map[string]int{}
	for i, e := range raw {
		t, err := e.tenant(i)
		if err != nil {
			return nil, err
		}
		if j, dup := seen[t.Name]; dup {
			return nil, fileErr("entries %d and %d are both named %q; names must be unique", j+1, i+1, t.Name)
		}
		seen[t.Name] = i
		out = append(out, t)
	}
	return out, nil
}

func (e entry) tenant(i int) (Tenant, error) {
	where := fmt.Sprintf("entry %d", i+1)
	if e.Name == nil {
		return Tenant{}, fileErr("%s has no \"name\"", where)
	}
	if err := ValidName(*e.Name); err != nil {
		return Tenant{}, fileErr("%s: %v", where, err)
	}
	where = fmt.Sprintf("entry %d (%q)", i+1, *e.Name)
	t := Tenant{Name: *e.Name}
	switch {
	case e.TokenFile == nil || *e.TokenFile == "":
		return Tenant{}, fileErr("%s has no \"token_file\"", where)
	case len(*e.TokenFile) > maxPathLen || bytes.IndexByte([]byte(*e.TokenFile), 0) >= 0:
		return Tenant{}, fileErr("%s: \"token_file\" is not a usable path", where)
	}
	t.TokenFile = *e.TokenFile
	if e.MaxMemBytes != nil {
		if *e.MaxMemBytes < 0 {
			return Tenant{}, fileErr("%s: \"max_mem_bytes\" is negative; use 0 or leave it out for no limit", where)
		}
		t.MaxMemBytes = uint64(*e.MaxMemBytes)
	}
	if e.MaxSessions != nil {
		if *e.MaxSessions < 0 || *e.MaxSessions > maxSessionsLimit {
			return Tenant{}, fileErr("%s: \"max_sessions\" must be 0 (no limit) to %d", where, maxSessionsLimit)
		}
		t.MaxSessions = int(*e.MaxSessions)
	}
	return t, nil
}

func fileErr(format string, args ...any) error { return fmt.Errorf(format, args...) }

func clip(s string) string {
	if len(s) > 80 {
		return s[:80] + "..."
	}
	return s
}
