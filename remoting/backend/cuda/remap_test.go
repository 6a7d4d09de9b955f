package cuda

import (
	"reflect"
	"strings"
	"testing"

	"github.com/gpuctl/gpuctl/errs"
	"github.com/gpuctl/gpuctl/remoting/backend"
)

const (
	u0 = "GPU-00000000-0000-0000-0000-000000000000"
	u1 = "GPU-11111111-1111-1111-1111-111111111111"
	u2 = "GPU-22222222-2222-2222-2222-222222222222"
	u3 = "GPU-33333333-3333-3333-3333-333333333333"
	v0 = "GPU-aaaaaaaa-0000-0000-0000-000000000000"
	v1 = "GPU-aaaaaaaa-1111-1111-1111-111111111111"
	v2 = "GPU-aaaaaaaa-2222-2222-2222-222222222222"
)

func TestPlanRemap(t *testing.T) {
	tests := []struct {
		name     string
		saw      []string
		host     []string
		from, to string
		want     []GPUPair
		err      string
	}{
		{name: "same GPU same host", saw: []string{u0, u1}, host: []string{u0, u1}, from: u0, to: u0, want: nil},
		{name: "swap on two GPUs", saw: []string{u0, u1}, host: []string{u0, u1}, from: u0, to: u1,
			want: []GPUPair{{u0, u1}, {u1, u0}}},
		{name: "swap back", saw: []string{u0, u1}, host: []string{u0, u1}, from: u1, to: u0,
			want: []GPUPair{{u0, u1}, {u1, u0}}},
		{name: "four GPUs keep the others", saw: []string{u0, u1, u2, u3}, host: []string{u0, u1, u2, u3}, from: u0, to: u2,
			want: []GPUPair{{u0, u2}, {u1, u1}, {u2, u0}, {u3, u3}}},
		{name: "host order differs", saw: []string{u0, u1}, host: []string{u1, u0}, from: u0, to: u1,
			want: []GPUPair{{u0, u1}, {u1, u0}}},
		{name: "other host", saw: []string{u0, u1}, host: []string{v0, v1}, from: u0, to: v1,
			want: []GPUPair{{u0, v1}, {u1, v0}}},
		{name: "other host same ordinal", saw: []string{u0, u1}, host: []string{v0, v1, v2}, from: u1, to: v1,
			want: []GPUPair{{u0, v0}, {u1, v1}}},
		{name: "one GPU to another host", saw: []string{u0}, host: []string{v0}, from: u0, to: v0,
			want: []GPUPair{{u0, v0}}},
		{name: "case does not matter", saw: []string{u0, strings.ToUpper(v1)}, host: []string{u0, v1}, from: u0, to: u0, want: nil},
		{name: "too few GPUs", saw: []string{u0, u1, u2}, host: []string{v0, v1}, from: u0, to: v0, err: "only 2"},
		{name: "from not seen", saw: []string{u0}, host: []string{u0, u1}, from: u1, to: u0, err: "not among"},
		{name: "to not on host", saw: []string{u0}, host: []string{u0}, from: u0, to: u1, err: "not on this host"},
		{name: "duplicate seen", saw: []string{u0, u0}, host: []string{u0, u1}, from: u0, to: u1, err: "twice"},
		{name: "duplicate host", saw: []string{u0}, host: []string{u1, u1}, from: u0, to: u1, err: "twice"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := PlanRemap(tt.saw, tt.host, tt.from, tt.to)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) || !errs.IsInvalidArgument(err) {
					t.Fatalf("err = %v, want invalid argument containing %q", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("pairs = %v, want %v", got, tt.want)
			}
			checkPermutation(t, tt.saw, tt.host, got)
		})
	}
}

// checkPermutation asserts what the driver requires of a non-empty map:
// every GPU the process saw appears once as a source, and targets are
// distinct GPUs of the host.
func checkPermutation(t *testing.T, saw, host []string, pairs []GPUPair) {
	t.Helper()
	if pairs == nil {
		return
	}
	if len(pairs) != len(saw) {
		t.Fatalf("%d pairs for %d GPUs", len(pairs), len(saw))
	}
	to := map[string]bool{}
	for i, p := range pairs {
		if !strings.EqualFold(p.From, saw[i]) {
			t.Errorf("pair %d maps %s, want %s", i, p.From, saw[i])
		}
		if !containsFold(host, p.To) {
			t.Errorf("pair %d targets %s, not on the host", i, p.To)
		}
		if to[strings.ToUpper(p.To)] {
			t.Errorf("target %s used twice", p.To)
		}
		to[strings.ToUpper(p.To)] = true
	}
}

