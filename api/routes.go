package api

import (
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
	// StagedChunksPath is where a migration target keeps the chunks a
	// source staged for a session's restore (DELETE drops them).
	StagedChunksPath = ChunksPath + "/staged"
	// MetricsPath is Prometheus's scrape target; it is outside the
	// version and needs no token.
	MetricsPath = "/metrics"
	// VerifyProgressPath asks POST /v1/images/verify to stream its
	// progress (see VerifyEvent).
	VerifyProgressPath = VerifyPath + "?" + ProgressParam + "=1"
)

const (
	// IDWildcard is the one wildcard of the routes, a session or an image
	// id: a server reads it with the request's PathValue.
	IDWildcard = "id"
	// ProgressParam is the query parameter that asks for streamed
	// progress, with the value "1".
	ProgressParam = "progress"
	// StageParam, on PUT /v1/chunks, names the session whose restore the
	// chunks are staged for: the target keeps their content in memory.
	StageParam = "stage"
	// PreparedParam, on POST /v1/images/{id}/restore, names the session
	// whose restore the caller prepared (PUT
	// /v1/chunks/staged/{id}/restore, sent in full): the target waits for
	// that prepare before it restores the image.
	PreparedParam = "prepared"
	// NonceParam, beside PreparedParam, names the checkpoint (its attach
	// nonce) whose restore was prepared.
	NonceParam = "nonce"
	// MemoryParam, with the value "1" on PUT /v1/chunks beside StageParam
	// and on PUT /v1/chunks/staged/{id}, stages in memory only: the
	// target checks the chunks and keeps them in the session's staging,
	// not in its store (a memory pre-copy). A table it cannot stage whole
	// is refused, and so are chunks with no staging laid out for them.
	MemoryParam = "memory"

	idSegment = "/{" + IDWildcard + "}"
)

// HTTP methods, as net/http spells them; the package does not import
// net/http, so that a backend describing its GPUs in the API's terms does
// not link an HTTP stack.
const (
	methodGet    = "GET"
	methodPost   = "POST"
	methodPut    = "PUT"
	methodDelete = "DELETE"
)

// Routes in net/http.ServeMux pattern syntax (METHOD PATH, with {id}
// wildcards): gpud registers exactly these, each served by the package
// docs/architecture.md names for it.
const (
	RouteHost          = methodGet + " " + HostPath
	RouteSessions      = methodGet + " " + SessionsPath
	RouteSession       = methodGet + " " + SessionsPath + idSegment
	RouteCheckpoint    = methodPost + " " + SessionsPath + idSegment + "/checkpoint"
	RouteMigrate       = methodPost + " " + SessionsPath + idSegment + "/migrate"
	RoutePreempt       = methodPost + " " + SessionsPath + idSegment + "/preempt"
	RouteResume        = methodPost + " " + SessionsPath + idSegment + "/resume"
	RouteImages        = methodGet + " " + ImagesPath
	RouteImage         = methodGet + " " + ImagesPath + idSegment
	RouteRemoveImage   = methodDelete + " " + ImagesPath + idSegment
	RouteRestore       = methodPost + " " + ImagesPath + idSegment + "/restore"
	RouteExport        = methodGet + " " + ImagesPath + idSegment + "/export"
	RouteImport        = methodPost + " " + ImportPath
	RouteVerify        = methodPost + " " + VerifyPath
	RouteGC            = methodPost + " " + GCPath
	RouteMissingChunks = methodPost + " " + MissingChunksPath
	RoutePutChunks     = methodPut + " " + ChunksPath
	RouteDropStaged    = methodDelete + " " + StagedChunksPath + idSegment
	RouteStageTable    = methodPut + " " + StagedChunksPath + idSegment
	// RoutePrepareRestore has a migration's target restore the session
	// from the dump's files (a tar stream, PrepareRestoreMeta first) and
	// the device memory staged for it, ahead of its image; the restore
	// of the image then adopts it.
	RoutePrepareRestore = methodPut + " " + StagedChunksPath + idSegment + "/restore"
	// RouteAdoptPrepared has a migration's target take over the session
	// it prepared (RoutePrepareRestore) from its staged memory alone,
	// with no image (a memory pre-copy, whose image follows): the body
	// names the checkpoint and the save (AdoptRequest).
	RouteAdoptPrepared = methodPost + " " + StagedChunksPath + idSegment + "/adopt"
	RouteMetrics       = methodGet + " " + MetricsPath
	// RouteImageChunks answers which chunks an image is made of, so that
	// a placement can ask other hosts how much of it they hold.
	RouteImageChunks = methodGet + " " + ImagesPath + idSegment + "/chunks"
	// RoutePushImage has a host send one of its images to another gpud
	// (the chunks it lacks, then the manifest): a restore on a host that
	// holds only part of an image is topped up this way from a holder.
	RoutePushImage = methodPost + " " + ImagesPath + idSegment + "/push"
)

// Routes lists every route above, for those that must cover them all (the
// audit log names each one's action).
func Routes() []string {
	return []string{RouteHost, RouteSessions, RouteSession, RouteCheckpoint, RouteMigrate, RouteImages, RouteImage,
		RouteRemoveImage, RouteRestore, RouteExport, RouteImport, RouteVerify, RouteGC, RouteMissingChunks, RoutePutChunks, RouteMetrics,
		RoutePreempt, RouteResume, RouteDropStaged, RouteStageTable, RouteImageChunks, RoutePushImage, RoutePrepareRestore, RouteAdoptPrepared}
}

// SessionPath is the path of GET /v1/sessions/{id}.
func SessionPath(session string) string { return SessionsPath + "/" + segment(session) }

// SessionCheckpointPath is the path of POST /v1/sessions/{id}/checkpoint.
func SessionCheckpointPath(session string) string { return SessionPath(session) + "/checkpoint" }

// SessionMigratePath is the path of POST /v1/sessions/{id}/migrate.
func SessionMigratePath(session string) string { return SessionPath(session) + "/migrate" }

// SessionPreemptPath is the path of POST /v1/sessions/{id}/preempt.
func SessionPreemptPath(session string) string { return SessionPath(session) + "/preempt" }

// SessionResumePath is the path of POST /v1/sessions/{id}/resume.
func SessionResumePath(session string) string { return SessionPath(session) + "/resume" }

// ImagePath is the path of GET and DELETE /v1/images/{id}.
func ImagePath(image string) string { return ImagesPath + "/" + segment(image) }

// ImageRestorePath is the path of POST /v1/images/{id}/restore.
func ImageRestorePath(image string) string { return ImagePath(image) + "/restore" }

// ImageChunksPath is the path of GET /v1/images/{id}/chunks.
func ImageChunksPath(image string) string { return ImagePath(image) + "/chunks" }

// ImagePushPath is the path of POST /v1/images/{id}/push.
func ImagePushPath(image string) string { return ImagePath(image) + "/push" }

// ImageExportPath is the path of GET /v1/images/{id}/export.
func ImageExportPath(image string) string { return ImagePath(image) + "/export" }

// StagedChunksSessionPath is the path of PUT and DELETE
// /v1/chunks/staged/{id}.
func StagedChunksSessionPath(session string) string { return StagedChunksPath + "/" + segment(session) }

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
