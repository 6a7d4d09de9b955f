package interposer_test

import (
	"bytes"
	"context"
	"crypto/hmac"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"hash"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpuctl/gpuctl/remoting/backend"
	"github.com/gpuctl/gpuctl/remoting/backend/emulated"
	"github.com/gpuctl/gpuctl/remoting/cu"
	"github.com/gpuctl/gpuctl/remoting/interposer/testserver"
)

// rtest runs testdata/rtest.c in one mode against a fresh test server.
func rtest(t *testing.T, mode string) (stdout, stderr string) {
	t.Helper()
	return rtestOn(t, startServer(t), mode)
}

// rtestOn runs testdata/rtest.c in one mode against srv.
func rtestOn(t *testing.T, srv *testserver.Server, mode string) (stdout, stderr string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(build(t), "rtest"), mode)
	cmd.Env = append(os.Environ(), "GPUCTL_SERVER="+srv.Addr(), "GPUCTL_TOKEN=secret-token", "GPUCTL_RECONNECT_TIMEOUT=3")
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	if err := cmd.Run(); err != nil || !strings.Contains(o.String(), "PASS "+mode) {
		t.Fatalf("rtest %s: %v\nstdout: %s\nstderr: %s", mode, err, o.String(), e.String())
	}
	return o.String(), e.String()
}

// TestRuntimeSurface: export tables (sizes, stable addresses, stubs,
// context-local storage and its destructors), cuGetProcAddress versions
// and flags, libraries and kernels, attributes, occupancy,
// cuLaunchKernelEx, launch checks and what cuBLAS asks of the driver.
func TestRuntimeSurface(t *testing.T) {
	_, stderr := rtest(t, "surface")
	// Each stub logs once, however often it is reached.
	for _, want := range []string{
		"unknown export table 00112233445566778899aabbccddeeff; handing out a stub table",
		"unknown export table 00112233445566778899aabbccddeeff: slot 5 called",
		"export table CUDART_INTERFACE: slot 4 is not implemented",
		"cuGraphAddChildGraphNode is not supported",
		"cuLaunchKernelEx: the device does not support thread-block clusters",
		"cooperative launch: the device does not support it",
	} {
		if n := strings.Count(stderr, want); n != 1 {
			t.Errorf("%q logged %d times, want once\nstderr: %s", want, n, stderr)
		}
	}
}

// TestRuntimeCLSDeleteAtExit: the runtime's exit handler, registered
// before cuInit, deletes its context-local storage entry after the
// driver's own exit handler has run, and gets CUDA_ERROR_DEINITIALIZED (4)
// as it does from NVIDIA's driver; before exit the same delete succeeds.
func TestRuntimeCLSDeleteAtExit(t *testing.T) {
	stdout, _ := rtest(t, "atexit")
	if !strings.Contains(stdout, "cls delete at exit: 4\n") {
		t.Errorf("the context-local storage delete at exit did not answer CUDA_ERROR_DEINITIALIZED (4)\nstdout: %s", stdout)
	}
}

