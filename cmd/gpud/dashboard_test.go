package main

import (
	"encoding/json"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpuctl/gpuctl/remoting/server"
	"github.com/gpuctl/gpuctl/session"

	// etcd's server registers its metrics with Prometheus's default
	// registry when linked, as in gpud (`gpud registry`).
	_ "github.com/gpuctl/gpuctl/registry/embedded"
	"github.com/gpuctl/gpuctl/replicate"
)

// descNames records the metric names collectors describe: every family
// gpud registers, whether it has samples yet or not.
type descNames map[string]bool

var fqName = regexp.MustCompile(`fqName: "([^"]+)"`)

func (n descNames) Register(c prometheus.Collector) error {
	ch := make(chan *prometheus.Desc, 64)
	go func() { c.Describe(ch); close(ch) }()
	for d := range ch {
		if m := fqName.FindStringSubmatch(d.String()); m != nil {
			n[m[1]] = true
		}
	}
	return nil
}

func (n descNames) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		_ = n.Register(c)
	}
}

func (n descNames) Unregister(prometheus.Collector) bool { return false }

// TestDashboardQueriesExportedMetrics loads the Grafana dashboard and
// checks that each panel's queries name only metrics gpud registers (the
// constructors gpud's run calls) or that `gpud registry` exports (etcd's,
// in the default registry), so that a renamed metric breaks this test
// rather than a panel.
func TestDashboardQueriesExportedMetrics(t *testing.T) {
	b, err := os.ReadFile("../../deploy/grafana/gpuctl.json")
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(b, &dash); err != nil {
		t.Fatalf("dashboard JSON: %v", err)
	}
	known := descNames{}
	session.NewMetrics(known)
	server.NewMetrics(known)
	newOpsMetrics(known)
	replicate.NewMetrics(known)
	fams, err := prometheus.DefaultGatherer.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		known[f.GetName()] = true
	}
	if !known["gpud_sessions"] || !known["gpud_registry_hosts"] || !known["etcd_server_has_leader"] || !known["gpud_replication_sent_bytes_total"] {
		t.Fatalf("the metric names were not collected: %d known", len(known))
	}

	ident := regexp.MustCompile(`[a-z_][a-z0-9_]*`)
	// PromQL's own words, and label names, are not metrics.
	skip := map[string]bool{"sum": true, "by": true, "max": true, "min": true, "count": true, "rate": true, "increase": true,
		"histogram_quantile": true, "or": true, "vector": true, "le": true, "step": true, "state": true, "instance": true,
		"up": true, "down": true, "stopped": true, "quiesce": true, "suspend": true, "detach": true, "dump": true, "m": true, "h": true}
	queries := 0
	// The views the operations page promises, each by the metric it must
	// chart.
	promised := map[string]bool{"gpud_replication_sent_bytes_total": false, "gpud_migration_downtime_seconds_bucket": false, "gpud_store_bytes": false}
	for _, p := range dash.Panels {
		for _, tg := range p.Targets {
			for m := range promised {
				promised[m] = promised[m] || strings.Contains(tg.Expr, m)
			}
		}
	}
	for m, ok := range promised {
		if !ok {
			t.Errorf("no panel charts %s", m)
		}
	}
	for _, p := range dash.Panels {
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, tg := range p.Targets {
			queries++
			// Label values and matchers are quoted; drop them first.
			expr := regexp.MustCompile(`"[^"]*"`).ReplaceAllString(tg.Expr, "")
			names := 0
			for _, id := range ident.FindAllString(expr, -1) {
				if skip[id] {
					continue
				}
				base := id
				for _, suf := range []string{"_bucket", "_sum", "_count"} {
					if trimmed, ok := strings.CutSuffix(id, suf); ok && known[trimmed] {
						base = trimmed
					}
				}
				names++
				if !known[base] {
					t.Errorf("panel %q queries %s, which neither gpud nor gpud registry exports: %s", p.Title, id, tg.Expr)
				}
			}
			if names == 0 {
				t.Errorf("panel %q: query %q names no metric", p.Title, tg.Expr)
			}
		}
	}
	if queries < 10 {
		t.Errorf("only %d queries in the dashboard", queries)
	}
}
