// Package registry is the cluster's shared view, kept in etcd: which gpud
// hosts exist and are up (a record each, and a key under a lease the host
// renews), and which host owns each session (a record whose etcd
// modification revision is the session's fencing token).
//
// Only small metadata lives here; chunks stay in the hosts' stores. Every
// change of a session's owner is a compare-and-swap on the token the
// changer read, so two hosts that race for a session cannot both win, and
// a host holding an old token (one partitioned away during a migration, or
// restarted from an old state dir) is refused.
//
// The package links etcd's client only; the embedded server is in
// registry/embedded, which only gpud links.
package registry

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/gpuctl/gpuctl/api"
	"github.com/gpuctl/gpuctl/errs"
)

// DefaultPrefix is where gpuctl's keys live in etcd.
const DefaultPrefix = "/gpuctl/v1/"

// DefaultTTL is a host lease's time to live: a host that stops renewing
// it is down this long after its last renewal at most.
const DefaultTTL = 10 * time.Second

// Host states as listings show them.
const (
	StateUp   = "up"
	StateDown = "down"
)

// Host is one gpud as it registers itself. The static part is kept in a
// record that outlives the host; the live part (free memory, sessions,
// store size) sits under the host's lease and vanishes with it.
type Host struct {
	Name    string    `json:"name"`
	API     string    `json:"api"`    // the control API, HOST:PORT
	Listen  string    `json:"listen"` // where clients connect
	Backend string    `json:"backend"`
	Driver  string    `json:"driver_version"`
	GPUs    []api.GPU `json:"gpus"`
	Version string    `json:"version,omitempty"`
	Started time.Time `json:"started"`

	// The live part.
	State        string    `json:"state"` // StateUp or StateDown, as read
	MemFreeBytes uint64    `json:"mem_free_bytes"`
	StoreBytes   int64     `json:"store_bytes"`
	Sessions     int       `json:"sessions"`
	Seen         time.Time `json:"seen,omitzero"` // the live part's last write
}

// live is what a host keeps under its lease.
type live struct {
	MemFreeBytes uint64    `json:"mem_free_bytes"`
	StoreBytes   int64     `json:"store_bytes"`
	Sessions     int       `json:"sessions"`
	Seen         time.Time `json:"seen"`
}

// Owner is a session's ownership record.
type Owner struct {
	Session string `json:"session"`
	// Host owns the session: only it may run it, restore it or hand it on.
	Host string `json:"host"`
	// Live: a worker runs the session on Host. Not live: the session is
	// in its image (Image) and any host may take it over.
	Live  bool   `json:"live"`
	Image string `json:"image,omitempty"`
	// Epoch is the session's worker epoch as of this record (the epoch
	// of Image, or of the image a live copy was restored from): a host
	// refuses to restore an image of an older epoch, which some newer
	// copy has outrun, wherever that copy ran.
	Epoch uint64 `json:"epoch,omitempty"`
	// Changed is when the record was written, by Host's clock.
	Changed time.Time `json:"changed"`
	// Token is the etcd revision of the record's last change: the fencing
	// token a change must present.
	Token int64 `json:"token"`
}

// Client is gpud's and gpuctl's handle on the registry.
type Client struct {
	c      *clientv3.Client
	prefix string
	log    *slog.Logger
}

// Options tune Dial.
type Options struct {
	// Prefix is the key prefix; empty is DefaultPrefix.
	Prefix string
	// DialTimeout bounds the first contact; zero is 3 s.
	DialTimeout time.Duration
	Log         *slog.Logger
}

// ParseEndpoints splits a comma-separated --registry value into etcd
// client URLs ("http://" is added where no scheme is given).
func ParseEndpoints(s string) ([]string, error) {
	var eps []string
	for _, e := range strings.Split(s, ",") {
		e = strings.TrimSpace(e)
		if e == "" {
			continue
		}
		if !strings.Contains(e, "://") {
			e = "http://" + e
		}
		eps = append(eps, e)
	}
	if len(eps) == 0 {
		return nil, errs.New(errs.InvalidArgument, "", "--registry %q names no endpoint; pass etcd client URLs such as http://10.0.0.1:2379,http://10.0.0.2:2379", s)
	}
	return eps, nil
}

