// Command benchremote measures the whole remoting path on loopback: a C
// client through build/lib/libcuda.so.1 and `gpuctl run`, against a real
// gpud and its worker process on the emulated device, next to raw-TCP
// baselines served by this program in the same run. It runs the client
// against a plaintext gpud and against gpud with --tls-cert (the client
// then speaks TLS 1.3), and where the kernel has TLS offload once more
// with records sealed in user space on both ends, and prints the TLS
// figures against the plaintext ones.
//
// Usage: benchremote -bench BENCH_BINARY [-root REPO] [-passes N]
//
// The client (remoting/interposer/testdata/bench.c) dials RAW_HOST:PORT
// with a one-byte command: 'p' ping-pong of 64-byte messages, 's' sink of
// N bytes answered by one byte, 'r' source of N bytes (N follows the
// command as a little-endian uint64).
package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/binary"
	"encoding/pem"
	"errors"
	"flag"
	"fmt"
	"github.com/gpuctl/gpuctl/e2e/harness/benchgpud"
	"io"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

func main() {
	bench := flag.String("bench", "", "the compiled client benchmark")
	root := flag.String("root", ".", "the repository (holding build/)")
	passes := flag.Int("passes", 2, "runs of each configuration, alternating; the best figure of each is kept")
	flag.Parse()
	if err := run(*root, *bench, *passes); err != nil {
		fmt.Fprintln(os.Stderr, "benchremote:", err)
		os.Exit(1)
	}
}

// config is one way of running gpud and the client.
type config struct {
	name       string
	gpudArgs   []string
	clientEnv  []string
	tls        string // how the client reported its TLS ("" for plaintext)
	best       map[string]float64
	skipReason string
}

