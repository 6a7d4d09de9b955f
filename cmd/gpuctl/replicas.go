package main

import (
	"fmt"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/gpuctl/gpuctl/api"
	"github.com/gpuctl/gpuctl/control"
	"github.com/gpuctl/gpuctl/errs"
	"github.com/gpuctl/gpuctl/registry"
)

// imageCopy is one host that holds an image.
type imageCopy struct {
	Host   string `json:"host"`
	State  string `json:"state"`            // the host's: up or down
	Origin bool   `json:"origin,omitempty"` // it committed the image
}

// clusterImage is an image as `images ls` lists it with --registry: the
// summary, and every host that holds it.
type clusterImage struct {
	api.Image
	Copies []imageCopy `json:"copies"`
}

// imageHolders is where images are in the cluster: each up host's own
// listing, and for down hosts the copies the registry records.
type imageHolders struct {
	hosts   map[string]registry.Host
	images  map[string]api.Image       // by id, from the first listing that has it
	holders map[string]map[string]bool // image -> host -> up
	origin  map[string]string          // image -> the host that committed it
	// unreachable are up hosts whose listing failed, with why: their
	// copies are taken from the registry, as a down host's are.
	unreachable map[string]string
}

func readHolders(c *cli.Context, reg *registry.Client) (*imageHolders, error) {
	ctx := c.Context
	hs, err := reg.Hosts(ctx)
	if err != nil {
		return nil, err
	}
	copies, err := reg.AllCopies(ctx)
	if err != nil {
		return nil, err
	}
	ih := &imageHolders{hosts: map[string]registry.Host{}, images: map[string]api.Image{}, holders: map[string]map[string]bool{}, origin: map[string]string{}}
	add := func(img, host string, up bool) {
		if ih.holders[img] == nil {
			ih.holders[img] = map[string]bool{}
		}
		ih.holders[img][host] = up
	}
	for _, h := range hs {
		ih.hosts[h.Name] = h
		if h.State != registry.StateUp {
			continue
		}
		cl, err := hostClient(c, h)
		if err != nil {
			return nil, err
		}
		list, err := cl.Images(ctx)
		if errs.IsUnavailable(err) {
			// Up by its lease, yet not answering (it may have just died):
			// the commands that need it say so host by host.
			if ih.unreachable == nil {
				ih.unreachable = map[string]string{}
			}
			ih.unreachable[h.Name] = oneLine(err.Error())
			continue
		}
		if err != nil {
			return nil, errs.Wrap(err, errs.KindOf(err), errs.Host(h.Name), "list images")
		}
		for _, im := range list {
			if _, ok := ih.images[im.ID]; !ok {
				ih.images[im.ID] = im
			}
			add(im.ID, h.Name, true)
		}
	}
	for img, cs := range copies {
		for _, cp := range cs {
			if cp.Origin {
				ih.origin[img] = cp.Host
			}
			h, known := ih.hosts[cp.Host]
			if _, silent := ih.unreachable[cp.Host]; known && h.State == registry.StateUp && !silent {
				continue // an up host's own listing is the truth
			}
			add(img, cp.Host, false)
			if _, ok := ih.images[img]; !ok {
				ih.images[img] = api.Image{ID: img, Session: cp.Session, Bytes: cp.Bytes, Host: cp.Host, Created: cp.At}
			}
		}
	}
	return ih, nil
}

// copies lists an image's holders, up ones first, then by name.
func (ih *imageHolders) copies(img string) []imageCopy {
	out := []imageCopy{}
	for h, up := range ih.holders[img] {
		st := registry.StateDown
		if up {
			st = registry.StateUp
		}
		out = append(out, imageCopy{Host: h, State: st, Origin: ih.origin[img] == h || (ih.origin[img] == "" && ih.images[img].Host == h)})
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].State != out[j].State {
			return out[i].State == registry.StateUp
		}
		return out[i].Host < out[j].Host
	})
	return out
}

