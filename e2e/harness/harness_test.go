package harness

import (
	"context"
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// The test binary doubles as a tiny TCP echo server and client, run inside
// the namespaces (the machine may have no ping or nc).
func TestMain(m *testing.M) {
	switch os.Getenv("HARNESS_HELPER") {
	case "listen":
		ln, err := net.Listen("tcp", os.Getenv("HARNESS_ADDR"))
		if err != nil {
			os.Exit(3)
		}
		for {
			c, err := ln.Accept()
			if err != nil {
				os.Exit(4)
			}
			c.Write([]byte("ok"))
			c.Close()
		}
	case "dial":
		c, err := net.DialTimeout("tcp", os.Getenv("HARNESS_ADDR"), 2*time.Second)
		if err != nil {
			os.Exit(1)
		}
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		b := make([]byte, 2)
		if _, err := c.Read(b); err != nil || string(b) != "ok" {
			os.Exit(2)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func helper(n *Node, ctx context.Context, mode, addr string) *exec.Cmd {
	cmd := n.Command(ctx, os.Args[0])
	cmd.Env = append(os.Environ(), "HARNESS_HELPER="+mode, "HARNESS_ADDR="+addr)
	return cmd
}

func reach(from *Node, addr string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return helper(from, ctx, "dial", addr).Run()
}

func TestNetwork(t *testing.T) {
	requirements(t)
	var prefix string
	t.Run("cluster", func(t *testing.T) {
		c := newCluster(t, nil)
		prefix = c.prefix
		a, b := c.NewNode("a"), c.NewNode("b")
		if a.IP == b.IP || a.NS == b.NS {
			t.Fatalf("nodes share an address or namespace: %+v %+v", a, b)
		}
		addr := net.JoinHostPort(b.IP, "9000")
		srv := helper(b, context.Background(), "listen", addr)
		if err := srv.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { srv.Process.Kill(); srv.Wait() })
		var err error
		for i := 0; i < 250; i++ { // until the listener is up (slow on a loaded machine)
			if err = reach(a, addr); err == nil {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		if err != nil {
			t.Fatalf("a cannot reach b: %v", err)
		}
		if err := reach(c.NewNode("outsider"), net.JoinHostPort("127.0.0.1", "9000")); err == nil {
			t.Fatal("b's listener is visible on another node's loopback")
		}
		b.LinkDown()
		if err := reach(a, addr); err == nil {
			t.Fatal("b reachable with its link down")
		}
		b.LinkUp()
		if err := reach(a, addr); err != nil {
			t.Fatalf("b unreachable after its link came back: %v", err)
		}
		<-b.CutLink(300 * time.Millisecond)
		if err := reach(a, addr); err != nil {
			t.Fatalf("b unreachable after a cut: %v", err)
		}
	})
	out, err := exec.Command("ip", "netns", "list").Output()
	if err != nil {
		t.Fatal(err)
	}
	if prefix == "" || strings.Contains(string(out), prefix) {
		t.Fatalf("namespaces left behind (prefix %q):\n%s", prefix, out)
	}
}
