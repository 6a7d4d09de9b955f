package main

import (
	"context"
	"net"
	"path/filepath"
	"time"

	"github.com/gpuctl/gpuctl/checkpoint"
	"github.com/gpuctl/gpuctl/checkpoint/criu"
	"github.com/gpuctl/gpuctl/devmem/devstore"
	"github.com/gpuctl/gpuctl/images"
	"github.com/gpuctl/gpuctl/migrate/stage"
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
	crOpts := criu.Options{LogDir: filepath.Join(d.cfg.stateDir, "work"), Binary: d.criu.Path, LogLevel: d.cfg.criuLogLevel}
	work := filepath.Join(d.cfg.stateDir, "work")
	imgs := imageStore{st: d.store}

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
	// Workers save their own device memory (package devmem) block by
	// block into the store: all of it on the emulated backend; on cuda
	// what cuMemAlloc gave out, the driver's checkpoint saving the rest
	// (all of it with --cuda-plain-memory, where the worker lists none).
	mem := &devstore.Keeper{Store: d.store}
	ckpt := &checkpoint.Service{
		Pipeline: &checkpoint.Pipeline{
			WorkDir: work, CRIU: crOpts, Suspender: suspender, Store: imgs, Reattach: d.manager,
			Host: d.cfg.name, Backend: d.workerOp.Backend, Driver: d.host.DriverVersion, GPUs: gpus, Log: d.log,
			Mem: mem, NoPark: !d.cfg.park, NoReuse: !d.cfg.reuseDump, Departed: &worker.Departed{},
		},
		Sessions: d.sessionTable(),
		Log:      d.log,
		OnStep:   func(step string, took time.Duration) { d.metrics.ObserveStep(step, took); d.stepDone(step) },
	}
	// A migration's target keeps the device memory the rounds pre-copy
	// in memory for the restore (bounded; the store has it too).
	staged := &stage.Stager{Store: d.store, Max: d.cfg.stageMaxBytes, Log: d.log}
	rst := &restore.Service{
		Restorer: &restore.Restorer{
			WorkDir: work, CRIU: crOpts, Store: imgs, Resumer: resumer, Reattach: d.manager,
			Backend: d.workerOp.Backend, Log: d.log, Mem: mem,
			Admit: d.admitImage, Unadmit: d.unadmitImage, Adopted: d.adoptedImage,
			Staged: func(session string) restore.Staging {
				if g := staged.Take(session); g != nil {
					return g
				}
				return nil
			},
			AwaitStaged: staged.Await,
			ViewStaged:  staged.View,
		},
		Sessions: d.manager,
		Listen:   advertised(d.cfg.listen, ""),
		Log:      d.log,
	}
	staged.OnDrop = rst.Restorer.DropPrepared
	return append([]router{d.manager, ckpt, rst, d.preemptRouter(ckpt, rst, imgs), staged}, d.transferRouters(ckpt, rst, imgs, staged)...), nil
}

// imageStore is the host's store as the checkpoint pipeline
// (checkpoint.Store), the restore pipeline (restore.Store) and migration
// (migrate.Pusher, in transfer.go) use it.
type imageStore struct{ st *store.Store }

func (s imageStore) Commit(ctx context.Context, dir string, meta images.Meta) (*images.Manifest, images.Stats, error) {
	return images.Commit(ctx, s.st, dir, meta)
}

func (s imageStore) CheckoutExcept(ctx context.Context, id, dir string, skip func(string) bool) (*images.Manifest, error) {
	return images.CheckoutExcept(ctx, s.st, id, dir, skip)
}

func (s imageStore) Checkout(ctx context.Context, id, dir string) (*images.Manifest, error) {
	return images.Checkout(ctx, s.st, id, dir)
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
