// Package k8s holds the Kubernetes manifests for gpud and for workloads
// that use it (docs/operations.md, "Kubernetes"). This test decodes them
// into the API's typed objects, strictly, so that a typo in a field name
// fails here rather than in a cluster, and checks the promises the docs
// make about them.
package k8s

import (
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"
)

func decode(t *testing.T, file string, into any) {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.UnmarshalStrict(b, into); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
}

// preStopDeadline returns the --deadline of a container's preStop hook,
// which must run gpuctl preempt with a selector.
func preStopDeadline(t *testing.T, c corev1.Container, selector string) time.Duration {
	t.Helper()
	if c.Lifecycle == nil || c.Lifecycle.PreStop == nil || c.Lifecycle.PreStop.Exec == nil {
		t.Fatalf("container %s has no preStop exec hook", c.Name)
	}
	cmd := strings.Join(c.Lifecycle.PreStop.Exec.Command, " ")
	if !strings.Contains(cmd, "gpuctl") || !strings.Contains(cmd, " preempt ") || !strings.Contains(cmd, "--selector "+selector) {
		t.Errorf("container %s's preStop hook is %q; want gpuctl preempt --selector %s", c.Name, cmd, selector)
	}
	m := regexp.MustCompile(`--deadline[= ](\S+)`).FindStringSubmatch(cmd)
	if m == nil {
		t.Fatalf("container %s's preStop hook has no --deadline: %q", c.Name, cmd)
	}
	d, err := time.ParseDuration(m[1])
	if err != nil {
		t.Fatalf("preStop --deadline %q: %v", m[1], err)
	}
	return d
}

func envFrom(c corev1.Container, name string) *corev1.EnvVar {
	for i := range c.Env {
		if c.Env[i].Name == name {
			return &c.Env[i]
		}
	}
	return nil
}

func TestWorkloadPod(t *testing.T) {
	var pod corev1.Pod
	decode(t, "workload-pod.yaml", &pod)
	if pod.Kind != "Pod" || pod.APIVersion != "v1" || len(pod.Spec.Containers) != 1 {
		t.Fatalf("workload-pod.yaml: %s %s with %d containers", pod.APIVersion, pod.Kind, len(pod.Spec.Containers))
	}
	c := pod.Spec.Containers[0]
	// The hook cannot use $(VAR), which Kubernetes expands in command and
	// args only: a shell must read the variable.
	d := preStopDeadline(t, c, `"pod=$POD_NAME"`)
	if g := pod.Spec.TerminationGracePeriodSeconds; g == nil || d >= time.Duration(*g)*time.Second {
		t.Errorf("preStop deadline %v does not fit in terminationGracePeriodSeconds %v", d, g)
	}
	if e := envFrom(c, "POD_NAME"); e == nil || e.ValueFrom == nil || e.ValueFrom.FieldRef == nil || e.ValueFrom.FieldRef.FieldPath != "metadata.name" {
		t.Errorf("POD_NAME is not the pod's name from the downward API: %+v", e)
	}
	args := strings.Join(append(c.Command, c.Args...), " ")
	for _, want := range []string{"gpuctl run", "--label=pod=$(POD_NAME)", "--priority=", "--server=$(GPUD_ADDR)"} {
		if !strings.Contains(args, want) {
			t.Errorf("the container runs %q, want %q in it", args, want)
		}
	}
}

func TestGpudDaemonSet(t *testing.T) {
	var ds appsv1.DaemonSet
	decode(t, "gpud-daemonset.yaml", &ds)
	if ds.Kind != "DaemonSet" || ds.APIVersion != "apps/v1" || len(ds.Spec.Template.Spec.Containers) != 1 {
		t.Fatalf("gpud-daemonset.yaml: %s %s", ds.APIVersion, ds.Kind)
	}
	spec := ds.Spec.Template.Spec
	c := spec.Containers[0]
	d := preStopDeadline(t, c, "managed-by=gpuctl")
	if g := spec.TerminationGracePeriodSeconds; g == nil || d >= time.Duration(*g)*time.Second {
		t.Errorf("preStop deadline %v does not fit in terminationGracePeriodSeconds %v", d, g)
	}
	args := strings.Join(c.Args, " ")
	for _, want := range []string{"--listen=", "--api=", "--state-dir=/var/lib/gpud", "--preempt=true"} {
		if !strings.Contains(args, want) {
			t.Errorf("gpud runs with %q, want %q", args, want)
		}
	}
	if c.SecurityContext == nil || c.SecurityContext.Privileged == nil || !*c.SecurityContext.Privileged {
		t.Error("gpud must be privileged: CRIU and the driver's checkpoint API need it")
	}
	// The store must outlive the pod: a hostPath at the state dir.
	var state string
	for _, m := range c.VolumeMounts {
		if m.MountPath == "/var/lib/gpud" {
			state = m.Name
		}
	}
	ok := false
	for _, v := range spec.Volumes {
		if v.Name == state && v.HostPath != nil {
			ok = true
		}
	}
	if !ok {
		t.Error("gpud's --state-dir is not on a hostPath volume; preempted sessions would not survive the pod")
	}
	if !spec.HostNetwork {
		t.Error("gpud must use the host's network, where clients reach it at the node's IP")
	}
}
