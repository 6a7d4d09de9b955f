package main

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"text/tabwriter"

	"github.com/urfave/cli/v2"

	"github.com/gpuctl/gpuctl/api"
	"github.com/gpuctl/gpuctl/control"
	"github.com/gpuctl/gpuctl/errs"
	"github.com/gpuctl/gpuctl/registry"
)

// registryFlag is the global --registry: with it, gpuctl asks the
// cluster registry where sessions and images are.
var registryFlag = &cli.StringFlag{Name: "registry", Usage: "comma-separated etcd client `URLS` of the cluster registry: " +
	"commands then find a session's host themselves, and `hosts` lists the cluster", EnvVars: []string{"GPUCTL_REGISTRY"}}

// dialRegistry connects to --registry; nil (and no error) without it.
func dialRegistry(c *cli.Context) (*registry.Client, error) {
	s := c.String("registry")
	if s == "" {
		return nil, nil
	}
	eps, err := registry.ParseEndpoints(s)
	if err != nil {
		return nil, err
	}
	return registry.Dial(c.Context, eps, registry.Options{})
}

// hostClient is a control-API client of one registered host, with the
// global token and TLS flags (the cluster's hosts share a token file).
func hostClient(c *cli.Context, h registry.Host) (*control.Client, error) {
	tok, err := readToken(c.String("token-file"))
	if err != nil {
		return nil, err
	}
	cfg, err := clientTLS(c)
	if err != nil {
		return nil, err
	}
	return control.NewClient(h.API, tok, control.WithTLS(cfg)), nil
}

// sessionClient is the client of the host a session lives on: with
// --registry the session's owner in the registry, else --host.
func sessionClient(c *cli.Context, id string) (*control.Client, error) {
	reg, err := dialRegistry(c)
	if err != nil || reg == nil {
		if err != nil {
			return nil, err
		}
		return apiClient(c)
	}
	defer reg.Close()
	o, err := reg.Owner(c.Context, id)
	if errs.IsNotFound(err) {
		// A session younger than its host's reconciliation round (2 s)
		// has no record yet: ask the up hosts.
		return findSession(c, reg, id, err)
	}
	if err != nil {
		return nil, err
	}
	h, err := reg.Host(c.Context, o.Host)
	if err != nil {
		return nil, err
	}
	if h.State != registry.StateUp {
		return nil, errs.New(errs.Unavailable, errs.Session(id), "its host %s is down; restore its image %s on another host", h.Name, orDash(o.Image))
	}
	return hostClient(c, h)
}

// findSession is the client of the up host that runs session id, for a
// session the registry has no record of; notFound is returned when none
// runs it.
func findSession(c *cli.Context, reg *registry.Client, id string, notFound error) (*control.Client, error) {
	hs, err := reg.Hosts(c.Context)
	if err != nil {
		return nil, err
	}
	for _, h := range hs {
		if h.State != registry.StateUp {
			continue
		}
		cl, err := hostClient(c, h)
		if err != nil {
			return nil, err
		}
		if s, err := cl.Session(c.Context, id); err == nil && s.State != "stopped" {
			return cl, nil
		}
	}
	return nil, notFound
}

func hostsCommand(e *env) *cli.Command {
	return &cli.Command{
		Name:  "hosts",
		Usage: "list the cluster's hosts (needs --registry)",
		Description: "Lists every gpud that joined the registry: up while it renews its lease, down\n" +
			"within 20 s of stopping; its addresses, backend, GPUs, free device memory, live\n" +
			"sessions and store size.",
		Flags: []cli.Flag{jsonFlag},
		Action: func(c *cli.Context) error {
			reg, err := needRegistry(c, "gpuctl hosts")
			if err != nil {
				return err
			}
			defer reg.Close()
			hs, err := reg.Hosts(c.Context)
			if err != nil {
				return err
			}
			if c.Bool("json") {
				return e.printJSON(hs)
			}
			tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "NAME\tSTATE\tAPI\tLISTEN\tBACKEND\tGPUS\tDRIVER\tMEM FREE\tSESSIONS\tSTORE")
			for _, h := range hs {
				var gpus []string
				for _, g := range h.GPUs {
					gpus = append(gpus, g.Name)
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d\t%s\n", h.Name, h.State, h.API, orDash(h.Listen), h.Backend,
					orDash(strings.Join(gpus, ",")), orDash(h.Driver), humanBytes(h.MemFreeBytes), h.Sessions, humanBytes(uint64(h.StoreBytes)))
			}
			return tw.Flush()
		},
	}
}