// clusterImagesList is `images ls` with --registry.
func (e *env) clusterImagesList(c *cli.Context, reg *registry.Client) error {
	ih, err := readHolders(c, reg)
	if err != nil {
		return err
	}
	ih.warnUnreachable(e)
	list := make([]clusterImage, 0, len(ih.images))
	for id, im := range ih.images {
		list = append(list, clusterImage{Image: im, Copies: ih.copies(id)})
	}
	sort.SliceStable(list, func(i, j int) bool {
		if !list[i].Created.Equal(list[j].Created) {
			return list[i].Created.Before(list[j].Created)
		}
		return list[i].ID < list[j].ID
	})
	if c.Bool("json") {
		return e.printJSON(list)
	}
	if len(list) == 0 {
		e.printf("no images in the cluster\n")
		return nil
	}
	now := time.Now()
	if e.now != nil {
		now = e.now()
	}
	tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tSESSION\tAGE\tSIZE\tFROM\tCOPIES")
	for _, in := range list {
		var cs []string
		for _, cp := range in.Copies {
			s := cp.Host
			if cp.State != registry.StateUp {
				s += " (down)"
			}
			cs = append(cs, s)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", in.ID, orDash(in.Session), age(now.Sub(in.Created)), humanBytes(uint64(in.Bytes)),
			orDash(in.Host), orDash(strings.Join(cs, ", ")))
	}
	return tw.Flush()
}

// imageClient is the client of a host that holds image: with --registry
// an up holder (its origin first), else --host.
func imageClient(c *cli.Context, image string) (*control.Client, error) {
	reg, err := dialRegistry(c)
	if err != nil || reg == nil {
		if err != nil {
			return nil, err
		}
		return apiClient(c)
	}
	defer reg.Close()
	ih, err := readHolders(c, reg)
	if err != nil {
		return nil, err
	}
	for _, cp := range ih.copies(image) {
		if cp.State == registry.StateUp {
			return hostClient(c, ih.hosts[cp.Host])
		}
	}
	if len(ih.holders[image]) > 0 {
		return nil, errs.New(errs.Unavailable, errs.Image(image), "every host that holds it is down (%s)", holderNames(ih.copies(image)))
	}
	return nil, errs.New(errs.NotFound, errs.Image(image), "no host in the cluster holds it; list images with `gpuctl images ls`")
}

func holderNames(cs []imageCopy) string {
	var s []string
	for _, cp := range cs {
		s = append(s, cp.Host+" "+cp.State)
	}
	return strings.Join(s, ", ")
}

// restoreTarget resolves where `restore IMAGE` runs: --on auto (or, with
// --registry and no --host, by default) picks a host that holds the
// image, --on NAME a registered host, --on HOST:PORT that address;
// without --on and --registry, --host.
// With --registry, a chosen host that lacks the image is first topped up
// from a host that holds it (topUpTarget), which the result reports.
func restoreTarget(c *cli.Context, e *env, image string) (*control.Client, *topUp, error) {
	on := c.String("on")
	reg, err := dialRegistry(c)
	if err != nil {
		return nil, nil, err
	}
	if reg == nil {
		var cl *control.Client
		switch {
		case on == "auto":
			return nil, nil, errs.New(errs.InvalidArgument, "", "--on auto needs the cluster registry: pass --registry URLS or set GPUCTL_REGISTRY")
		case on != "":
			cl, err = hostClient(c, registry.Host{Name: on, API: on})
		default:
			cl, err = apiClient(c)
		}
		return cl, nil, err
	}
	defer reg.Close()
	if on == "" && c.IsSet("host") {
		cl, err := apiClient(c)
		return cl, nil, err
	}
	ih, err := readHolders(c, reg)
	if err != nil {
		return nil, nil, err
	}
	cl, err := func() (*control.Client, error) {
		if on != "" && on != "auto" {
			if h, ok := ih.hosts[on]; ok {
				return hostClient(c, h)
			}
			return hostClient(c, registry.Host{Name: on, API: on})
		}
		p, err := placeImage(c, reg, ih, image)
		if err != nil {
			return nil, err
		}
		out := e.stdout
		if c.Bool("json") {
			out = e.stderr
		}
		fmt.Fprintf(out, "restoring %s on %s: %s\n", image, p.host.Name, p.why)
		for _, r := range p.others {
			fmt.Fprintf(out, "  not %s\n", r)
		}
		return hostClient(c, p.host)
	}()
	if err != nil {
		return nil, nil, err
	}
	t, err := topUpTarget(c, e, reg, ih, image, cl)
	return cl, t, err
}

