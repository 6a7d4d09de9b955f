package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/schollz/progressbar/v3"
	"github.com/urfave/cli/v2"
	"golang.org/x/term"

	"github.com/gpuctl/gpuctl/api"
	"github.com/gpuctl/gpuctl/control"
	"github.com/gpuctl/gpuctl/errs"
)

func imagesCommand(e *env) *cli.Command {
	one := func(name, usage, argsUsage string, fn func(ctx context.Context, cl *control.Client, args []string, asJSON bool) error, nargs ...int) *cli.Command {
		flags := []cli.Flag{jsonFlag}
		if clusterWide[name] {
			flags = append(flags, onFlag)
		}
		return &cli.Command{
			Name: name, Usage: usage, ArgsUsage: argsUsage, Flags: flags,
			Action: func(c *cli.Context) error {
				lo, hi := nargs[0], nargs[1]
				if c.NArg() < lo || c.NArg() > hi {
					return usageError("usage: gpuctl images %s %s", name, argsUsage)
				}
				if clusterWide[name] && (c.String("registry") != "" || c.String("on") != "") {
					return e.clusterImages(c, name)
				}
				if name == "ls" && c.String("registry") != "" {
					reg, err := needRegistry(c, "gpuctl images ls")
					if err != nil {
						return err
					}
					defer reg.Close()
					return e.clusterImagesList(c, reg)
				}
				if name == "export" && c.String("registry") != "" {
					return e.clusterExport(c)
				}
				cl, err := apiClient(c)
				if (name == "inspect" || name == "export") && c.String("registry") != "" {
					cl, err = imageClient(c, c.Args().First())
				}
				if err != nil {
					return err
				}
				return fn(c.Context, cl, c.Args().Slice(), c.Bool("json"))
			},
		}
	}
	return &cli.Command{
		Name:  "images",
		Usage: "list, inspect, remove, export, import, verify and collect a host's checkpoint images",
		Description: "An image belongs to the tenant whose session it holds (on a host with tenants).\n" +
			"With a tenant's token, every subcommand sees that tenant's images only; import takes\n" +
			"only the tenant's own exports and keeps their owner; gc is the administrator's (the\n" +
			"host token), since it works on the whole store.\n" +
			"With --registry, rm, verify and gc act on every host concerned (every holder of the\n" +
			"image, every host for gc), one line per host, down hosts reported; import goes to\n" +
			"--on NAME or the registered host --host names; --on limits any of them to one host.",
		Subcommands: []*cli.Command{
			one("ls", "list the host's images", "", e.imagesList, 0, 0),
			one("inspect", "show an image's manifest", "ID", e.imagesInspect, 1, 1),
			one("rm", "remove an image (gc reclaims its space)", "ID", e.imagesRemove, 1, 1),
			one("export", "write an image to one self-contained file on this machine", "ID FILE", e.imagesExport, 2, 2),
			one("import", "load an exported file into the host's store", "FILE", e.imagesImport, 1, 1),
			one("verify", "check every chunk of one image, or of all, against its digest", "[ID]", e.imagesVerify, 0, 1),
			one("gc", "reclaim chunks no image uses and leftovers of failed writes", "", e.imagesGC, 0, 0),
		},
	}
}

// clusterWide are the images subcommands that, with --registry, act on
// every host concerned (or --on's) instead of --host alone.
var clusterWide = map[string]bool{"rm": true, "verify": true, "gc": true, "import": true}

func (e *env) imagesList(ctx context.Context, cl *control.Client, _ []string, asJSON bool) error {
	list, err := cl.Images(ctx) // never nil: an empty list prints as []
	if err != nil {
		return err
	}
	if asJSON {
		return e.printJSON(list)
	}
	if len(list) == 0 {
		e.printf("no images on %s\n", cl.Addr())
		return nil
	}
	now := time.Now()
	if e.now != nil {
		now = e.now()
	}
	tenants := false
	for _, in := range list {
		tenants = tenants || in.Tenant != ""
	}
	tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	header := "ID\tSESSION\tAGE\tSIZE\tNEW\tHOST\tPARENT"
	if tenants {
		header += "\tTENANT"
	}
	fmt.Fprintln(tw, header)
	for _, in := range list {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s", in.ID, orDash(in.Session), age(now.Sub(in.Created)),
			humanBytes(uint64(in.Bytes)), humanBytes(uint64(in.NewBytes)), orDash(in.Host), orDash(in.Parent))
		if tenants {
			fmt.Fprintf(tw, "\t%s", orDash(in.Tenant))
		}
		fmt.Fprintln(tw)
	}
	return tw.Flush()
}