func needRegistry(c *cli.Context, what string) (*registry.Client, error) {
	reg, err := dialRegistry(c)
	if err != nil {
		return nil, err
	}
	if reg == nil {
		return nil, errs.New(errs.InvalidArgument, "", "%s needs the cluster registry: pass --registry URLS or set GPUCTL_REGISTRY", what)
	}
	return reg, nil
}

// clusterSessions lists every up host's sessions, and the sessions whose
// owner is down (in an image on a down host, or lost with it).
func clusterSessions(c *cli.Context, reg *registry.Client) ([]api.Session, error) {
	hs, err := reg.Hosts(c.Context)
	if err != nil {
		return nil, err
	}
	out := []api.Session{}
	seen := map[string]bool{}
	down := map[string]bool{}
	for _, h := range hs {
		if h.State != registry.StateUp {
			down[h.Name] = true
			continue
		}
		cl, err := hostClient(c, h)
		if err != nil {
			return nil, err
		}
		list, err := cl.Sessions(c.Context)
		if err != nil {
			return nil, errs.Wrap(err, errs.KindOf(err), errs.Host(h.Name), "list sessions")
		}
		for _, s := range list {
			if s.State == "stopped" && seen[s.ID] {
				continue
			}
			s.Host = h.Name
			out = append(out, s)
			seen[s.ID] = true
		}
	}
	owners, err := reg.Owners(c.Context)
	if err != nil {
		return nil, err
	}
	for _, o := range owners {
		if down[o.Host] && !seen[o.ID()] {
			out = append(out, api.Session{ID: o.Session, State: "stopped", Host: o.Host})
		}
	}
	// A session a migration left stopped on its old host shows once: the
	// live copy wins.
	sort.SliceStable(out, func(i, j int) bool {
		if out[i].ID != out[j].ID {
			return out[i].ID < out[j].ID
		}
		return out[i].State != "stopped" && out[j].State == "stopped"
	})
	dedup := out[:0]
	for i, s := range out {
		if i > 0 && out[i-1].ID == s.ID {
			continue
		}
		dedup = append(dedup, s)
	}
	return dedup, nil
}

// target resolves migrate --to: "auto" (placement), a registered host's
// name, or an API address as given.
func target(c *cli.Context, e *env, id, to string, src *control.Client) (string, error) {
	reg, err := dialRegistry(c)
	if err != nil {
		return "", err
	}
	if reg == nil {
		if to == "auto" {
			return "", errs.New(errs.InvalidArgument, "", "--to auto needs the cluster registry: pass --registry URLS or set GPUCTL_REGISTRY")
		}
		return to, nil
	}
	defer reg.Close()
	hs, err := reg.Hosts(c.Context)
	if err != nil {
		return "", err
	}
	if to != "auto" {
		for _, h := range hs {
			if h.Name == to {
				return h.API, nil
			}
		}
		return to, nil
	}
	p, err := place(c.Context, c, id, src, hs)
	if err != nil {
		return "", err
	}
	// With --json the reply alone goes to stdout.
	out := e.stdout
	if c.Bool("json") {
		out = e.stderr
	}
	fmt.Fprintf(out, "placing %s on %s: %s\n", id, p.host.Name, p.why)
	for _, r := range p.others {
		fmt.Fprintf(out, "  not %s\n", r)
	}
	return p.host.API, nil
}

// placement is the host --to auto chose, and why; others says why each
// other host ranked lower or could not take the session.
type placement struct {
	host   registry.Host
	why    string
	others []string
}

