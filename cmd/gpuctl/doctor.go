package main

import (
	"context"
	"crypto/tls"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/urfave/cli/v2"
	"golang.org/x/sys/unix"

	"github.com/gpuctl/gpuctl/api"
	"github.com/gpuctl/gpuctl/checkpoint/criu/criubin"
	"github.com/gpuctl/gpuctl/control"
)

// doctorArgs are gpuctl doctor's inputs.
type doctorArgs struct {
	host      string // gpud API address; "" skips the host checks
	hostSet   bool   // the user named the host, so not reaching it is a problem
	token     string
	tokenErr  error
	tls       *tls.Config // --tls-ca; nil is plain HTTP
	criu      string      // explicit criu binary, or ""
	stateDir  string      // a local gpud state dir to inspect, or ""
	asJSON    bool
	nvidiaSMI string // nvidia-smi binary name or path
}

// doctorReport is what gpuctl doctor found; --json prints it as is.
type doctorReport struct {
	CRIU     criuReport    `json:"criu"`
	Kernel   string        `json:"kernel"`
	Root     bool          `json:"root"`
	Host     *hostReport   `json:"host,omitempty"`
	LocalGPU localGPUs     `json:"local_gpus"`
	Store    *storeReport  `json:"store,omitempty"`
	Problems []string      `json:"problems"`
	Notes    []string      `json:"notes,omitempty"`
	Duration time.Duration `json:"-"`
}

type criuReport struct {
	Path string `json:"path,omitempty"`
	// Source is where it was found (criubin.Source): flag, GPUCTL_CRIU,
	// bundle, build tree or PATH.
	Source  string `json:"source,omitempty"`
	Version string `json:"version,omitempty"`
	Check   string `json:"check,omitempty"` // criu check's verdict
	OK      bool   `json:"ok"`
	// Breakpoints: hardware breakpoints trap on this host; where they
	// do not, gpuctl runs CRIU without them (CRIU_FAULT=130) and says so.
	Breakpoints bool `json:"breakpoints"`
}

type hostReport struct {
	Addr      string        `json:"addr"`
	Reachable bool          `json:"reachable"`
	Error     string        `json:"error,omitempty"`
	Info      *api.HostInfo `json:"info,omitempty"`
	// CRIU is what the host's gpud checkpoints with, as it reports it.
	CRIU   *api.CRIU `json:"criu,omitempty"`
	Images *int      `json:"images,omitempty"`
	Bytes  *uint64   `json:"image_bytes,omitempty"`
}

type localGPUs struct {
	Tool   string    `json:"tool,omitempty"` // what answered, e.g. "nvidia-smi"
	Driver string    `json:"driver,omitempty"`
	GPUs   []api.GPU `json:"gpus"`
	Error  string    `json:"error,omitempty"`
}

type storeReport struct {
	Dir       string `json:"dir"`
	Exists    bool   `json:"exists"`
	Writable  bool   `json:"writable"`
	FreeBytes uint64 `json:"free_bytes"`
	BlobBytes uint64 `json:"blob_bytes"`
}

func doctorCommand(e *env) *cli.Command {
	return &cli.Command{
		Name:  "doctor",
		Usage: "check this machine and a gpud host for what checkpoints need, and say what to fix",
		Description: "Reports CRIU's version and `criu check`, the kernel, the GPUs and driver (from the\n" +
			"host's API and from nvidia-smi here), and the store. Exits non-zero when it finds a problem.",
		Flags: []cli.Flag{
			jsonFlag,
			&cli.StringFlag{Name: "criu", Usage: "criu binary to check (default: as gpud finds it)", EnvVars: []string{"GPUCTL_CRIU"}},
			&cli.StringFlag{Name: "state-dir", Usage: "a gpud --state-dir on this machine to inspect", EnvVars: []string{"GPUCTL_STATE_DIR"}},
		},
		Action: func(c *cli.Context) error {
			a := doctorArgs{
				host:      c.String("host"),
				hostSet:   c.IsSet("host"),
				criu:      c.String("criu"),
				stateDir:  c.String("state-dir"),
				asJSON:    c.Bool("json"),
				nvidiaSMI: "nvidia-smi",
			}
			tf := c.String("token-file")
			if tf == "" && a.stateDir != "" && os.Getenv("GPUCTL_TOKEN") == "" {
				// A host's own state dir holds its token.
				if _, err := os.Stat(filepath.Join(a.stateDir, "token")); err == nil {
					tf = filepath.Join(a.stateDir, "token")
				}
			}
			a.token, a.tokenErr = readToken(tf)
			var err error
			if a.tls, err = clientTLS(c); err != nil {
				return err
			}
			return runDoctor(c.Context, e, a)
		},
	}
}

func runDoctor(ctx context.Context, e *env, a doctorArgs) error {
	r := diagnose(ctx, a)
	if a.asJSON {
		if err := e.printJSON(r); err != nil {
			return err
		}
	} else {
		printDoctor(e, r)
	}
	if n := len(r.Problems); n > 0 {
		return cli.Exit(fmt.Sprintf("doctor found %d problem(s); each says what to fix", n), 1)
	}
	return nil
}

