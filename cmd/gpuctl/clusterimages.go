package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/gpuctl/gpuctl/api"
	"github.com/gpuctl/gpuctl/control"
	"github.com/gpuctl/gpuctl/errs"
	"github.com/gpuctl/gpuctl/registry"
)

// onFlag limits a cluster-wide images command to one host.
var onFlag = &cli.StringFlag{Name: "on", Usage: "with --registry, only the host `NAME` (a registered host's name or its --api HOST:PORT)"}

// hostResult is one host's part of a cluster-wide images command, as
// --json prints it: what the host did, or why it did not.
type hostResult struct {
	Host  string `json:"host"`
	State string `json:"state"` // the host's: up or down
	// Error says why nothing was done there: the host is down or the
	// call failed.
	Error   string                `json:"error,omitempty"`
	Removed *api.RemoveImageReply `json:"removed,omitempty"`
	Verify  *api.VerifyReport     `json:"verify,omitempty"`
	GC      *api.GCReply          `json:"gc,omitempty"`
	Import  *api.ImportReply      `json:"import,omitempty"`
	err     error                 // Error as it came, for the exit status
}

// clusterImages runs rm, verify, gc or import with --registry: on every
// host that the command concerns (or --on's), each host's result on a
// line of its own.
func (e *env) clusterImages(c *cli.Context, name string) error {
	reg, ih, err := e.holdersFor(c, "gpuctl images "+name)
	if err != nil {
		return err
	}
	defer reg.Close()
	var on *registry.Host
	if s := c.String("on"); s != "" {
		h, ok := ih.lookup(s)
		if !ok {
			return errs.New(errs.NotFound, errs.Host(s), "not a registered host; list them with `gpuctl hosts`")
		}
		on = &h
	}
	switch name {
	case "rm":
		return e.clusterRemove(c, reg, ih, c.Args().First(), on)
	case "verify":
		return e.clusterVerify(c, ih, c.Args().First(), on)
	case "gc":
		return e.clusterGC(c, ih, on)
	case "import":
		return e.clusterImport(c, reg, ih, c.Args().First(), on)
	}
	return errs.New(errs.Internal, "", "images %s has no cluster-wide form", name)
}

// warnUnreachable says, on stderr, which up hosts did not answer the
// listing, so that a copy shown from the registry is not taken for one
// that was seen.
func (ih *imageHolders) warnUnreachable(e *env) {
	names := make([]string, 0, len(ih.unreachable))
	for h := range ih.unreachable {
		names = append(names, h)
	}
	sort.Strings(names)
	for _, h := range names {
		fmt.Fprintf(e.stderr, "gpuctl: host %s is up but did not list its images (%s); its copies are as the registry records them\n", h, ih.unreachable[h])
	}
}

// lookup finds a registered host by name or by its API address.
func (ih *imageHolders) lookup(s string) (registry.Host, bool) {
	if h, ok := ih.hosts[s]; ok {
		return h, true
	}
	for _, h := range ih.hosts {
		if h.API == s {
			return h, true
		}
	}
	return registry.Host{}, false
}

