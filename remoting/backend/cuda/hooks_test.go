package cuda

import (
	"reflect"
	"strings"
	"testing"

	"github.com/gpuctl/gpuctl/remoting/backend"
)

func TestManifestGPUs(t *testing.T) {
	host := backend.HostInfo{Backend: "cuda", DriverVersion: "580.159.04", GPUs: []backend.GPU{h200(0, u0), h200(1, u1), h200(2, u2)}}
	tests := []struct {
		session string
		want    []string
		err     string
	}{
		{u0, []string{u0, u1, u2}, ""},
		{u1, []string{u1, u0, u2}, ""},
		{strings.ToUpper(u2), []string{u2, u0, u1}, ""},
		{"1", []string{u1, u0, u2}, ""},
		{"3", nil, "not on this host"},
		{v0, nil, "not on this host"},
	}
	for _, tt := range tests {
		got, err := ManifestGPUs(host, tt.session)
		if tt.err != "" {
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("ManifestGPUs(%s) err = %v", tt.session, err)
			}
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		var uuids []string
		for _, g := range got {
			uuids = append(uuids, g.UUID)
		}
		if !reflect.DeepEqual(uuids, tt.want) {
			t.Errorf("ManifestGPUs(%s) = %v, want %v", tt.session, uuids, tt.want)
		}
	}
}

func TestRestoreHookCheck(t *testing.T) {
	hostA := backend.HostInfo{Backend: "cuda", DriverVersion: "580.159.04", GPUs: []backend.GPU{h200(0, u0), h200(1, u1)}}
	image, err := ManifestGPUs(hostA, u1)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name   string
		hook   RestoreHook
		driver string
		err    string
	}{
		{"same host", RestoreHook{Host: hostA}, "580.159.04", ""},
		{"same host other GPU", RestoreHook{Host: hostA, Target: u0}, "580.159.04", ""},
		{"target by index", RestoreHook{Host: hostA, Target: "0"}, "580.159.04", ""},
		{"target index not here", RestoreHook{Host: hostA, Target: "2"}, "", "cannot hold"},
		{"no driver recorded", RestoreHook{Host: hostA}, "", ""},
		{"newer image driver", RestoreHook{Host: hostA}, "590.10", "older driver"},
		{"one-GPU host", RestoreHook{Host: backend.HostInfo{Backend: "cuda", DriverVersion: "580.159.04", GPUs: []backend.GPU{h200(0, v0)}}}, "", "saw 2 GPUs"},
		{"target elsewhere", RestoreHook{Host: hostA, Target: v0}, "", "cannot hold"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.hook.Check(image, tt.driver)
			if tt.err == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Fatalf("err = %v, want %q", err, tt.err)
			}
		})
	}
	if err := (RestoreHook{Host: hostA}).Check(nil, ""); err == nil {
		t.Error("an image without GPUs passed the check")
	}
}
