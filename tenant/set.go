package tenant

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"io"
	"os"
	"sort"

	"github.com/gpuctl/gpuctl/errs"
)

// Principal is who a request or a client acts as: the administrator (the
// zero value) or a tenant.
type Principal struct {
	// Tenant is the tenant's name; empty for the administrator.
	Tenant string
}

// Admin is the administrator: the holder of the host token.
func Admin() Principal { return Principal{} }

// IsAdmin reports whether p is the administrator.
func (p Principal) IsAdmin() bool { return p.Tenant == "" }

// Owns reports whether p may see and act on something owned by owner (a
// tenant name; empty for the administrator's own): the administrator owns
// everything, a tenant only what is its own.
func (p Principal) Owns(owner string) bool { return p.IsAdmin() || p.Tenant == owner }

// String names p in the audit log: the tenant's name, or "(admin)",
// which no tenant can be called.
func (p Principal) String() string {
	if p.IsAdmin() {
		return "(admin)"
	}
	return p.Tenant
}

type ctxKey struct{}

// NewContext returns ctx carrying p.
func NewContext(ctx context.Context, p Principal) context.Context {
	return context.WithValue(ctx, ctxKey{}, p)
}

// FromContext is the principal ctx carries. A context without one is
// gpud's own work, which acts as the administrator.
func FromContext(ctx context.Context) Principal {
	p, _ := ctx.Value(ctxKey{}).(Principal)
	return p
}

// RequireAdmin refuses a tenant an operation that is the administrator's
// alone, with an errs.PermissionDenied error that names the operation.
func RequireAdmin(ctx context.Context, what string) error {
	if p := FromContext(ctx); !p.IsAdmin() {
		return errs.New(errs.PermissionDenied, "", "%s is host-wide and only the host's administrator (the host token) may run it", what)
	}
	return nil
}

// Set is the host token and the tenants of one gpud: it tells who a token
// stands for. It never changes after Load.
type Set struct {
	admin   [sha256.Size]byte
	adminTk string // the host token, the key of fingerprints
	tenants []member
	byName  map[string]int
}

type member struct {
	Tenant
	sum [sha256.Size]byte // SHA-256 of the token
	fp  string
}

// NewSet makes a set of the host token alone: every valid token is the
// administrator's.
func NewSet(hostToken string) *Set {
	return &Set{admin: sha256.Sum256([]byte(hostToken)), adminTk: hostToken, byName: map[string]int{}}
}

// Load reads the tenants file at path and every tenant's token file (see
// ReadTokenFile) and returns the set with hostToken as the
// administrator's. Two tenants with one token, or a tenant with the host
// token, are refused: a token must name one principal.
func Load(path, hostToken string) (*Set, error) {
	b, err := readFile(path)
	if err != nil {
		return nil, err
	}
	ts, err := parse(b)
	if err != nil {
		return nil, errs.New(errs.InvalidArgument, "", "tenants file %s: %v", path, err)
	}
	tokens := make([]string, len(ts))
	for i, t := range ts {
		if tokens[i], err = ReadTokenFile(t.TokenFile, "tenant "+quote(t.Name)+"'s token"); err != nil {
			return nil, err
		}
	}
	return build(hostToken, ts, tokens)
}

func readFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, errs.Wrap(err, errs.InvalidArgument, "", "read the tenants file")
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, MaxFileBytes+1))
	if err != nil {
		return nil, errs.Wrap(err, errs.InvalidArgument, "", "read the tenants file %s", path)
	}
	if len(b) > MaxFileBytes {
		return nil, errs.New(errs.InvalidArgument, "", "tenants file %s is larger than %d bytes", path, MaxFileBytes)
	}
	return b, nil
}

// build makes a set from parsed tenants and their tokens (same order).
func build(hostToken string, ts []Tenant, tokens []string) (*Set, error) {
	s := NewSet(hostToken)
	owner := map[[sha256.Size]byte]string{s.admin: "the host token"}
	for i, t := range ts {
		sum := sha256.Sum256([]byte(tokens[i]))
		if other, dup := owner[sum]; dup {
			return nil, errs.New(errs.InvalidArgument, "", "tenant %q has the same token as %s; give every tenant a token of its own", t.Name, other)
		}
		owner[sum] = "tenant " + quote(t.Name)
		s.byName[t.Name] = len(s.tenants)
		s.tenants = append(s.tenants, member{Tenant: t, sum: sum, fp: fingerprint(hostToken, tokens[i])})
	}
	return s, nil
}

func quote(s string) string { return `"` + s + `"` }

// fingerprint names a tenant's token to those who hold the host token: an
// HMAC of it keyed with the host token. Hosts that migrate to each other
// share the host token, so equal fingerprints there mean equal tenant
// tokens, and the fingerprint tells nothing to anyone else.
func fingerprint(hostToken, token string) string {
	mac := hmac.New(sha256.New, []byte(hostToken))
	mac.Write([]byte(token))
	return hex.EncodeToString(mac.Sum(nil)[:16])
}

// Identify returns the principal token stands for. Every known token is
// compared, in constant time, whichever matches: the time taken tells
// nothing about which principal (if any) a token named.
func (s *Set) Identify(token string) (Principal, bool) {
	sum := sha256.Sum256([]byte(token))
	found := subtle.ConstantTimeCompare(sum[:], s.admin[:])
	idx := -1
	for i := range s.tenants {
		eq := subtle.ConstantTimeCompare(sum[:], s.tenants[i].sum[:])
		idx = subtle.ConstantTimeSelect(eq, i, idx)
		found |= eq
	}
	if found != 1 {
		return Principal{}, false
	}
	if idx < 0 {
		return Admin(), true
	}
	return Principal{Tenant: s.tenants[idx].Name}, true
}

// Authenticate is Identify for the control API's middleware
// (control.Authenticator): it returns ctx carrying the principal, and the
// principal's name for the audit log.
func (s *Set) Authenticate(ctx context.Context, token string) (context.Context, string, bool) {
	p, ok := s.Identify(token)
	if !ok {
		return ctx, "", false
	}
	return NewContext(ctx, p), p.String(), true
}

// Lookup returns a tenant's entry.
func (s *Set) Lookup(name string) (Tenant, bool) {
	i, ok := s.byName[name]
	if !ok {
		return Tenant{}, false
	}
	return s.tenants[i].Tenant, true
}

// Limits returns a tenant's limits; ok is false for a tenant this set
// does not know.
func (s *Set) Limits(name string) (Limits, bool) {
	t, ok := s.Lookup(name)
	return t.Limits, ok
}

// Known reports whether the set has a tenant of that name.
func (s *Set) Known(name string) bool {
	_, ok := s.byName[name]
	return ok
}

// Fingerprint is the fingerprint of a tenant's token (see fingerprint),
// or "" for an unknown tenant.
func (s *Set) Fingerprint(name string) string {
	i, ok := s.byName[name]
	if !ok {
		return ""
	}
	return s.tenants[i].fp
}

// Tenants lists the tenants by name.
func (s *Set) Tenants() []Tenant {
	out := make([]Tenant, len(s.tenants))
	for i, m := range s.tenants {
		out[i] = m.Tenant
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// Len is the number of tenants.
func (s *Set) Len() int { return len(s.tenants) }