// sortedHosts are the registered hosts by name, or only on.
func (ih *imageHolders) sortedHosts(on *registry.Host) []registry.Host {
	if on != nil {
		return []registry.Host{*on}
	}
	out := make([]registry.Host, 0, len(ih.hosts))
	for _, h := range ih.hosts {
		out = append(out, h)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// each runs fn on every host of hs that is up, in turn, and records a
// down host as such; fn's error becomes that host's result.
func each(c *cli.Context, hs []registry.Host, fn func(cl *control.Client, r *hostResult) error) []hostResult {
	out := make([]hostResult, 0, len(hs))
	for _, h := range hs {
		r := hostResult{Host: h.Name, State: h.State}
		if h.State != registry.StateUp {
			r.err = errs.New(errs.Unavailable, "", "down, left out; run this again when it is back")
		} else if cl, err := hostClient(c, h); err != nil {
			r.err = err
		} else if err := fn(cl, &r); err != nil {
			r.err = err
		}
		if r.err != nil {
			r.Error = oneLine(r.err.Error())
		}
		out = append(out, r)
	}
	return out
}

// finish prints the results (each host's line, or the JSON array) and
// returns one error for subject that names every host that failed and
// why; its kind (the exit status) is damage's if any host found damage,
// else the first failure's.
func (e *env) finish(c *cli.Context, rs []hostResult, subject string, line func(r hostResult) string) error {
	if c.Bool("json") {
		if err := e.printJSON(rs); err != nil {
			return err
		}
	} else {
		for _, r := range rs {
			if r.err != nil {
				e.printf("%s: %s\n", r.Host, r.Error)
				continue
			}
			e.printf("%s: %s\n", r.Host, line(r))
		}
	}
	kind := errs.Kind("")
	var failed []string
	for _, r := range rs {
		if r.err == nil {
			continue
		}
		if k := errs.KindOf(r.err); kind == "" || k == errs.DataLoss {
			kind = k
		}
		failed = append(failed, fmt.Sprintf("host %s: %s", r.Host, r.Error))
	}
	if failed == nil {
		return nil
	}
	return errs.New(kind, subject, "%d of %d hosts failed: %s", len(failed), len(rs), strings.Join(failed, "; "))
}

// holderHosts are the hosts that hold image (up ones by their listings,
// down ones by the registry's copies), or only on, which must hold it.
func (ih *imageHolders) holderHosts(image string, on *registry.Host) ([]registry.Host, error) {
	var out []registry.Host
	for _, cp := range ih.copies(image) {
		if on != nil && cp.Host != on.Name {
			continue
		}
		h, ok := ih.hosts[cp.Host]
		if !ok {
			h = registry.Host{Name: cp.Host, State: registry.StateDown}
		}
		out = append(out, h)
	}
	if len(out) == 0 {
		if on != nil {
			return nil, errs.New(errs.NotFound, errs.Image(image), "host %s does not hold it; list where it is with `gpuctl images ls`", on.Name)
		}
		return nil, errs.New(errs.NotFound, errs.Image(image), "no host in the cluster holds it; list images with `gpuctl images ls`")
	}
	return out, nil
}

// clusterRemove removes image from every host that holds it (or on) and
// drops their copies from the registry. A session that waits in the
// image (its owner record says so) keeps at least one copy: removing
// every up copy is refused, naming the session and its host.
func (e *env) clusterRemove(c *cli.Context, reg *registry.Client, ih *imageHolders, image string, on *registry.Host) error {
	hs, err := ih.holderHosts(image, on)
	if err != nil {
		return err
	}
	ctx := c.Context
	if sess := ih.images[image].Session; sess != "" {
		o, err := reg.Owner(ctx, sess)
		switch {
		case err == nil && !o.Live && o.Image == image:
			left := 0 // up copies that stay: with --on, the other hosts'
			for _, cp := range ih.copies(image) {
				if on != nil && cp.State == registry.StateUp && cp.Host != on.Name {
					left++
				}
			}
			if left == 0 {
				return errs.New(errs.FailedPrecondition, errs.Image(image), "session %s waits in it (owner host %s); removing its last up copy would lose the session: "+
					"resume it first (gpuctl resume %s)", sess, o.Host, sess)
			}
		case err != nil && !errs.IsNotFound(err):
			return err
		}
	}
	rs := each(c, hs, func(cl *control.Client, r *hostResult) error {
		rep, err := cl.RemoveImage(ctx, image)
		if err != nil {
			return err
		}
		r.Removed = rep
		return reg.RemoveCopy(ctx, image, r.Host)
	})
	return e.finish(c, rs, errs.Image(image), func(r hostResult) string {
		return fmt.Sprintf("removed %s (%s of session %s)", image, humanBytes(uint64(r.Removed.Bytes)), orDash(r.Removed.Session))
	})
}

// clusterVerify verifies every copy of image (each holder's, or on's);
// without an image, every image on every host (or on).
func (e *env) clusterVerify(c *cli.Context, ih *imageHolders, image string, on *registry.Host) error {
	hs := ih.sortedHosts(on)
	subject := "verify"
	if image != "" {
		var err error
		if hs, err = ih.holderHosts(image, on); err != nil {
			return err
		}
		subject = errs.Image(image)
	}
	rs := each(c, hs, func(cl *control.Client, r *hostResult) error {
		rep, err := cl.Verify(c.Context, api.VerifyRequest{ID: image}, nil)
		if err != nil {
			return err
		}
		r.Verify = rep
		return rep.Err()
	})
	what := image
	if what == "" {
		what = "every image"
	}
	return e.finish(c, rs, subject, func(r hostResult) string {
		return fmt.Sprintf("verified %d chunks of %s: all intact", r.Verify.Chunks, what)
	})
}

// clusterGC collects every up host's store (or on's).
func (e *env) clusterGC(c *cli.Context, ih *imageHolders, on *registry.Host) error {
	rs := each(c, ih.sortedHosts(on), func(cl *control.Client, r *hostResult) error {
		st, err := cl.GC(c.Context)
		r.GC = st
		return err
	})
	return e.finish(c, rs, "garbage collection", func(r hostResult) string {
		st := r.GC
		return fmt.Sprintf("freed %s: %d chunks, %d packs removed, %d rewritten, %d leftover files",
			humanBytes(uint64(st.BytesFreed)), st.ChunksRemoved, st.PacksRemoved, st.PacksRewritten, st.OrphanFiles)
	})
}

// clusterImport imports an export on on (default: the host --host names,
// which must be registered) and records the new copy in the registry.
func (e *env) clusterImport(c *cli.Context, reg *registry.Client, ih *imageHolders, file string, on *registry.Host) error {
	if on == nil {
		h, ok := ih.lookup(c.String("host"))
		if !ok {
			return errs.New(errs.InvalidArgument, errs.Host(c.String("host")), "not a registered host: name the host to import on with --on NAME (see `gpuctl hosts`)")
		}
		on = &h
	}
	f, err := os.Open(file)
	if err != nil {
		return errs.Wrap(err, errs.InvalidArgument, "", "open the export file")
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil || !fi.Mode().IsRegular() {
		return errs.New(errs.InvalidArgument, "", "%s is not a regular file", file)
	}
	rs := each(c, []registry.Host{*on}, func(cl *control.Client, r *hostResult) error {
		progress, done := e.progress(c.Bool("json"), "importing "+filepath.Base(file)+" on "+on.Name, bytesBar)
		rep, err := cl.Import(c.Context, f, fi.Size(), progress)
		done()
		if err != nil {
			return err
		}
		r.Import = rep
		return reg.AddCopy(c.Context, registry.Copy{Image: rep.ID, Host: on.Name, Session: rep.Session, Bytes: rep.Bytes})
	})
	return e.finish(c, rs, "import of "+filepath.Base(file), func(r hostResult) string {
		rep := r.Import
		return fmt.Sprintf("imported %s (session %s, %s), %s new in the store", rep.ID, orDash(rep.Session), humanBytes(uint64(rep.Bytes)), humanBytes(uint64(rep.StoredBytes)))
	})
}

// clusterExport is `images export ID FILE` with --registry: from the
// first up holder that can send the whole export; one that fails (it
// died, or lost the image meanwhile) is followed by the next, and FILE is
// only ever a complete export.
func (e *env) clusterExport(c *cli.Context) error {
	image := c.Args().First()
	reg, ih, err := e.holdersFor(c, "gpuctl images export")
	if err != nil {
		return err
	}
	defer reg.Close()
	var failed []string
	for _, cp := range ih.copies(image) {
		if cp.State != registry.StateUp {
			continue
		}
		cl, err := hostClient(c, ih.hosts[cp.Host])
		if err != nil {
			return err
		}
		err = e.imagesExport(c.Context, cl, c.Args().Slice(), c.Bool("json"))
		if err == nil || errs.IsInvalidArgument(err) || c.Context.Err() != nil {
			return err // done, or FILE is the trouble, or the user gave up
		}
		failed = append(failed, "host "+cp.Host+": "+oneLine(err.Error()))
		fmt.Fprintf(e.stderr, "gpuctl: export of %s from %s failed (%s); trying the next holder\n", image, cp.Host, oneLine(err.Error()))
	}
	if len(failed) > 0 {
		return errs.New(errs.Unavailable, errs.Image(image), "no up holder could export it: %s", strings.Join(failed, "; "))
	}
	if len(ih.holders[image]) > 0 {
		return errs.New(errs.Unavailable, errs.Image(image), "every host that holds it is down (%s)", holderNames(ih.copies(image)))
	}
	return errs.New(errs.NotFound, errs.Image(image), "no host in the cluster holds it; list images with `gpuctl images ls`")
}

// topUp is what a restore's host was sent before the restore: the
// chunks of the image it lacked, from a host that holds the image.
type topUp struct {
	Host      string `json:"host"`       // the host topped up
	From      string `json:"from"`       // the holder that sent the chunks
	SentBytes int64  `json:"sent_bytes"` // what it sent
	Bytes     int64  `json:"bytes"`      // the image's size
	// Failed are the holders tried first, each with why it did not
	// finish.
	Failed []string `json:"failed,omitempty"`
}

// topUpFrom has the first of holders that can do it push image to host
// to (only the chunks to lacks; to verifies each on arrival and commits
// the image, all or nothing). A holder that fails, down or dying in the
// middle, is followed by the next; the holders keep their copies either
// way.
func topUpFrom(ctx context.Context, image string, to registry.Host, holders []registry.Host, dial func(registry.Host) (*control.Client, error)) (*topUp, error) {
	t := &topUp{Host: to.Name}
	for _, h := range holders {
		if h.Name == to.Name || h.State != registry.StateUp {
			continue
		}
		cl, err := dial(h)
		if err == nil {
			var rep *api.PushImageReply
			if rep, err = cl.PushImage(ctx, image, to.API); err == nil {
				t.From, t.SentBytes, t.Bytes = h.Name, rep.SentBytes, rep.Bytes
				return t, nil
			}
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		t.Failed = append(t.Failed, h.Name+": "+oneLine(err.Error()))
	}
	if len(t.Failed) == 0 {
		return nil, errs.New(errs.Unavailable, errs.Image(image), "cannot top up host %s: no other up host holds it", to.Name)
	}
	return nil, errs.New(errs.Unavailable, errs.Image(image), "cannot top up host %s from any holder (%s); the holders keep their copies",
		to.Name, strings.Join(t.Failed, "; "))
}

// topUpTarget tops up the host behind cl when it is a registered host
// that lacks image, from an up holder, and records its new copy; nil
// when it holds the image already (or is not registered: the restore
// then says whether it has it).
func topUpTarget(c *cli.Context, e *env, reg *registry.Client, ih *imageHolders, image string, cl *control.Client) (*topUp, error) {
	to, ok := ih.lookup(cl.Addr())
	if !ok {
		return nil, nil
	}
	if up, holds := ih.holders[image][to.Name]; holds && up {
		return nil, nil
	}
	var holders []registry.Host
	for _, cp := range ih.copies(image) {
		holders = append(holders, ih.hosts[cp.Host])
	}
	stop := e.spinner(c.Bool("json"), "topping up "+to.Name+" with "+image)
	t, err := topUpFrom(c.Context, image, to, holders, func(h registry.Host) (*control.Client, error) { return hostClient(c, h) })
	stop()
	if err != nil {
		return nil, err
	}
	if err := reg.AddCopy(c.Context, registry.Copy{Image: image, Host: to.Name, Session: ih.images[image].Session, Bytes: t.Bytes, Sent: t.SentBytes}); err != nil {
		return nil, err
	}
	out := e.stdout
	if c.Bool("json") {
		out = e.stderr
	}
	fmt.Fprintf(out, "topped up %s with %s of %s's %s from %s\n", to.Name, humanBytes(uint64(t.SentBytes)), image, humanBytes(uint64(t.Bytes)), t.From)
	for _, f := range t.Failed {
		fmt.Fprintf(out, "  not from %s\n", f)
	}
	return t, nil
}

// holdersFor opens the registry for command what and reads where every
// image has copies, saying on stderr which up hosts did not answer. The
// caller closes the client.
func (e *env) holdersFor(c *cli.Context, what string) (*registry.Client, *imageHolders, error) {
	reg, err := needRegistry(c, what)
	if err != nil {
		return nil, nil, err
	}
	ih, err := readHolders(c, reg)
	if err != nil {
		reg.Close()
		return nil, nil, err
	}
	ih.warnUnreachable(e)
	return reg, ih, nil
}
