// Package api is gpud's control API, version 1: the route of every call,
// the body of every request and reply, and the error envelope. It is the
// contract between gpud and its callers (gpuctl, peer gpuds during a
// migration, schedulers); package control serves it and holds the typed
// client that calls it.
//
// The package is data and names only. It imports the standard library
// (not even net/http, since device backends describe their GPUs in its
// terms) and package errs, and nothing else, so that a client links
// neither the store, the pipelines, CRIU nor a device backend just to
// decode a reply; deps_test.go here and in cmd/gpuctl hold that.
//
// Within v1, fields are only ever added: none is renamed, retyped or
// removed, because gpuctl prints these bodies as its --json output and
// scripts read them. Every route lives under /v1 (Version); a change that
// cannot be made by adding a field belongs under a new version.
package api