// placeImage picks a host to restore image on: up, compatible with the
// image (its backend, a GPU of its model, a driver not older than the
// one it was made with), holding the image, and taking its session over
// is allowed (the registry's owner record is not live on another up
// host); ranked by the most free device memory.
func placeImage(c *cli.Context, reg *registry.Client, ih *imageHolders, image string) (placement, error) {
	ctx := c.Context
	var out placement
	if len(ih.holders[image]) == 0 {
		return out, errs.New(errs.NotFound, errs.Image(image), "no host in the cluster holds it; list images with `gpuctl images ls`")
	}
	// The image's requirements, from an up holder's manifest.
	var det *api.ImageDetail
	for _, cp := range ih.copies(image) {
		if cp.State != registry.StateUp {
			continue
		}
		if cl, err := hostClient(c, ih.hosts[cp.Host]); err == nil {
			if det, err = cl.Image(ctx, image); err == nil {
				break
			}
		}
	}
	if det == nil {
		return out, errs.New(errs.Unavailable, errs.Image(image), "every host that holds it is down (%s); start one of them, or import an export of it elsewhere", holderNames(ih.copies(image)))
	}
	if o, err := reg.Owner(ctx, det.Session); err == nil && o.Live {
		if h, ok := ih.hosts[o.Host]; ok && h.State == registry.StateUp {
			return out, errs.New(errs.FailedPrecondition, errs.Session(det.Session), "live on host %s (token %d): restoring its image elsewhere would run it twice; migrate it instead", o.Host, o.Token)
		}
		return out, errs.New(errs.FailedPrecondition, errs.Session(det.Session),
			"live on host %s, which is down but may still run it cut off from the registry; no host takes it over until %s checkpoints it or its record is moved (docs/cluster.md, \"Takeover\")", o.Host, o.Host)
	}
	self := registry.Host{Backend: det.Backend, Driver: det.Driver}
	for _, g := range det.GPUs {
		self.GPUs = append(self.GPUs, g)
	}
	var hs []registry.Host
	for _, h := range ih.hosts {
		hs = append(hs, h)
	}
	sort.Slice(hs, func(i, j int) bool { return hs[i].Name < hs[j].Name })
	cands, why := registry.Candidates(self, hs, nil)
	out.others = append(out.others, why...)
	var chunks *api.ImageChunksReply
	for _, cp := range ih.copies(image) {
		if cl, err := hostClient(c, ih.hosts[cp.Host]); err == nil && cp.State == registry.StateUp {
			if chunks, err = cl.ImageChunks(ctx, image); err == nil {
				break
			}
		}
	}
	// Hosts that hold the image come first; one that holds only part of
	// it (chunks of an earlier image, a replica cut short) is topped up
	// from a holder before the restore, so the more it holds the better.
	type cand struct {
		h     registry.Host
		share float64
		holds bool
	}
	var ok []cand
	for _, h := range cands {
		if _, holds := ih.holders[image][h.Name]; holds {
			ok = append(ok, cand{h, 1, true})
			continue
		}
		share := 0.0
		if cl, err := hostClient(c, h); err == nil {
			share = chunkShare(ctx, cl, chunks)
		}
		ok = append(ok, cand{h, share, false})
	}
	if len(ok) == 0 {
		return out, errs.New(errs.ResourceExhausted, errs.Image(image), "no up host can restore it: %s", orDash(strings.Join(out.others, "; ")))
	}
	sort.SliceStable(ok, func(i, j int) bool { return ok[i].share > ok[j].share }) // cands come by free memory
	reason := func(x cand) string {
		held := "holds the image"
		if !x.holds {
			held = fmt.Sprintf("holds %.0f%% of the image's chunks (by bytes), the rest to be sent from a holder", 100*x.share)
		}
		return fmt.Sprintf("%s, %s backend, %s free, driver %s", held, x.h.Backend, humanBytes(x.h.MemFreeBytes), orDash(x.h.Driver))
	}
	out.host, out.why = ok[0].h, reason(ok[0])
	for _, x := range ok[1:] {
		out.others = append(out.others, x.h.Name+": ranked lower: "+reason(x))
	}
	return out, nil
}