// TestRuntimeClusterLaunches: thread-block cluster and cooperative
// launches reach the server as such (LaunchEx), with their shape and flag,
// whether made directly or replayed from a captured graph, and a grid that
// is not whole clusters never leaves the client.
func TestRuntimeClusterLaunches(t *testing.T) {
	var (
		mu  sync.Mutex
		got []backend.LaunchConfig
	)
	srv, err := testserver.StartWith("127.0.0.1:0", "secret-token", nil, testserver.Options{
		Clusters: func(c backend.LaunchConfig) {
			mu.Lock()
			defer mu.Unlock()
			got = append(got, c)
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	rtestOn(t, srv, "clusters")
	mu.Lock()
	defer mu.Unlock()
	want := []struct {
		cluster [3]uint32
		coop    bool
	}{
		{[3]uint32{2, 1, 1}, false}, // cuLaunchKernelEx
		{[3]uint32{1, 1, 1}, true},  // cuLaunchCooperativeKernel
		{[3]uint32{4, 1, 1}, false}, // the captured launch, from each of two graph launches
		{[3]uint32{4, 1, 1}, false},
	}
	if len(got) != len(want) {
		t.Fatalf("the server received %d cluster or cooperative launches, want %d: %+v", len(got), len(want), got)
	}
	for i, w := range want {
		g := got[i]
		if g.Cluster != w.cluster || g.Cooperative != w.coop || g.Grid != [3]uint32{4, 1, 1} || g.Block != [3]uint32{64, 1, 1} {
			t.Errorf("launch %d: cluster %v cooperative %v grid %v block %v, want cluster %v cooperative %v grid [4 1 1] block [64 1 1]",
				i, g.Cluster, g.Cooperative, g.Grid, g.Block, w.cluster, w.coop)
		}
	}
}

// TestRuntimeBadInput: images the interposer cannot read fail with a CUDA
// error, never a crash or a hang.
func TestRuntimeBadInput(t *testing.T) {
	rtest(t, "badinput")
}

// TestIntegrityCheck recomputes INTEGRITY_CHECK's answer from the inputs
// the C program saw, with an independent HMAC-MD2 (RFC 2104 over RFC
// 1319), so a mistake in the C hash, its message layout or its key shows.
func TestIntegrityCheck(t *testing.T) {
	out, _ := rtest(t, "integrity")
	var drv, pid, tid, ndev uint32
	var cudart, table, fn uint64
	var msg bytes.Buffer
	var got []byte
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		switch {
		case len(f) == 8 && f[0] == "inputs":
			fmt.Sscan(f[1], &drv)
			fmt.Sscan(f[2], &pid)
			fmt.Sscan(f[3], &tid)
			fmt.Sscanf(f[4], "%x", &cudart)
			fmt.Sscanf(f[5], "%x", &table)
			fmt.Sscanf(f[6], "%x", &fn)
			fmt.Sscan(f[7], &ndev)
			for _, v := range []any{drv, uint32(12044), pid, tid, cudart, table, fn, uint64(0x682b9cee)} {
				binary.Write(&msg, binary.LittleEndian, v)
			}
		case len(f) == 5 && f[0] == "device":
			u, err := hex.DecodeString(f[1])
			if err != nil || len(u) != 16 {
				t.Fatalf("device line %q", line)
			}
			msg.Write(u)
			for _, s := range f[2:] {
				var v int32
				fmt.Sscan(s, &v)
				binary.Write(&msg, binary.LittleEndian, v)
			}
		case len(f) == 3 && f[0] == "hash":
			for _, s := range f[1:] {
				var v uint64
				fmt.Sscanf(s, "%x", &v)
				got = binary.LittleEndian.AppendUint64(got, v)
			}
		}
	}
	if msg.Len() != 48+28*int(ndev) || ndev == 0 || len(got) != 16 {
		t.Fatalf("could not read the program's inputs (%d bytes, %d devices):\n%s", msg.Len(), ndev, out)
	}
	key := []byte{0x14, 0x6a, 0xdd, 0xae, 0x53, 0xa9, 0xa7, 0x52, 0xaa, 0x08, 0x41, 0x36, 0x0b, 0xf5, 0x5a, 0x9f}
	m := hmac.New(newMD2, key)
	m.Write(msg.Bytes())
	if want := m.Sum(nil); !bytes.Equal(got, want) {
		t.Fatalf("INTEGRITY_CHECK answered %x, HMAC-MD2 of its inputs is %x", got, want)
	}
}

// TestMD2 checks the test's MD2 against RFC 1319's test suite.
func TestMD2(t *testing.T) {
	for in, want := range map[string]string{
		"":    "8350e5a3e24c153df2275c9f80692773",
		"abc": "da853b0d3f88d99b30283a69e6ded6bb",
		"12345678901234567890123456789012345678901234567890123456789012345678901234567890": "d5976f79d83d3a0dc9806c3c66f3efd8",
	} {
		h := newMD2()
		h.Write([]byte(in))
		if got := hex.EncodeToString(h.Sum(nil)); got != want {
			t.Errorf("MD2(%q) = %s, want %s", in, got, want)
		}
	}
}

// md2 is RFC 1319's message digest, written from the RFC for this test.
type md2 struct {
	x      [48]byte
	c      [16]byte
	buf    [16]byte
	n      int
	lastCk byte
}

var md2S = func() [256]byte {
	// The RFC's permutation of 0..255 built from the digits of pi.
	const s = "292e43c9a2d87c013d3654a1ecf00613" + "62a705f3c0c7738c98932bd9bc4c82ca" + "1e9b573cfdd4e01667426f188a17e512" +
		"be4ec4d6da9ede49a0fbf58ebb2fee7a" + "a968799115b2073f94c210890b225f21" + "807f5d9a5a903227353ecce7bff79703" +
		"ff1930b348a5b5d1d75e922aac56aac6" + "4fb838d296a47db676fc6be29c7404f1" + "459d705964718720865bcf65e62da802" +
		"1b6025adaeb0b9f61c46616934407e0f" + "5547a323dd51af3ac35cf9cebac5ea26" + "2c530d6e85288409d3dfcdf441814d52" +
		"6adc37c86cc1abfa24e17b080cbdb14a" + "788895 8be363e86de9cbd5fe3b001d39" + "f2efb70e6658d0e4a67772f8eb754b0a" +
		"314450b48fed1f1adb998d339f118314"
	b, err := hex.DecodeString(strings.ReplaceAll(s, " ", ""))
	if err != nil || len(b) != 256 {
		panic("md2 table")
	}
	return [256]byte(b)
}()

func newMD2() hash.Hash { return &md2{} }

func (h *md2) block(b []byte) {
	for j := 0; j < 16; j++ {
		h.x[16+j] = b[j]
		h.x[32+j] = h.x[16+j] ^ h.x[j]
	}
	var t byte
	for j := 0; j < 18; j++ {
		for k := 0; k < 48; k++ {
			h.x[k] ^= md2S[t]
			t = h.x[k]
		}
		t += byte(j)
	}
	l := h.lastCk
	for j := 0; j < 16; j++ {
		h.c[j] ^= md2S[b[j]^l]
		l = h.c[j]
	}
	h.lastCk = l
}

func (h *md2) Write(p []byte) (int, error) {
	for _, b := range p {
		h.buf[h.n] = b
		h.n++
		if h.n == 16 {
			h.block(h.buf[:])
			h.n = 0
		}
	}
	return len(p), nil
}

func (h *md2) Sum(in []byte) []byte {
	d := *h
	pad := 16 - d.n
	for i := 0; i < pad; i++ {
		d.Write([]byte{byte(pad)})
	}
	c := d.c
	d.Write(c[:])
	return append(in, d.x[:16]...)
}

func (h *md2) Reset()         { *h = md2{} }
func (h *md2) Size() int      { return 16 }
func (h *md2) BlockSize() int { return 16 }

// newerDriver stands in for answers a CUDA 13 driver gives and the
// emulated device does not: one CUfunction per kernel and module however
// often it is looked up, function attribute 16, and cluster occupancy
// (an answer that depends on the function's dynamic shared memory limit,
// so that a client that kept it after the limit changed shows). It counts
// the questions that reach it.
type newerDriver struct {
	*emulated.Device
	mu           sync.Mutex
	funcs        map[newerFunc]newerFuncAnswer
	clusterCalls int
	limitCalls   int
}

type newerFunc struct {
	c    backend.Ctx
	m    backend.Module
	name string
}

type newerFuncAnswer struct {
	f      backend.Function
	params []backend.Param
}

func (d *newerDriver) ModuleGetFunction(ctx context.Context, c backend.Ctx, m backend.Module, name string) (backend.Function, []backend.Param, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	k := newerFunc{c, m, name}
	if a, ok := d.funcs[k]; ok {
		return a.f, a.params, nil
	}
	f, ps, err := d.Device.ModuleGetFunction(ctx, c, m, name)
	if err == nil {
		d.funcs[k] = newerFuncAnswer{f, ps}
	}
	return f, ps, err
}

func (d *newerDriver) FuncGetAttribute(ctx context.Context, c backend.Ctx, f backend.Function, attr int32) (int32, error) {
	if attr == 16 {
		_, err := d.Device.FuncGetAttribute(ctx, c, f, 0)
		return 1, err
	}
	return d.Device.FuncGetAttribute(ctx, c, f, attr)
}

func (d *newerDriver) OccupancyClusters(ctx context.Context, c backend.Ctx, f backend.Function, cfg backend.LaunchConfig, q backend.ClusterQuery) (int32, error) {
	d.mu.Lock()
	d.clusterCalls++
	d.mu.Unlock()
	dyn, err := d.Device.FuncGetAttribute(ctx, c, f, 8)
	if err != nil {
		return 0, err
	}
	if q == backend.ClusterMaxSize {
		return 12, nil
	}
	n := cfg.Cluster[0] * cfg.Cluster[1] * cfg.Cluster[2]
	if n == 0 {
		return 0, cu.Errorf(cu.ErrorInvalidClusterSize, "no cluster shape")
	}
	return int32(1000/n) + dyn/1024, nil
}

func (d *newerDriver) CtxGetLimit(ctx context.Context, c backend.Ctx, limit int32) (uint64, error) {
	d.mu.Lock()
	d.limitCalls++
	d.mu.Unlock()
	return d.Device.CtxGetLimit(ctx, c, limit)
}

// TestRuntimeDriverAnswers: what the server's driver answers reaches the
// program, and the client keeps what it may keep: a function attribute
// CUDA 13 added, cluster occupancy until the function changes, a
// context's limit.
func TestRuntimeDriverAnswers(t *testing.T) {
	drivers := make(chan *newerDriver, 1)
	srv, err := testserver.StartWith("127.0.0.1:0", "secret-token", nil, testserver.Options{
		Device: func(dev *emulated.Device) backend.Device {
			d := &newerDriver{Device: dev, funcs: map[newerFunc]newerFuncAnswer{}}
			drivers <- d
			return d
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	rtestOn(t, srv, "driver")
	d := <-drivers
	d.mu.Lock()
	defer d.mu.Unlock()
	// Cluster questions: the first shape, the same after a limit was
	// raised, no shape (an error, kept as well) and the largest size.
	if d.clusterCalls != 4 || d.limitCalls != 1 {
		t.Fatalf("the server was asked %d cluster and %d limit questions, want 4 and 1", d.clusterCalls, d.limitCalls)
	}
}
