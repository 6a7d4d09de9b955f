package registry

import (
	"context"
	"encoding/json"
	"sort"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/gpuctl/gpuctl/errs"
)

// Copy records that a host holds an image: the host that committed it,
// or a peer it was replicated to. The record outlives the host, so that
// a session whose host died can be found in a copy elsewhere; a host that
// removes the image drops its record.
type Copy struct {
	Image string `json:"image"`
	Host  string `json:"host"`
	// Origin: the host committed the image (not a replica).
	Origin bool `json:"origin,omitempty"`
	// Session is the image's session, so that a session's copies can be
	// found without reading every manifest.
	Session string `json:"session,omitempty"`
	// Bytes is the image's logical size; Sent what replication sent (the
	// chunks the peer lacked).
	Bytes int64     `json:"bytes"`
	Sent  int64     `json:"sent_bytes,omitempty"`
	At    time.Time `json:"at"`
}

func (r *Client) copyKey(image, host string) string { return r.prefix + "copies/" + image + "/" + host }

// AddCopy records that c.Host holds c.Image.
func (r *Client) AddCopy(ctx context.Context, c Copy) error {
	if c.Image == "" || c.Host == "" || strings.Contains(c.Image, "/") || strings.Contains(c.Host, "/") {
		return errs.New(errs.InvalidArgument, errs.Image(c.Image), "registry: a copy needs an image id and a host name without '/' (host %q)", c.Host)
	}
	if c.At.IsZero() {
		c.At = time.Now().UTC()
	}
	b, _ := json.Marshal(c)
	if _, err := r.c.Put(ctx, r.copyKey(c.Image, c.Host), string(b)); err != nil {
		return unavailable(err, errs.Image(c.Image), "record the copy on %s", c.Host)
	}
	return nil
}

// RemoveCopy drops host's record of image (the host removed it).
func (r *Client) RemoveCopy(ctx context.Context, image, host string) error {
	if _, err := r.c.Delete(ctx, r.copyKey(image, host)); err != nil {
		return unavailable(err, errs.Image(image), "drop the copy on %s", host)
	}
	return nil
}

// Copies lists the hosts recorded as holding image, origin first.
func (r *Client) Copies(ctx context.Context, image string) ([]Copy, error) {
	if image == "" || strings.Contains(image, "/") {
		return nil, errs.New(errs.InvalidArgument, errs.Image(image), "not an image id")
	}
	resp, err := r.c.Get(ctx, r.prefix+"copies/"+image+"/", clientv3.WithPrefix())
	if err != nil {
		return nil, unavailable(err, errs.Image(image), "list copies")
	}
	return r.decodeCopies(resp.Kvs), nil
}

// AllCopies lists every image's copies, by image id.
func (r *Client) AllCopies(ctx context.Context) (map[string][]Copy, error) {
	resp, err := r.c.Get(ctx, r.prefix+"copies/", clientv3.WithPrefix())
	if err != nil {
		return nil, unavailable(err, "", "list image copies")
	}
	out := map[string][]Copy{}
	for _, c := range r.decodeCopies(resp.Kvs) {
		out[c.Image] = append(out[c.Image], c)
	}
	return out, nil
}

func (r *Client) decodeCopies(kvs []*mvccpb.KeyValue) []Copy {
	out := make([]Copy, 0, len(kvs))
	for _, kv := range kvs {
		var c Copy
		if err := json.Unmarshal(kv.Value, &c); err != nil {
			r.log.Warn("registry: unreadable copy record", "key", string(kv.Key), "err", err)
			continue
		}
		out = append(out, c)
	}
	sort.SliceStable(out, func(i, j int) bool {
		if out[i].Image != out[j].Image {
			return out[i].Image < out[j].Image
		}
		if out[i].Origin != out[j].Origin {
			return out[i].Origin
		}
		return out[i].Host < out[j].Host
	})
	return out
}
