package api

import (
	"net/http"
	"net/url"
	"strings"
)

// Version is the API version every route is under.
const Version = "v1"

const prefix = "/" + Version

// Paths that take no argument.
const (
	HostPath          = prefix + "/host"
	SessionsPath      = prefix + "/sessions"
	ImagesPath        = prefix + "/images"
	ImportPath        = ImagesPath + "/import"
	VerifyPath        = ImagesPath + "/verify"
	GCPath            = ImagesPath + "/gc"
	ChunksPath        = prefix + "/chunks"
	MissingChunksPath = ChunksPath + "/missing"
	// MetricsPath is Prometheus's scrape target; it is outside the
	// version and needs no token.
	MetricsPath = "/metrics"
	// VerifyProgressPath asks POST /v1/images/verify to stream its
	// progress (see VerifyEvent).
	VerifyProgressPath = VerifyPath + "?" + progressParam + "=1"
)

// id is the one wildcard of the routes: a session or an image id.
const (
	id            = "id"
	idSegment     = "/{" + id + "}"
	progressParam = "progress"
)

// Routes in net/http.ServeMux pattern syntax (METHOD PATH, with {id}
// wildcards): gpud registers exactly these, each served by the package
// docs/architecture.md names for it.
const (
	RouteHost          = http.MethodGet + " " + HostPath
	RouteSessions      = http.MethodGet + " " + SessionsPath
	RouteSession       = http.MethodGet + " " + SessionsPath + idSegment
	RouteCheckpoint    = http.MethodPost + " " + SessionsPath + idSegment + "/checkpoint"
	RouteMigrate       = http.MethodPost + " " + SessionsPath + idSegment + "/migrate"
	RouteImages        = http.MethodGet + " " + ImagesPath
	RouteImage         = http.MethodGet + " " + ImagesPath + idSegment
	RouteRemoveImage   = http.MethodDelete + " " + ImagesPath + idSegment
	RouteRestore       = http.MethodPost + " " + ImagesPath + idSegment + "/restore"
	RouteExport        = http.MethodGet + " " + ImagesPath + idSegment + "/export"
	RouteImport        = http.MethodPost + " " + ImportPath
	RouteVerify        = http.MethodPost + " " + VerifyPath
	RouteGC            = http.MethodPost + " " + GCPath
	RouteMissingChunks = http.MethodPost + " " + MissingChunksPath
	RoutePutChunks     = http.MethodPut + " " + ChunksPath
	RouteMetrics       = http.MethodGet + " " + MetricsPath
)

// SessionPath is the path of GET /v1/sessions/{id}.
func SessionPath(session string) string { return SessionsPath + "/" + segment(session) }

// SessionCheckpointPath is the path of POST /v1/sessions/{id}/checkpoint.
func SessionCheckpointPath(session string) string { return SessionPath(session) + "/checkpoint" }

// SessionMigratePath is the path of POST /v1/sessions/{id}/migrate.
func SessionMigratePath(session string) string { return SessionPath(session) + "/migrate" }

// ImagePath is the path of GET and DELETE /v1/images/{id}.
func ImagePath(image string) string { return ImagesPath + "/" + segment(image) }

// ImageRestorePath is the path of POST /v1/images/{id}/restore.
func ImageRestorePath(image string) string { return ImagePath(image) + "/restore" }

// ImageExportPath is the path of GET /v1/images/{id}/export.
func ImageExportPath(image string) string { return ImagePath(image) + "/export" }

// PathID is the {id} a request's route matched, unescaped.
func PathID(r *http.Request) string { return r.PathValue(id) }

// WantsProgress reports whether a verify request asked for streamed
// progress (VerifyProgressPath).
func WantsProgress(r *http.Request) bool { return r.URL.Query().Get(progressParam) == "1" }

// segment escapes an id as one path segment. Escaping keeps '/', '?' and
// '%' inside the segment; "." and ".." are escaped too, since a server
// would otherwise clean them away as relative segments and route the
// request somewhere else. The server unescapes the segment and validates
// the id it gets back, so a malformed id fails there with an error that
// names it.
func segment(s string) string {
	if strings.Trim(s, ".") == "" && s != "" {
		return strings.Repeat("%2E", len(s))
	}
	return url.PathEscape(s)
}