func diagnose(ctx context.Context, a doctorArgs) *doctorReport {
	r := &doctorReport{Root: os.Geteuid() == 0, Problems: []string{}}
	problem := func(format string, args ...any) { r.Problems = append(r.Problems, fmt.Sprintf(format, args...)) }
	note := func(format string, args ...any) { r.Notes = append(r.Notes, fmt.Sprintf(format, args...)) }

	var uts unix.Utsname
	if err := unix.Uname(&uts); err == nil {
		r.Kernel = unix.ByteSliceToString(uts.Release[:])
	}
	if !r.Root {
		problem("not root: CRIU dumps and restores need root; run gpud (and this check) as root")
	}

	// CRIU, found the way gpud finds it.
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if found, err := criubin.Locate(a.criu); err != nil {
		problem("%v", err)
	} else {
		bin := found.Path
		r.CRIU.Path, r.CRIU.Source = bin, string(found.Source)
		v, err := criubin.VersionOf(cctx, bin)
		switch {
		case err != nil:
			problem("criu at %s does not run: %v; run `make deps` for a working bundle", bin, err)
		case !v.AtLeast(criubin.MinVersion):
			r.CRIU.Version = v.String()
			problem("criu %s at %s is older than %s and fails on kernels >= 6.13; run `make deps` and point gpud at .deps/criu/criu (--criu or GPUCTL_CRIU)", v, bin, criubin.MinVersion)
		default:
			r.CRIU.Version = v.String()
			out, err := criubin.Check(cctx, bin)
			r.CRIU.Check = lastLine(out)
			if err != nil {
				problem("`criu check` fails: %s; the kernel lacks a feature CRIU needs", lastLine(out))
			} else {
				r.CRIU.OK = true
			}
			bp := criubin.Breakpoints()
			r.CRIU.Breakpoints = bp.Work
			if !bp.Work {
				note("hardware breakpoints do not work here (%s): CRIU runs without them (CRIU_FAULT=130), which checkpoints and restores as well, a little slower", bp.Why)
			}
		}
	}

	// The host, through its API.
	if a.host != "" {
		h := &hostReport{Addr: a.host}
		r.Host = h
		switch {
		case a.tokenErr != nil:
			h.Error = a.tokenErr.Error()
			if a.hostSet {
				problem("cannot ask host %s: %v", a.host, a.tokenErr)
			} else {
				r.Notes = append(r.Notes, fmt.Sprintf("host %s not checked: no token (pass --host and --token-file to check one)", a.host))
			}
		default:
			cl := control.NewClient(a.host, a.token, control.WithTLS(a.tls))
			hctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			host, err := cl.Host(hctx)
			cancel()
			if err != nil {
				h.Error = err.Error()
				if a.hostSet {
					problem("%v", err)
				} else {
					r.Notes = append(r.Notes, fmt.Sprintf("no gpud answered at %s (pass --host to check one)", a.host))
				}
				break
			}
			info := host.HostInfo
			h.Reachable, h.Info, h.CRIU = true, &info, host.CRIU
			if info.Backend == "cuda" && len(info.GPUs) == 0 {
				problem("host %s runs the cuda backend but reports no GPUs; check the driver with nvidia-smi there", a.host)
			}
			if c := host.CRIU; c != nil && c.Error != "" {
				problem("host %s cannot checkpoint: %s", a.host, c.Error)
			}
			ictx, cancel := context.WithTimeout(ctx, 5*time.Second)
			if imgs, err := cl.Images(ictx); err == nil {
				n, total := len(imgs), uint64(0)
				for _, i := range imgs {
					total += uint64(i.Bytes)
				}
				h.Images, h.Bytes = &n, &total
			} else {
				problem("host %s: listing its images failed: %v", a.host, err)
			}
			cancel()
		}
	}

	// GPUs on this machine.
	r.LocalGPU = probeLocalGPUs(ctx, a.nvidiaSMI)
	if r.LocalGPU.Error != "" && r.LocalGPU.Tool != "" {
		problem("nvidia-smi is installed but failed: %s; fix the NVIDIA driver or gpud will fall back to the emulated backend", r.LocalGPU.Error)
	}

	// A local store.
	if a.stateDir != "" {
		s := inspectStore(a.stateDir)
		r.Store = s
		switch {
		case !s.Exists:
			problem("state dir %s does not exist; gpud creates it on first start, or pass the right --state-dir", a.stateDir)
		case !s.Writable:
			problem("state dir %s is not writable; run gpud as its owner (root for CRIU)", a.stateDir)
		case s.FreeBytes < 1<<30:
			problem("state dir %s has only %s free; checkpoints need room for images: free space or run `gpuctl images gc`", a.stateDir, humanBytes(s.FreeBytes))
		}
	}
	return r
}