func (e *env) imagesInspect(ctx context.Context, cl *control.Client, args []string, asJSON bool) error {
	d, err := cl.Image(ctx, args[0])
	if err != nil {
		return err
	}
	if asJSON {
		return e.printJSON(d)
	}
	tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	gpus := make([]string, len(d.GPUs))
	for i, g := range d.GPUs {
		gpus[i] = g.Name + " " + g.UUID
	}
	for _, kv := range [][2]string{
		{"id", d.ID}, {"session", d.Session}, {"parent", orDash(d.Parent)}, {"created", d.Created.Format(time.RFC3339)},
		{"host", orDash(d.Host)}, {"backend", orDash(d.Backend)}, {"gpus", orDash(strings.Join(gpus, ", "))},
		{"driver", orDash(d.Driver)}, {"criu", orDash(d.CRIU)}, {"kernel", orDash(d.Kernel)}, {"attach nonce", orDash(d.AttachNonce)},
		{"size", fmt.Sprintf("%s in %d files, %s of it zero; %d chunks (%s)", humanBytes(uint64(d.Bytes)), d.Files, humanBytes(uint64(d.ZeroBytes)), d.Chunks, d.Chunking)},
		{"new bytes", humanBytes(uint64(d.NewBytes)) + " when committed"},
	} {
		fmt.Fprintf(tw, "%s:\t%s\n", kv[0], kv[1])
	}
	for k, v := range d.Labels {
		fmt.Fprintf(tw, "label %s:\t%s\n", k, v)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	tw = tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "\nMODE\tSIZE\tCHUNKS\tPATH")
	for _, f := range d.FileList {
		name := f.Path
		switch f.Type {
		case api.FileDir:
			name += "/"
		case api.FileSymlink:
			name += " -> " + f.Link
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\n", f.Mode, humanBytes(uint64(f.Size)), f.Chunks, name)
	}
	return tw.Flush()
}

func (e *env) imagesRemove(ctx context.Context, cl *control.Client, args []string, asJSON bool) error {
	reply, err := cl.RemoveImage(ctx, args[0])
	if err != nil {
		return err
	}
	if asJSON {
		return e.printJSON(reply)
	}
	e.printf("removed %s (%s of session %s); `gpuctl images gc` reclaims the space\n", reply.ID, humanBytes(uint64(reply.Bytes)), orDash(reply.Session))
	return nil
}

// exportResult is what `images export --json` prints.
type exportResult struct {
	ID        string `json:"id"`
	Session   string `json:"session"`
	Bytes     int64  `json:"bytes"`      // the image's logical size
	File      string `json:"file"`       // where it went
	FileBytes int64  `json:"file_bytes"` // the export's size
}

func (e *env) imagesExport(ctx context.Context, cl *control.Client, args []string, asJSON bool) error {
	id, file := args[0], args[1]
	info, err := cl.Image(ctx, id)
	if err != nil {
		return err
	}
	// Write next to FILE and rename at the end, so FILE is never half
	// an export.
	dir := filepath.Dir(file)
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(file)+".*")
	if err != nil {
		return errs.Wrap(err, errs.InvalidArgument, "", "create %s", file)
	}
	defer os.Remove(tmp.Name())
	defer tmp.Close()
	progress, done := e.progress(asJSON, "exporting "+id, bytesBar)
	n, err := cl.Export(ctx, id, tmp, progress)
	done()
	if err != nil {
		return err
	}
	if err := tmp.Sync(); err != nil {
		return errs.Wrap(err, errs.Internal, "", "write %s", file)
	}
	if err := tmp.Close(); err != nil {
		return errs.Wrap(err, errs.Internal, "", "write %s", file)
	}
	if err := os.Rename(tmp.Name(), file); err != nil {
		return errs.Wrap(err, errs.Internal, "", "rename into %s", file)
	}
	res := exportResult{ID: id, Session: info.Session, Bytes: info.Bytes, File: file, FileBytes: n}
	if asJSON {
		return e.printJSON(res)
	}
	e.printf("exported %s (%s) to %s: %s\n", id, humanBytes(uint64(info.Bytes)), file, humanBytes(uint64(n)))
	return nil
}