// Dial connects to the etcd cluster at endpoints and checks, within the
// dial timeout, that it answers: an unreachable registry is one error.
func Dial(ctx context.Context, endpoints []string, o Options) (*Client, error) {
	if o.Prefix == "" {
		o.Prefix = DefaultPrefix
	}
	if o.DialTimeout <= 0 {
		o.DialTimeout = 3 * time.Second
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	subject := "registry " + strings.Join(endpoints, ",")
	c, err := clientv3.New(clientv3.Config{
		Endpoints: endpoints, DialTimeout: o.DialTimeout, Context: context.WithoutCancel(ctx),
		// The client retries on its own; its log would repeat what our
		// errors say.
		Logger:               zap.NewNop(),
		DialKeepAliveTime:    5 * time.Second,
		DialKeepAliveTimeout: 3 * time.Second,
	})
	if err != nil {
		return nil, errs.Wrap(err, errs.InvalidArgument, subject, "configure the etcd client")
	}
	cctx, cancel := context.WithTimeout(ctx, o.DialTimeout)
	defer cancel()
	if _, err := c.Get(cctx, o.Prefix+"hosts/", clientv3.WithCountOnly()); err != nil {
		c.Close()
		return nil, errs.Wrap(err, errs.Unavailable, subject, "unreachable within %v; start it (gpud registry) or fix --registry", o.DialTimeout)
	}
	return &Client{c: c, prefix: o.Prefix, log: o.Log}, nil
}

// Close ends the connection.
func (r *Client) Close() error { return r.c.Close() }

// Etcd is the etcd client underneath, for the benchmark and tests.
func (r *Client) Etcd() *clientv3.Client { return r.c }

func (r *Client) hostKey(name string) string { return r.prefix + "hosts/" + name }
func (r *Client) liveKey(name string) string { return r.prefix + "live/" + name }
func (r *Client) ownerKey(id string) string  { return r.prefix + "owners/" + id }

// byKey holds the owner's name alone, beside its record, so that a swap
// can compare it as well as the token.
func (r *Client) byKey(id string) string { return r.prefix + "owned-by/" + id }

// unavailable wraps an etcd error: the registry could not be asked.
func unavailable(err error, subject, format string, args ...any) error {
	if err == nil {
		return nil
	}
	if e, ok := err.(*errs.Error); ok {
		return e
	}
	return errs.Wrap(err, errs.Unavailable, subject, "registry: "+format, args...)
}

// Hosts lists every host that ever registered, each up or down.
func (r *Client) Hosts(ctx context.Context) ([]Host, error) {
	resp, err := r.c.Get(ctx, r.prefix+"hosts/", clientv3.WithPrefix())
	if err != nil {
		return nil, unavailable(err, "", "list hosts")
	}
	lv, err := r.c.Get(ctx, r.prefix+"live/", clientv3.WithPrefix(), clientv3.WithRev(resp.Header.Revision))
	if err != nil {
		return nil, unavailable(err, "", "list hosts")
	}
	alive := map[string]live{}
	for _, kv := range lv.Kvs {
		var l live
		if json.Unmarshal(kv.Value, &l) == nil {
			alive[strings.TrimPrefix(string(kv.Key), r.prefix+"live/")] = l
		}
	}
	hosts := make([]Host, 0, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		var h Host
		if err := json.Unmarshal(kv.Value, &h); err != nil {
			r.log.Warn("registry: unreadable host record", "key", string(kv.Key), "err", err)
			continue
		}
		h.State = StateDown
		if l, ok := alive[h.Name]; ok {
			h.State, h.MemFreeBytes, h.StoreBytes, h.Sessions, h.Seen = StateUp, l.MemFreeBytes, l.StoreBytes, l.Sessions, l.Seen
		}
		hosts = append(hosts, h)
	}
	sort.Slice(hosts, func(i, j int) bool { return hosts[i].Name < hosts[j].Name })
	return hosts, nil
}

// Host is one host's record; errs.NotFound when it never registered.
func (r *Client) Host(ctx context.Context, name string) (Host, error) {
	hs, err := r.Hosts(ctx)
	if err != nil {
		return Host{}, err
	}
	for _, h := range hs {
		if h.Name == name {
			return h, nil
		}
	}
	return Host{}, errs.New(errs.NotFound, errs.Host(name), "not in the registry; list hosts with `gpuctl hosts`")
}

// Owner reads a session's ownership record; errs.NotFound when the
// registry has none.
func (r *Client) Owner(ctx context.Context, session string) (Owner, error) {
	resp, err := r.c.Get(ctx, r.ownerKey(session))
	if err != nil {
		return Owner{}, unavailable(err, errs.Session(session), "read the owner")
	}
	if len(resp.Kvs) == 0 {
		return Owner{}, errs.New(errs.NotFound, errs.Session(session), "the registry has no owner for it")
	}
	return decodeOwner(resp.Kvs[0].Value, resp.Kvs[0].ModRevision)
}

// Owners lists every session's ownership record.
func (r *Client) Owners(ctx context.Context) ([]Owner, error) {
	resp, err := r.c.Get(ctx, r.prefix+"owners/", clientv3.WithPrefix())
	if err != nil {
		return nil, unavailable(err, "", "list session owners")
	}
	out := make([]Owner, 0, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		o, err := decodeOwner(kv.Value, kv.ModRevision)
		if err != nil {
			r.log.Warn("registry: unreadable owner record", "key", string(kv.Key), "err", err)
			continue
		}
		out = append(out, o)
	}
	return out, nil
}

func decodeOwner(b []byte, rev int64) (Owner, error) {
	var o Owner
	if err := json.Unmarshal(b, &o); err != nil {
		return Owner{}, errs.Wrap(err, errs.DataLoss, "", "registry: unreadable owner record")
	}
	o.Token = rev
	return o, nil
}

// Claim makes host the owner of a session the registry has no record of
// (a session created on host). It returns the record, with its token.
// A session that already has an owner is errs.AlreadyExists, with that
// owner in the error.
func (r *Client) Claim(ctx context.Context, session, host string, live bool, image string, epoch uint64) (Owner, error) {
	o := Owner{Session: session, Host: host, Live: live, Image: image, Epoch: epoch, Changed: time.Now().UTC()}
	b, _ := json.Marshal(o)
	key := r.ownerKey(session)
	resp, err := r.c.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
		Then(clientv3.OpPut(key, string(b)), clientv3.OpPut(r.byKey(session), host)).Else(clientv3.OpGet(key)).Commit()
	if err != nil {
		return Owner{}, unavailable(err, errs.Session(session), "claim for %s", host)
	}
	if !resp.Succeeded {
		kv := resp.Responses[0].GetResponseRange().Kvs[0]
		cur, _ := decodeOwner(kv.Value, kv.ModRevision)
		return cur, errs.New(errs.AlreadyExists, errs.Session(session), "already owned by host %s (token %d)", cur.Host, cur.Token)
	}
	o.Token = resp.Header.Revision
	return o, nil
}

// FencedError is a refused ownership change: the caller's token or host
// is not the record's. Current is the record as it stands (zero when the
// session has none).
type FencedError struct {
	Session    string
	From       string
	Token      int64
	Current    Owner
	Registered bool
}

func (e *FencedError) Error() string {
	if !e.Registered {
		return fmt.Sprintf("fenced: session %s has no owner in the registry; a change from host %s at token %d is refused", e.Session, e.From, e.Token)
	}
	return fmt.Sprintf("fenced: session %s is owned by host %s at token %d; a change from host %s at token %d is refused (stale or forged token)",
		e.Session, e.Current.Host, e.Current.Token, e.From, e.Token)
}

// Transfer changes a session's owner from host from (holding token) to
// host to, with the given liveness, image and epoch (a caller that does
// not change the epoch passes the one it read), in one compare-and-swap: it
// succeeds only if the record is still from's at exactly that token. The
// new record carries the new token. A stale or forged token, or a from
// that is not the owner, is errs.FailedPrecondition wrapping a
// *FencedError, and is logged.
//
// Checkpoint (to == from, live false), migration (to the target), restore
// (to == from or a takeover, live true) and preemption all go through it.
func (r *Client) Transfer(ctx context.Context, session, from, to string, token int64, live bool, image string, epoch uint64) (Owner, error) {
	o := Owner{Session: session, Host: to, Live: live, Image: image, Epoch: epoch, Changed: time.Now().UTC()}
	b, _ := json.Marshal(o)
	key := r.ownerKey(session)
	resp, err := r.c.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(key), "=", token), clientv3.Compare(clientv3.Value(r.byKey(session)), "=", from)).
		Then(clientv3.OpPut(key, string(b)), clientv3.OpPut(r.byKey(session), to)).Else(clientv3.OpGet(key)).Commit()
	if err != nil {
		return Owner{}, unavailable(err, errs.Session(session), "move from %s to %s", from, to)
	}
	if resp.Succeeded {
		o.Token = resp.Header.Revision
		return o, nil
	}
	fe := &FencedError{Session: session, From: from, Token: token}
	if kvs := resp.Responses[0].GetResponseRange().Kvs; len(kvs) > 0 {
		fe.Current, _ = decodeOwner(kvs[0].Value, kvs[0].ModRevision)
		fe.Registered = true
	}
	r.log.Warn("registry: ownership change refused", "session", session, "from", from, "to", to, "token", token,
		"owner", fe.Current.Host, "owner_token", fe.Current.Token)
	return fe.Current, errs.Wrap(fe, errs.FailedPrecondition, errs.Session(session), "ownership change refused")
}

// TransferFrom is Transfer for a caller that holds no token: it reads the
// record, checks that from owns it, and swaps at the token it read. An
// epoch of 0 keeps the record's.
func (r *Client) TransferFrom(ctx context.Context, session, from, to string, live bool, image string, epoch uint64) (Owner, error) {
	cur, err := r.Owner(ctx, session)
	if err != nil {
		return Owner{}, err
	}
	if cur.Host != from {
		fe := &FencedError{Session: session, From: from, Token: cur.Token, Current: cur, Registered: true}
		return cur, errs.Wrap(fe, errs.FailedPrecondition, errs.Session(session), "ownership change refused")
	}
	if epoch == 0 {
		epoch = cur.Epoch
	}
	return r.Transfer(ctx, session, from, to, cur.Token, live, image, epoch)
}

// ID is the session's id.
func (o Owner) ID() string { return o.Session }