func run(root, bench string, passes int) error {
	if bench == "" {
		return errors.New("-bench is required")
	}
	build := filepath.Join(root, "build")
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	defer raw.Close()
	go serveRaw(raw)
	pki, err := os.MkdirTemp("", "benchremote-pki-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(pki)
	caFile, certFile, keyFile, err := issue(pki)
	if err != nil {
		return err
	}
	tlsArgs := []string{"--tls-cert", certFile, "--tls-key", keyFile}
	configs := []*config{
		{name: "plaintext"},
		{name: "TLS", gpudArgs: tlsArgs, clientEnv: []string{"GPUCTL_TLS_CA=" + caFile}},
		{name: "TLS, user-space records", gpudArgs: append(append([]string(nil), tlsArgs...), "--kernel-tls=false"),
			clientEnv: []string{"GPUCTL_TLS_CA=" + caFile, "GPUCTL_KTLS=0"}},
	}
	fmt.Printf("gpuctl remoting on loopback: C client + libcuda.so.1 -> gpud -> worker (emulated device), %s\n", time.Now().UTC().Format(time.RFC3339))
	for pass := 0; pass < passes; pass++ {
		for i, c := range configs {
			if i == 2 && !strings.Contains(configs[1].tls, "kernel") {
				// Without kernel TLS the default TLS run already sealed
				// its records in user space.
				c.skipReason = "no kernel TLS here: the TLS column is user space"
			}
			if c.skipReason != "" {
				continue
			}
			fmt.Printf("\n%s, pass %d of %d:\n\n", c.name, pass+1, passes)
			res, tlsDesc, err := runOnce(build, bench, raw.Addr().String(), c)
			if err != nil {
				return fmt.Errorf("%s: %w", c.name, err)
			}
			c.tls = tlsDesc
			c.merge(res)
		}
	}
	fmt.Printf("\nTLS against plaintext, best of %d passes each (the targets: bulk >= 80%%, round trip <= 1.2x):\n\n", passes)
	fmt.Println("| measurement | plaintext | " + configs[1].label() + " | ratio | " + configs[2].label() + " | ratio |")
	fmt.Println("| --- | --- | --- | --- | --- | --- |")
	plain := configs[0]
	for _, m := range []struct{ key, name, unit string }{
		{"rt_med_us", "sync round trip, median", "us"},
		{"rt_p99_us", "sync round trip, p99", "us"},
		{"htod_gbs", "HtoD 256 MiB", "GB/s"},
		{"dtoh_gbs", "DtoH 256 MiB", "GB/s"},
		{"launches_per_s", "async empty launches, executed", "/s"},
	} {
		row := fmt.Sprintf("| %s | %s |", m.name, format(plain.best[m.key], m.unit))
		for _, c := range configs[1:] {
			if c.skipReason != "" {
				row += " (" + c.skipReason + ") | |"
				continue
			}
			row += fmt.Sprintf(" %s | %s |", format(c.best[m.key], m.unit), ratio(c.best[m.key], plain.best[m.key], m.unit))
		}
		fmt.Println(row)
	}
	return nil
}

func (c *config) label() string {
	if c.skipReason != "" {
		return c.name
	}
	return c.name + " (" + c.tls + ")"
}

// merge keeps the best of each figure across passes.
func (c *config) merge(res map[string]float64) {
	if c.best == nil {
		c.best = map[string]float64{}
	}
	for k, v := range res {
		low := strings.HasSuffix(k, "_us")
		if old, ok := c.best[k]; !ok || (low && v < old) || (!low && v > old) {
			c.best[k] = v
		}
	}
}

func format(v float64, unit string) string {
	switch unit {
	case "us":
		return fmt.Sprintf("%.1f us", v)
	case "GB/s":
		return fmt.Sprintf("%.2f GB/s", v)
	}
	return fmt.Sprintf("%.0f%s", v, unit)
}

// ratio is TLS against plaintext: a time as a factor, a rate as a
// percentage.
func ratio(v, base float64, unit string) string {
	if base == 0 {
		return "-"
	}
	if unit == "us" {
		return fmt.Sprintf("%.2fx", v/base)
	}
	return fmt.Sprintf("%.0f%%", 100*v/base)
}

// runOnce starts a gpud for c, runs the client against it through gpuctl
// run, and returns the client's figures and how it said it spoke TLS.
func runOnce(build, bench, rawAddr string, c *config) (map[string]float64, string, error) {
	state, err := os.MkdirTemp("", "benchremote-")
	if err != nil {
		return nil, "", err
	}
	defer os.RemoveAll(state)
	listen, api := benchgpud.FreeAddr(), benchgpud.FreeAddr()
	gpud := exec.Command(filepath.Join(build, "bin/gpud"), append([]string{"--listen", listen, "--api", api, "--state-dir", state,
		"--backend", "emulated", "--log-level", "warn"}, c.gpudArgs...)...)
	gpud.Stderr = os.Stderr
	if err := gpud.Start(); err != nil {
		return nil, "", fmt.Errorf("start gpud: %w", err)
	}
	stopped := false
	defer func() {
		if !stopped {
			gpud.Process.Kill()
			gpud.Wait()
		}
	}()
	if err := benchgpud.WaitListening(listen, 10*time.Second); err != nil {
		return nil, "", fmt.Errorf("gpud did not start: %w", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	client := exec.CommandContext(ctx, filepath.Join(build, "bin/gpuctl"), "run", "--server", listen,
		"--token-file", filepath.Join(state, "token"), "--", bench, rawAddr)
	client.Env = append(append(os.Environ(), "GPUCTL_DEBUG=1"), c.clientEnv...)
	var out, errOut bytes.Buffer
	client.Stdout, client.Stderr = io.MultiWriter(os.Stdout, &out), io.MultiWriter(os.Stderr, &errOut)
	cerr := client.Run()
	gpud.Process.Signal(syscall.SIGTERM)
	werr := gpud.Wait()
	stopped = true
	if cerr != nil {
		return nil, "", fmt.Errorf("benchmark client: %w", cerr)
	}
	if werr != nil {
		return nil, "", fmt.Errorf("gpud did not exit cleanly after SIGTERM: %w", werr)
	}
	res := map[string]float64{}
	sc := bufio.NewScanner(&out)
	for sc.Scan() {
		line, ok := strings.CutPrefix(sc.Text(), "BENCH ")
		if !ok {
			continue
		}
		for _, kv := range strings.Fields(line) {
			k, v, _ := strings.Cut(kv, "=")
			if f, err := strconv.ParseFloat(v, 64); err == nil {
				res[k] = f
			}
		}
	}
	if len(res) == 0 {
		return nil, "", errors.New("the client printed no BENCH line")
	}
	tlsDesc := ""
	if _, after, ok := strings.Cut(errOut.String(), ", TLS "); ok {
		tlsDesc, _, _ = strings.Cut(after, "\n")
		if tlsDesc == "off" {
			tlsDesc = ""
		}
	}
	return res, tlsDesc, nil
}

// issue makes a throwaway CA and a certificate for 127.0.0.1 in dir, as
// PEM files.
func issue(dir string) (caFile, certFile, keyFile string, err error) {
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return "", "", "", err
	}
	now := time.Now()
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "benchremote CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return "", "", "", err
	}
	ca, _ := x509.ParseCertificate(caDER)
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return "", "", "", err
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "gpud"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour), KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		return "", "", "", err
	}
	kb, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return "", "", "", err
	}
	caFile, certFile, keyFile = filepath.Join(dir, "ca.pem"), filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	for _, f := range []struct {
		path, typ string
		der       []byte
	}{{caFile, "CERTIFICATE", caDER}, {certFile, "CERTIFICATE", der}, {keyFile, "PRIVATE KEY", kb}} {
		if err := os.WriteFile(f.path, pem.EncodeToMemory(&pem.Block{Type: f.typ, Bytes: f.der}), 0o600); err != nil {
			return "", "", "", err
		}
	}
	return caFile, certFile, keyFile, nil
}

// serveRaw answers the baseline connections.
func serveRaw(ln net.Listener) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		go func() {
			defer c.Close()
			c.(*net.TCPConn).SetNoDelay(true)
			if err := rawConn(c); err != nil && !errors.Is(err, io.EOF) {
				fmt.Fprintln(os.Stderr, "benchremote: raw baseline:", err)
			}
		}()
	}
}

func rawConn(c net.Conn) error {
	r := bufio.NewReaderSize(c, 1<<20)
	cmd, err := r.ReadByte()
	if err != nil {
		return err
	}
	switch cmd {
	case 'p':
		var m [64]byte
		for {
			if _, err := io.ReadFull(r, m[:]); err != nil {
				return err
			}
			if _, err := c.Write(m[:]); err != nil {
				return err
			}
		}
	case 's', 'r':
		var nb [8]byte
		if _, err := io.ReadFull(r, nb[:]); err != nil {
			return err
		}
		n := int64(binary.LittleEndian.Uint64(nb[:]))
		if cmd == 's' {
			if _, err := io.CopyN(io.Discard, r, n); err != nil {
				return err
			}
			_, err := c.Write([]byte{1})
			return err
		}
		buf := make([]byte, 1<<20)
		for n > 0 {
			k := min(int64(len(buf)), n)
			if _, err := c.Write(buf[:k]); err != nil {
				return err
			}
			n -= k
		}
		return nil
	}
	return fmt.Errorf("unknown command %q", strings.TrimSpace(string(cmd)))
}
