package main

import (
	"context"
	"encoding/json"
	"net"
	"path/filepath"
	"time"

	"github.com/gpuctl/gpuctl/checkpoint"
	"github.com/gpuctl/gpuctl/checkpoint/criu"
	"github.com/gpuctl/gpuctl/errs"
	"github.com/gpuctl/gpuctl/images"
	"github.com/gpuctl/gpuctl/remoting/backend"
	"github.com/gpuctl/gpuctl/remoting/backend/cuda"
	"github.com/gpuctl/gpuctl/remoting/worker"
	"github.com/gpuctl/gpuctl/restore"
	"github.com/gpuctl/gpuctl/store"
)

// routers builds the session listing and the checkpoint, restore,
// migration and image services from the daemon's parts: the session
// manager is their session table and reattacher, the host store holds the
// images.
func (d *daemon) routers() ([]router, error) {
	crOpts := criu.Options{LogDir: filepath.Join(d.cfg.stateDir, "work"), Binary: d.criu.Path}
	work := filepath.Join(d.cfg.stateDir, "work")
	imgs := imageStore{st: d.store, driver: d.host.DriverVersion}

	var (
		suspender checkpoint.Suspender
		resumer   restore.Resumer
		gpus      = d.host.GPUs
	)
	if d.workerOp.Backend == worker.BackendCUDA {
		cp, err := cuda.NewCheckpointer("", d.log)
		if err != nil {
			return nil, err
		}
		suspender = cuda.SuspendHook{Checkpointer: cp}
		resumer = cuda.RestoreHook{Checkpointer: cp, Host: d.host, Target: d.cfg.device}
		if gpus, err = cuda.ManifestGPUs(d.host, d.cfg.device); err != nil {
			return nil, err
		}
	}
	ckpt := &checkpoint.Service{
		Pipeline: &checkpoint.Pipeline{
			WorkDir: work, CRIU: crOpts, Suspender: suspender, Store: imgs, Reattach: d.manager,
			Host: d.cfg.name, Backend: d.workerOp.Backend, Driver: d.host.DriverVersion, GPUs: gpus, Log: d.log,
		},
		Sessions: d.manager,
		Log:      d.log,
		OnStep:   func(step string, took time.Duration) { d.metrics.ObserveStep(step, took) },
	}
	rst := &restore.Service{
		Restorer: &restore.Restorer{
			WorkDir: work, CRIU: crOpts, Store: imgs, Resumer: resumer, Reattach: d.manager,
			Backend: d.workerOp.Backend, Log: d.log,
			Admit: func(m checkpoint.Meta) error { return d.manager.Admit(m.Session, m.Epoch) },
		},
		Sessions: d.manager,
		Listen:   advertised(d.cfg.listen, ""),
		Log:      d.log,
	}
	return append([]router{d.manager, ckpt, rst}, d.transferRouters(ckpt, rst, imgs)...), nil
}

// labelGPUs carries the full GPU records (memory, PCI bus) of
// checkpoint.Meta through an image manifest, which names only models and
// UUIDs.
const labelGPUs = "gpuctl.gpus"

// imageStore adapts package images to the checkpoint pipeline
// (checkpoint.Store) and the restore pipeline (restore.Store).
type imageStore struct {
	st     *store.Store
	driver string
}

func (s imageStore) Commit(ctx context.Context, dir string, meta checkpoint.Meta) (checkpoint.Stored, error) {
	full, err := json.Marshal(meta.GPUs)
	if err != nil {
		return checkpoint.Stored{}, err
	}
	gpus := make([]images.GPU, len(meta.GPUs))
	for i, g := range meta.GPUs {
		gpus[i] = images.GPU{Model: g.Name, UUID: g.UUID}
	}
	driver := meta.Driver
	if driver == "" {
		driver = s.driver
	}
	m, stats, err := images.Commit(ctx, s.st, dir, images.Meta{
		Session: meta.Session, Parent: meta.Parent, Host: meta.Host, Backend: meta.Backend, GPUs: gpus,
		Driver: driver, CRIU: meta.CRIUVersion, Kernel: meta.Kernel, AttachNonce: meta.Nonce, Epoch: meta.Epoch,
		Labels: map[string]string{labelGPUs: string(full)},
	})
	if err != nil {
		return checkpoint.Stored{}, err
	}
	return checkpoint.Stored{Image: m.ID, Bytes: stats.LogicalBytes, StoredBytes: stats.StoredBytes}, nil
}

func (s imageStore) Checkout(ctx context.Context, id, dir string) (checkpoint.Meta, error) {
	m, err := images.Checkout(ctx, s.st, id, dir)
	if err != nil {
		return checkpoint.Meta{}, err
	}
	var gpus []backend.GPU
	if raw, ok := m.Labels[labelGPUs]; ok {
		if err := json.Unmarshal([]byte(raw), &gpus); err != nil {
			return checkpoint.Meta{}, errs.Wrap(err, errs.DataLoss, errs.Image(id), "GPU list in the manifest")
		}
	} else {
		for i, g := range m.GPUs {
			gpus = append(gpus, backend.GPU{Index: i, Name: g.Model, UUID: g.UUID})
		}
	}
	return checkpoint.Meta{
		Session: m.Session, Parent: m.Parent, Host: m.Host, Backend: m.Backend, Driver: m.Driver, GPUs: gpus,
		CRIUVersion: m.CRIU, Kernel: m.Kernel, Nonce: m.AttachNonce, Created: m.Created, Epoch: m.Epoch,
	}, nil
}

// advertised is the address to give clients for a listen address: as is
// when it names a host, else (0.0.0.0, ::) the local IP a peer reached
// us at, or "" when that is unknown.
func advertised(listen string, localIP string) string {
	host, port, err := net.SplitHostPort(listen)
	if err != nil {
		return ""
	}
	if ip := net.ParseIP(host); host != "" && (ip == nil || !ip.IsUnspecified()) {
		return listen
	}
	if localIP == "" {
		return ""
	}
	return net.JoinHostPort(localIP, port)
}
