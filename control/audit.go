package control

import (
	"cmp"
	"context"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/gpuctl/gpuctl/api"
	"github.com/gpuctl/gpuctl/errs"
)

// Authenticator tells who a bearer token stands for. It returns ctx
// carrying the caller, for the handlers to read, and the caller's name for
// the audit log; ok is false for a token it does not know. gpud's is a
// *tenant.Set: the host token is the administrator's, a tenant's token
// names the tenant.
type Authenticator interface {
	Authenticate(ctx context.Context, token string) (next context.Context, caller string, ok bool)
}

// Authenticate wraps next so that only requests whose bearer token auth
// knows pass, each with the caller in its context. Every request, passed
// or refused, becomes one line on audit (nil: none), written when the
// request ends:
//
//	msg=audit tenant=alice action=session.checkpoint subject="session s-0123456789ab" result=ok status=200 peer=... took_ms=...
//
// tenant is the caller's name ("(none)" for a refused token), action names
// the route (see Action), subject is what it acted on, as far as the path
// or the handler (NoteSubject) tells, and result is "ok" or the error's
// kind. When next is a *http.ServeMux, a refused request's line names the
// route it was for.
func Authenticate(auth Authenticator, audit *slog.Logger, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		rec := &auditRecord{caller: "(none)"}
		aw := &auditWriter{ResponseWriter: w, rec: rec}
		r = r.WithContext(context.WithValue(r.Context(), auditKey{}, rec))
		defer func() {
			p := recover()
			if audit != nil {
				if p != nil && rec.result == "" {
					rec.result = "aborted"
				}
				rec.log(audit, r, aw.status, start)
			}
			if p != nil {
				panic(p)
			}
		}()
		got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		var ctx context.Context
		if ok {
			ctx, rec.caller, ok = auth.Authenticate(r.Context(), got)
		}
		if !ok {
			rec.caller = "(none)"
			// The route the request was for, though it will not reach
			// it; its subject is then the path as sent.
			if m, ok := next.(interface {
				Handler(*http.Request) (http.Handler, string)
			}); ok {
				_, rec.route = m.Handler(r)
				rec.subject = r.Method + " " + r.URL.Path
			}
			WriteError(aw, errs.New(errs.Unauthenticated, "", "missing or wrong token; pass the host's token, or a tenant's, with --token-file"))
			return
		}
		r = r.WithContext(ctx)
		next.ServeHTTP(aw, r)
	})
}

// auditKey keys the request's audit record in its context.
type auditKey struct{}

// auditRecord is what the audit line of one request says beyond what the
// request itself tells: filled in by the middleware, the error envelope
// and the handler.
type auditRecord struct {
	caller  string
	route   string // when the request never reached the mux
	subject string
	result  string // "" until an error is written: then its kind
	attrs   []slog.Attr
}

func recordOf(ctx context.Context) *auditRecord {
	rec, _ := ctx.Value(auditKey{}).(*auditRecord)
	return rec
}

// NoteSubject sets the subject of the request's audit line, for a route
// whose path does not name it (an import names its image only once the
// stream is read).
func NoteSubject(ctx context.Context, subject string) {
	if rec := recordOf(ctx); rec != nil {
		rec.subject = subject
	}
}

// Note adds attributes to the request's audit line (a migration's target).
func Note(ctx context.Context, attrs ...slog.Attr) {
	if rec := recordOf(ctx); rec != nil {
		rec.attrs = append(rec.attrs, attrs...)
	}
}

// NoteError records the result of a request that reports its error
// inside a streamed reply rather than through WriteError.
func NoteError(ctx context.Context, err error) {
	if rec := recordOf(ctx); rec != nil && err != nil {
		rec.result = string(errs.KindOf(err))
	}
}

func (rec *auditRecord) log(audit *slog.Logger, r *http.Request, status int, start time.Time) {
	if status == 0 {
		status = http.StatusOK
	}
	result := rec.result
	if result == "" {
		result = "ok"
		if status >= 400 {
			result = http.StatusText(status)
		}
	}
	subject := rec.subject
	if subject == "" {
		subject = subjectOf(r)
	}
	attrs := append([]slog.Attr{
		slog.String("tenant", rec.caller),
		slog.String("action", Action(cmp.Or(r.Pattern, rec.route))),
		slog.String("subject", subject),
		slog.String("result", result),
		slog.Int("status", status),
		slog.String("peer", r.RemoteAddr),
		slog.Int64("took_ms", time.Since(start).Milliseconds()),
	}, rec.attrs...)
	level := slog.LevelInfo
	if result != "ok" {
		level = slog.LevelWarn
	}
	audit.LogAttrs(r.Context(), level, "audit", attrs...)
}

// subjectOf names what a request's path acts on: a session or an image
// id, or the method and path of a request that matched no route.
func subjectOf(r *http.Request) string {
	if r.Pattern == "" {
		return r.Method + " " + r.URL.Path
	}
	id := r.PathValue(api.IDWildcard)
	switch {
	case id == "":
		return ""
	case strings.Contains(r.Pattern, api.SessionsPath+"/"), strings.Contains(r.Pattern, api.StagedChunksPath+"/"):
		return "session " + id
	default:
		return "image " + id
	}
}

// Action is the audit log's name for a route (an api.Route* pattern):
// what the caller did, as "noun.verb". A request that matched no route is
// "unknown".
func Action(route string) string {
	switch route {
	case api.RouteHost:
		return "host.get"
	case api.RouteSessions:
		return "sessions.list"
	case api.RouteSession:
		return "session.get"
	case api.RouteCheckpoint:
		return "session.checkpoint"
	case api.RouteMigrate:
		return "session.migrate"
	case api.RoutePreempt:
		return "session.preempt"
	case api.RouteResume:
		return "session.resume"
	case api.RouteImages:
		return "images.list"
	case api.RouteImage:
		return "image.inspect"
	case api.RouteRemoveImage:
		return "image.remove"
	case api.RouteRestore:
		return "image.restore"
	case api.RouteExport:
		return "image.export"
	case api.RouteImport:
		return "image.import"
	case api.RouteVerify:
		return "images.verify"
	case api.RouteGC:
		return "images.gc"
	case api.RouteMissingChunks:
		return "chunks.missing"
	case api.RoutePutChunks:
		return "chunks.put"
	case api.RouteDropStaged:
		return "chunks.unstage"
	case api.RouteStageTable:
		return "chunks.stage"
	case api.RoutePrepareRestore:
		return "session.prepare_restore"
	case api.RouteAdoptPrepared:
		return "session.adopt_prepared"
	case api.RouteMetrics:
		return "metrics.get"
	case api.RouteImageChunks:
		return "image.chunks"
	case api.RoutePushImage:
		return "image.push"
	}
	return "unknown"
}

// auditWriter remembers the status a handler sent and lets WriteError
// record the error's kind.
type auditWriter struct {
	http.ResponseWriter
	rec    *auditRecord
	status int
}

func (w *auditWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *auditWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

// Flush keeps streamed replies (verify's progress) streaming.
func (w *auditWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		if w.status == 0 {
			w.status = http.StatusOK
		}
		f.Flush()
	}
}

// Unwrap lets http.ResponseController reach the connection.
func (w *auditWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

func (w *auditWriter) noteKind(k errs.Kind) { w.rec.result = string(k) }