// clusterResume is `resume SESSION` with --registry: done is false when
// the ordinary resume (on --host) applies. The session's owner host
// resumes it, with --on also naming a registered host; a session whose
// owner host is down, and which the registry records in an image, is
// restored from a copy of that image on an up, compatible host that holds
// one (restore --on auto), which takes it over.
func clusterResume(c *cli.Context, e *env) (done bool, err error) {
	if c.String("registry") == "" || c.String("selector") != "" || c.NArg() != 1 {
		return false, nil
	}
	id := c.Args().First()
	reg, err := needRegistry(c, "gpuctl resume")
	if err != nil {
		return true, err
	}
	defer reg.Close()
	o, err := reg.Owner(c.Context, id)
	if err != nil {
		return true, err
	}
	ih, err := readHolders(c, reg)
	if err != nil {
		return true, err
	}
	on := c.String("on")
	if h, ok := ih.hosts[on]; ok {
		on = h.API
	}
	if h, ok := ih.hosts[o.Host]; ok && h.State == registry.StateUp {
		cl, err := hostClient(c, h)
		if err != nil {
			return true, err
		}
		return true, runResume(c.Context, e, cl, []string{id}, on, c.Bool("json"))
	}
	if o.Live || o.Image == "" {
		return true, errs.New(errs.FailedPrecondition, errs.Session(id), "its host %s is down and the registry has it live there, not in an image; "+
			"no host takes it over (docs/cluster.md, \"Takeover\")", o.Host)
	}
	var cl *control.Client
	if on != "" {
		if cl, err = hostClient(c, registry.Host{Name: on, API: on}); err != nil {
			return true, err
		}
	} else {
		p, err := placeImage(c, reg, ih, o.Image)
		if err != nil {
			return true, err
		}
		out := e.stdout
		if c.Bool("json") {
			out = e.stderr
		}
		fmt.Fprintf(out, "resuming %s from image %s on %s (its host %s is down): %s\n", id, o.Image, p.host.Name, o.Host, p.why)
		for _, r := range p.others {
			fmt.Fprintf(out, "  not %s\n", r)
		}
		if cl, err = hostClient(c, p.host); err != nil {
			return true, err
		}
	}
	t, err := topUpTarget(c, e, reg, ih, o.Image, cl)
	if err != nil {
		return true, err
	}
	stop := e.spinner(c.Bool("json"), "resuming "+id)
	res, err := cl.Restore(c.Context, o.Image)
	stop()
	if err != nil {
		return true, err
	}
	rep := resumeResult{ResumeReply: api.ResumeReply{Session: res.Session, Host: cl.Addr(), Listen: res.Listen, Image: res.Image, DurationMS: res.DurationMS}, TopUp: t}
	if c.Bool("json") {
		return true, e.printJSON([]resumeResult{rep})
	}
	e.printf("resumed %s on %s in %d ms from %s; its client finds it through any gpud it knows\n", rep.Session, rep.Host, rep.DurationMS, rep.Image)
	return true, nil
}

// resumeResult is a resume's reply as gpuctl prints it with --registry:
// with what the host was topped up with, when it lacked the image.
type resumeResult struct {
	api.ResumeReply
	TopUp *topUp `json:"topped_up,omitempty"`
}
