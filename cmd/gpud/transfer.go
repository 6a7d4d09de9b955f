package main

import "github.com/gpuctl/gpuctl/checkpoint"

// transferRouters adds migration (POST /v1/sessions/{id}/migrate) and the
// image store's own routes (list, inspect, export, import, chunk
// transfer). They need images.Push and images.Register; until those are
// part of the build, gpud serves checkpoint and restore only.
func (d *daemon) transferRouters(ckpt *checkpoint.Service, imgs imageStore) []router {
	return nil
}