// place picks a host for a session now on src: compatible (same backend,
// a GPU of the session's model, a driver not older), with free device
// memory for what the session holds, preferring the host that already
// holds most of the session's images (whose chunks a migration then need
// not send), then the most free memory.
func place(ctx context.Context, c *cli.Context, id string, src *control.Client, hs []registry.Host) (placement, error) {
	srcHost, err := src.Host(ctx)
	if err != nil {
		return placement{}, err
	}
	sess, err := src.Session(ctx, id)
	if err != nil {
		return placement{}, err
	}
	model := ""
	if len(srcHost.GPUs) > 0 {
		model = srcHost.GPUs[0].Name
	}
	// The share of the session's newest image each host holds: what a
	// migration there need not send.
	var chunks *api.ImageChunksReply
	if imgs := sessionImages(ctx, src, id); len(imgs) > 0 {
		chunks, _ = src.ImageChunks(ctx, imgs[0])
	}
	type cand struct {
		h     registry.Host
		share float64
	}
	var cands []cand
	var out placement
	for _, h := range hs {
		switch {
		case h.Name == srcHost.Name:
			continue
		case h.State != registry.StateUp:
			out.others = append(out.others, h.Name+": down")
			continue
		case h.Backend != srcHost.Backend:
			out.others = append(out.others, fmt.Sprintf("%s: runs %s, the session %s", h.Name, h.Backend, srcHost.Backend))
			continue
		case model != "" && !registry.HasModel(h.GPUs, model):
			out.others = append(out.others, fmt.Sprintf("%s: no %s GPU", h.Name, model))
			continue
		case registry.OlderDriver(h.Driver, srcHost.DriverVersion):
			out.others = append(out.others, fmt.Sprintf("%s: driver %s is older than %s", h.Name, h.Driver, srcHost.DriverVersion))
			continue
		case h.MemFreeBytes < sess.MemBytes:
			out.others = append(out.others, fmt.Sprintf("%s: %s free, the session holds %s", h.Name, humanBytes(h.MemFreeBytes), humanBytes(sess.MemBytes)))
			continue
		}
		share := 0.0
		if cl, err := hostClient(c, h); err == nil {
			share = chunkShare(ctx, cl, chunks)
		}
		cands = append(cands, cand{h, share})
	}
	if len(cands) == 0 {
		return out, errs.New(errs.ResourceExhausted, errs.Session(id), "no host can take it: %s", orDash(strings.Join(out.others, "; ")))
	}
	sort.SliceStable(cands, func(i, j int) bool {
		if cands[i].share != cands[j].share {
			return cands[i].share > cands[j].share
		}
		return cands[i].h.MemFreeBytes > cands[j].h.MemFreeBytes
	})
	reason := func(x cand) string {
		return fmt.Sprintf("%s backend, %s free (session holds %s), driver %s, already holds %.0f%% of the session's newest image (by chunk bytes)",
			x.h.Backend, humanBytes(x.h.MemFreeBytes), humanBytes(sess.MemBytes), orDash(x.h.Driver), 100*x.share)
	}
	out.host, out.why = cands[0].h, reason(cands[0])
	for _, x := range cands[1:] {
		out.others = append(out.others, x.h.Name+": ranked lower: "+reason(x))
	}
	return out, nil
}

// sessionImages are the ids of the session's images on src, newest
// first.
func sessionImages(ctx context.Context, src *control.Client, id string) []string {
	list, err := src.Images(ctx)
	if err != nil {
		return nil
	}
	var mine []api.Image
	for _, im := range list {
		if im.Session == id {
			mine = append(mine, im)
		}
	}
	sort.Slice(mine, func(i, j int) bool { return mine[i].Created.After(mine[j].Created) })
	out := make([]string, len(mine))
	for i, im := range mine {
		out[i] = im.ID
	}
	return out
}

// chunkShare is the share, by bytes, of an image's chunks (ch, from the
// image's host) that the host behind cl holds already; 0 when unknown.
func chunkShare(ctx context.Context, cl *control.Client, ch *api.ImageChunksReply) float64 {
	if ch == nil || len(ch.Digests) == 0 {
		return 0
	}
	missing, err := cl.MissingChunks(ctx, ch.Digests)
	if err != nil {
		return 0
	}
	lacks := make(map[api.Digest]bool, len(missing))
	for _, d := range missing {
		lacks[d] = true
	}
	var have, all int64
	for i, d := range ch.Digests {
		all += ch.Bytes[i]
		if !lacks[d] {
			have += ch.Bytes[i]
		}
	}
	if all == 0 {
		return 0
	}
	return float64(have) / float64(all)
}