func TestRemapped(t *testing.T) {
	pairs, err := PlanRemap([]string{u0, u1}, []string{u0, u1}, u0, u1)
	if err != nil {
		t.Fatal(err)
	}
	got := Remapped([]string{u0, u1}, pairs)
	if want := []string{u1, u0}; !reflect.DeepEqual(got, want) {
		t.Fatalf("Remapped = %v, want %v", got, want)
	}
	// Moving back plans from the remapped view and lands where it began.
	back, err := PlanRemap(got, []string{u0, u1}, u1, u0)
	if err != nil {
		t.Fatal(err)
	}
	if again := Remapped(got, back); !reflect.DeepEqual(again, []string{u0, u1}) {
		t.Fatalf("after moving back: %v", again)
	}
}

func h200(i int, uuid string) backend.GPU {
	return backend.GPU{Index: i, Name: "NVIDIA H200", UUID: uuid, MemoryBytes: 141 << 30}
}

func TestCheckCompatible(t *testing.T) {
	snap := Snapshot{Driver: "580.159.04", Device: h200(0, u0), Enumerated: []string{u0, u1}}
	host := func(driver string, gpus ...backend.GPU) backend.HostInfo {
		return backend.HostInfo{Backend: "cuda", DriverVersion: driver, GPUs: gpus}
	}
	a100 := backend.GPU{Name: "NVIDIA A100-SXM4-80GB", UUID: v0, MemoryBytes: 80 << 30}
	small := h200(1, v1)
	small.MemoryBytes = 96 << 30
	tests := []struct {
		name string
		host backend.HostInfo
		err  string // empty: compatible
	}{
		{"same host", host("580.159.04", h200(0, u0), h200(1, u1)), ""},
		{"newer driver elsewhere", host("590.1", h200(0, v0), h200(1, v1)), ""},
		{"newer minor", host("580.160.01", h200(0, v0), h200(1, v1)), ""},
		{"emulated", backend.HostInfo{Backend: "emulated", DriverVersion: "13000", GPUs: []backend.GPU{h200(0, v0), h200(1, v1)}}, `"emulated" backend`},
		{"older driver", host("575.51.03", h200(0, v0), h200(1, v1)), "older driver"},
		{"older patch", host("580.159.03", h200(0, v0), h200(1, v1)), "older driver"},
		{"too few GPUs", host("580.159.04", h200(0, v0)), "saw 2 GPUs and this host has 1"},
		{"other model", host("580.159.04", a100, a100), "no such GPU"},
		{"less memory", host("580.159.04", small, small), "no such GPU"},
		{"garbled driver", host("r580", h200(0, v0), h200(1, v1)), "not dotted numbers"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := CheckCompatible(snap, tt.host)
			if tt.err == "" {
				if err != nil {
					t.Fatalf("refused a compatible host: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Fatalf("err = %v, want one containing %q", err, tt.err)
			}
			if !errs.IsFailedPrecondition(err) {
				t.Errorf("kind %s, want failed_precondition", errs.KindOf(err))
			}
		})
	}
}

func TestPlanRestore(t *testing.T) {
	snap := Snapshot{Driver: "580.159.04", Device: h200(0, u0), Enumerated: []string{u0, u1}}
	same := backend.HostInfo{Backend: "cuda", DriverVersion: "580.159.04", GPUs: []backend.GPU{h200(0, u0), h200(1, u1)}}
	other := backend.HostInfo{Backend: "cuda", DriverVersion: "580.159.04", GPUs: []backend.GPU{h200(0, v0), h200(1, v1)}}
	tests := []struct {
		name       string
		host       backend.HostInfo
		want       string
		target     string
		pairs      []GPUPair
		errKind    errs.Kind
		errMessage string
	}{
		{name: "in place", host: same, target: u0},
		{name: "to GPU1", host: same, want: u1, target: u1, pairs: []GPUPair{{u0, u1}, {u1, u0}}},
		{name: "other host picks first", host: other, target: v0, pairs: []GPUPair{{u0, v0}, {u1, v1}}},
		{name: "other host GPU1", host: other, want: v1, target: v1, pairs: []GPUPair{{u0, v1}, {u1, v0}}},
		{name: "unknown GPU", host: same, want: v2, errKind: errs.FailedPrecondition, errMessage: "cannot hold"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			target, pairs, err := PlanRestore(snap, tt.host, tt.want)
			if tt.errKind != "" {
				if !errs.Is(err, tt.errKind) || !strings.Contains(err.Error(), tt.errMessage) {
					t.Fatalf("err = %v, want %s containing %q", err, tt.errKind, tt.errMessage)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if target != tt.target || !reflect.DeepEqual(pairs, tt.pairs) {
				t.Fatalf("got %s %v, want %s %v", target, pairs, tt.target, tt.pairs)
			}
		})
	}
}
