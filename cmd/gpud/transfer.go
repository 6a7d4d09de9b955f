package main

import (
	"context"
	"net/http"
	"time"

	"github.com/gpuctl/gpuctl/api"
	"github.com/gpuctl/gpuctl/checkpoint"
	"github.com/gpuctl/gpuctl/control"
	"github.com/gpuctl/gpuctl/errs"
	"github.com/gpuctl/gpuctl/images"
	"github.com/gpuctl/gpuctl/migrate"
	"github.com/gpuctl/gpuctl/migrate/precopy"
	"github.com/gpuctl/gpuctl/migrate/stage"
	"github.com/gpuctl/gpuctl/registry"
	"github.com/gpuctl/gpuctl/restore"
	"github.com/gpuctl/gpuctl/store"
)

// transferRouters adds migration (POST /v1/sessions/{id}/migrate) and the
// image store's own routes: list, inspect, delete, export, import, verify,
// gc and the chunk transfer a migration's target receives.
func (d *daemon) transferRouters(ckpt *checkpoint.Service, rst *restore.Service, imgs imageStore, staged *stage.Stager) []router {
	mig := &migrate.Service{
		Checkpoint: ckpt, Push: imgs, Token: d.token, TLS: d.peerTLS, Backend: d.workerOp.Backend, Log: d.log,
		SocketNS: d.socketNS, CheckTarget: d.checkTarget, DurablePrecopy: d.cfg.durablePrecopy,
		SessionBytes: func(ctx context.Context, id string) (uint64, error) {
			for _, s := range d.manager.List(ctx) {
				if s.ID == id {
					return s.MemBytes, nil
				}
			}
			return 0, errs.New(errs.NotFound, errs.Session(id), "no such session on this host")
		},
		SessionTenancy: func(ctx context.Context, id string) (migrate.Tenancy, error) {
			for _, s := range d.manager.List(ctx) {
				if s.ID == id {
					return migrate.Tenancy{Tenant: s.Tenant, Fingerprint: d.tenants.Fingerprint(s.Tenant), AllocBytes: s.AllocBytes}, nil
				}
			}
			return migrate.Tenancy{}, errs.New(errs.NotFound, errs.Session(id), "no such session on this host")
		},
		Fence: d.fence(), OnMigrated: d.ops.migrated,
		RestoreHere: func(ctx context.Context, image string) error {
			_, err := rst.Restore(ctx, image)
			return err
		},
	}
	if ckpt.Pipeline.Mem != nil {
		// Workers that save their own device memory pre-copy it.
		mig.Precopy = &migrate.Precopy{Store: d.store, Worker: func(_ context.Context, id string) (precopy.Worker, error) {
			w, err := d.manager.Live(id)
			if err != nil {
				return nil, err
			}
			pw, _ := w.(precopy.Worker)
			return pw, nil
		}}
	}
	return []router{mig, imageRoutes{st: d.store, opts: images.RouteOptions{Logger: d.log, Known: d.tenants.Known, Stage: staged.Keep, StageMemory: staged.KeepMemory,
		Dial:  func(addr string) *control.Client { return control.NewClient(addr, d.token, control.WithTLS(d.peerTLS)) },
		InUse: d.imageInUse, Imported: d.copyAdded, Removed: d.copyRemoved}}}
}

// copyAdded records in the registry that this host now holds an image it
// was sent (a replica, a migration's or a resume's image, an import), so
// that gpuctl finds the copy also while this host is down.
func (d *daemon) copyAdded(ctx context.Context, im api.Image) {
	if d.cluster == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 3*time.Second)
	defer cancel()
	c := registry.Copy{Image: im.ID, Host: d.cfg.name, Origin: im.Host == d.cfg.name, Session: im.Session, Bytes: im.Bytes}
	if err := d.cluster.r.AddCopy(ctx, c); err != nil {
		d.log.Warn("registry: cannot record an imported image's copy", "image", im.ID, "err", err)
	}
}

// copyRemoved drops this host's copy of a removed image from the registry.
func (d *daemon) copyRemoved(ctx context.Context, image string) {
	if d.cluster == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 3*time.Second)
	defer cancel()
	if err := d.cluster.r.RemoveCopy(ctx, image, d.cfg.name); err != nil {
		d.log.Warn("registry: cannot drop a removed image's copy", "image", image, "err", err)
	}
}

// imageInUse refuses removing an image a session here waits in
// (preempted): it is the only state that session has left.
func (d *daemon) imageInUse(_ context.Context, image string) error {
	for _, c := range d.manager.PreemptedSessions() {
		if c.Image == image {
			return errs.New(errs.FailedPrecondition, errs.Image(image), "session %s on host %s is preempted in it and resumes from it; "+
				"resume it first (gpuctl resume %s)", c.ID, d.cfg.name, c.ID)
		}
	}
	return nil
}

// imageRoutes registers the image store's routes.
type imageRoutes struct {
	st   *store.Store
	opts images.RouteOptions
}

func (r imageRoutes) Register(mux *http.ServeMux) { images.Register(mux, r.st, r.opts) }

// Push sends an image's chunks the target lacks, then its manifest
// (migrate.Pusher).
func (s imageStore) Push(ctx context.Context, image string, to *control.Client) (migrate.PushStats, error) {
	n, err := images.Push(ctx, s.st, image, to, nil)
	if errs.IsAlreadyExists(err) {
		// The target has the image already: a replica (gpud --replicas)
		// that reached it first. Images are never rewritten under an id,
		// so it is this one.
		err = nil
	}
	return migrate.PushStats{Bytes: n}, err
}