// probeLocalGPUs asks nvidia-smi for the GPUs and driver here. A machine
// without it simply has no local GPUs; that is not a problem.
func probeLocalGPUs(ctx context.Context, tool string) localGPUs {
	bin, err := exec.LookPath(tool)
	if err != nil {
		return localGPUs{GPUs: []api.GPU{}}
	}
	l := localGPUs{Tool: bin, GPUs: []api.GPU{}}
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, bin, "--query-gpu=index,name,uuid,memory.total,pci.bus_id,driver_version",
		"--format=csv,noheader,nounits").CombinedOutput()
	if err != nil {
		l.Error = lastLine(string(out))
		if l.Error == "" {
			l.Error = err.Error()
		}
		return l
	}
	gpus, driver := parseNvidiaSMI(string(out))
	l.GPUs, l.Driver = gpus, driver
	return l
}

// parseNvidiaSMI reads nvidia-smi's CSV: index, name, uuid, memory.total
// (MiB), pci.bus_id, driver_version. Unparseable lines are skipped.
func parseNvidiaSMI(out string) ([]api.GPU, string) {
	gpus := []api.GPU{}
	driver := ""
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		f := strings.Split(line, ",")
		if len(f) != 6 {
			continue
		}
		for i := range f {
			f[i] = strings.TrimSpace(f[i])
		}
		idx, err1 := strconv.Atoi(f[0])
		mib, err2 := strconv.ParseUint(f[3], 10, 64)
		if err1 != nil || err2 != nil {
			continue
		}
		gpus = append(gpus, api.GPU{Index: idx, Name: f[1], UUID: f[2], MemoryBytes: mib << 20, PCIBusID: f[4]})
		driver = f[5]
	}
	return gpus, driver
}

func inspectStore(dir string) *storeReport {
	s := &storeReport{Dir: dir}
	st, err := os.Stat(dir)
	if err != nil || !st.IsDir() {
		return s
	}
	s.Exists = true
	s.Writable = unix.Access(dir, unix.W_OK) == nil
	var fs unix.Statfs_t
	if unix.Statfs(dir, &fs) == nil {
		s.FreeBytes = fs.Bavail * uint64(fs.Bsize)
	}
	_ = filepath.WalkDir(filepath.Join(dir, "blobs"), func(_ string, d os.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			if fi, err := d.Info(); err == nil {
				s.BlobBytes += uint64(fi.Size())
			}
		}
		return nil
	})
	return s
}

func printDoctor(e *env, r *doctorReport) {
	switch {
	case r.CRIU.Path == "":
		e.printf("criu     not found\n")
	case r.CRIU.Version == "":
		e.printf("criu     %s (does not run)\n", r.CRIU.Path)
	default:
		e.printf("criu     %s at %s (%s); criu check: %s\n", r.CRIU.Version, r.CRIU.Path, r.CRIU.Source, orDash(r.CRIU.Check))
	}
	e.printf("kernel   %s\n", r.Kernel)
	if h := r.Host; h != nil {
		if h.Reachable {
			e.printf("host     %s: backend %s, driver %s, %d GPU(s)\n", h.Addr, h.Info.Backend, orDash(h.Info.DriverVersion), len(h.Info.GPUs))
			for _, g := range h.Info.GPUs {
				e.printf("           gpu %d: %s, %s, %s\n", g.Index, g.Name, humanBytes(g.MemoryBytes), g.UUID)
			}
			switch c := h.CRIU; {
			case c == nil:
			case c.Path == "":
				e.printf("           criu: none (%s)\n", c.Error)
			default:
				e.printf("           criu: %s at %s (%s)\n", orDash(c.Version), c.Path, c.Source)
			}
			if h.Images != nil {
				e.printf("           store: %d image(s), %s\n", *h.Images, humanBytes(*h.Bytes))
			}
		} else {
			e.printf("host     %s: not reached\n", h.Addr)
		}
	}
	switch {
	case r.LocalGPU.Tool == "":
		e.printf("gpus     none here (no nvidia-smi)\n")
	case r.LocalGPU.Error != "":
		e.printf("gpus     nvidia-smi failed\n")
	default:
		e.printf("gpus     %d here, driver %s\n", len(r.LocalGPU.GPUs), orDash(r.LocalGPU.Driver))
		for _, g := range r.LocalGPU.GPUs {
			e.printf("           gpu %d: %s, %s, %s\n", g.Index, g.Name, humanBytes(g.MemoryBytes), g.PCIBusID)
		}
	}
	if s := r.Store; s != nil && s.Exists {
		e.printf("store    %s: %s free, %s in blobs\n", s.Dir, humanBytes(s.FreeBytes), humanBytes(s.BlobBytes))
	}
	for _, n := range r.Notes {
		e.printf("note     %s\n", n)
	}
	if len(r.Problems) == 0 {
		e.printf("ok       nothing to fix\n")
		return
	}
	for _, p := range r.Problems {
		e.printf("problem  %s\n", p)
	}
}

func lastLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		return strings.TrimSpace(s[i+1:])
	}
	return s
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func humanBytes(n uint64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := uint64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}