func (e *env) imagesImport(ctx context.Context, cl *control.Client, args []string, asJSON bool) error {
	f, err := os.Open(args[0])
	if err != nil {
		return errs.Wrap(err, errs.InvalidArgument, "", "open the export file")
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil || !fi.Mode().IsRegular() {
		return errs.New(errs.InvalidArgument, "", "%s is not a regular file", args[0])
	}
	progress, done := e.progress(asJSON, "importing "+filepath.Base(args[0]), bytesBar)
	reply, err := cl.Import(ctx, f, fi.Size(), progress)
	done()
	if err != nil {
		return err
	}
	if asJSON {
		return e.printJSON(reply)
	}
	e.printf("imported %s (session %s, %s), %s new in the store\n", reply.ID, orDash(reply.Session), humanBytes(uint64(reply.Bytes)), humanBytes(uint64(reply.StoredBytes)))
	return nil
}

func (e *env) imagesVerify(ctx context.Context, cl *control.Client, args []string, asJSON bool) error {
	var req api.VerifyRequest
	what := "every image"
	if len(args) == 1 {
		req.ID, what = args[0], args[0]
	}
	// Progress is streamed only to someone watching a terminal.
	progress, done := e.progress(asJSON, "verifying "+what, chunksBar)
	rep, err := cl.Verify(ctx, req, progress)
	done()
	if err != nil {
		return err
	}
	if asJSON {
		if err := e.printJSON(rep); err != nil {
			return err
		}
		return rep.Err()
	}
	if rep.OK() {
		e.printf("verified %d chunks of %s: all intact\n", rep.Chunks, what)
		return nil
	}
	if rep.Index != "" {
		e.printf("index: %s\n", rep.Index)
	}
	for _, d := range rep.Damaged {
		e.printf("damaged chunk %s used by %s: %s\n", d.Chunk, strings.Join(d.Images, ", "), d.Error)
	}
	return rep.Err()
}

func (e *env) imagesGC(ctx context.Context, cl *control.Client, _ []string, asJSON bool) error {
	st, err := cl.GC(ctx)
	if err != nil {
		return err
	}
	if asJSON {
		return e.printJSON(st)
	}
	e.printf("freed %s: %d chunks, %d packs removed, %d rewritten, %d leftover files\n",
		humanBytes(uint64(st.BytesFreed)), st.ChunksRemoved, st.PacksRemoved, st.PacksRewritten, st.OrphanFiles)
	return nil
}

// terminal returns stdout as a terminal, or nil when it is not one (a
// pipe, a file, a test) or the output is JSON.
func (e *env) terminal(asJSON bool) *os.File {
	f, ok := e.stdout.(*os.File)
	if asJSON || !ok || !term.IsTerminal(int(f.Fd())) {
		return nil
	}
	return f
}

// What a progress bar counts.
type barUnit int

const (
	bytesBar barUnit = iota
	chunksBar
)

// progress draws a transfer's progress on stdout when it is a terminal:
// the bar appears at the first report, which brings the total. It returns
// nil where nobody watches, so that nothing is drawn and a verify is not
// streamed; done clears the bar.
func (e *env) progress(asJSON bool, what string, unit barUnit) (progress control.Progress, done func()) {
	f := e.terminal(asJSON)
	if f == nil {
		return nil, func() {}
	}
	var pb *progressbar.ProgressBar
	progress = func(n, total int64) {
		if pb == nil {
			opts := []progressbar.Option{progressbar.OptionSetWriter(f), progressbar.OptionSetDescription(what),
				progressbar.OptionShowCount(), progressbar.OptionThrottle(80 * time.Millisecond)}
			if unit == bytesBar {
				opts = append(opts, progressbar.OptionShowBytes(true), progressbar.OptionSpinnerType(14))
			} else {
				opts = append(opts, progressbar.OptionSetItsString("chunks"), progressbar.OptionShowIts())
			}
			pb = progressbar.NewOptions64(total, opts...)
		}
		_ = pb.Set64(n)
	}
	return progress, func() {
		if pb != nil {
			_ = pb.Clear()
		}
	}
}
