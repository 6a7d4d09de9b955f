package main

import (
	"crypto/tls"
	"encoding/json"
	"fmt"
	"os"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/gpuctl/gpuctl/control"
	"github.com/gpuctl/gpuctl/errs"
)

// jsonFlag is the --json flag every listing and creating command takes.
var jsonFlag = &cli.BoolFlag{Name: "json", Usage: "print machine-readable JSON"}

// tlsFlags are the global flags that put the control API on HTTPS.
func tlsFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "tls-ca", Usage: "talk HTTPS to --host, verifying gpud's certificate against the CA bundle in `FILE` (PEM); " +
			"the certificate must hold the host part of --host", EnvVars: []string{"GPUCTL_TLS_CA"}},
		&cli.StringFlag{Name: "tls-server-name", Usage: "with --tls-ca, the `NAME` gpud's certificate must hold instead of the host part of --host",
			EnvVars: []string{"GPUCTL_TLS_SERVER_NAME"}},
	}
}

// clientTLS reads the global TLS flags: nil (plain HTTP) without --tls-ca.
func clientTLS(c *cli.Context) (*tls.Config, error) {
	ca, name := c.String("tls-ca"), c.String("tls-server-name")
	if ca == "" {
		if name != "" {
			return nil, errs.New(errs.InvalidArgument, "", "--tls-server-name needs --tls-ca (or GPUCTL_TLS_CA): the CA that signed gpud's certificate")
		}
		return nil, nil
	}
	return control.ClientTLS(ca, name)
}

// apiClient builds a control-API client from the global flags.
func apiClient(c *cli.Context) (*control.Client, error) {
	host := c.String("host")
	tok, err := readToken(c.String("token-file"))
	if err != nil {
		return nil, err
	}
	cfg, err := clientTLS(c)
	if err != nil {
		return nil, err
	}
	return control.NewClient(host, tok, control.WithTLS(cfg)), nil
}

// readToken reads a token file; an empty path falls back to GPUCTL_TOKEN.
func readToken(path string) (string, error) {
	if path == "" {
		if t := os.Getenv("GPUCTL_TOKEN"); t != "" {
			return t, nil
		}
		return "", errs.New(errs.InvalidArgument, "", "no token: pass --token-file FILE (gpud writes one to STATE_DIR/token) or set GPUCTL_TOKEN_FILE")
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return "", errs.Wrap(err, errs.InvalidArgument, "", "read token file")
	}
	t := strings.TrimSpace(string(b))
	if t == "" {
		return "", errs.New(errs.InvalidArgument, "", "token file %s is empty", path)
	}
	return t, nil
}

// printJSON writes v as indented JSON to stdout.
func (e *env) printJSON(v any) error {
	enc := json.NewEncoder(e.stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func (e *env) printf(format string, args ...any) { fmt.Fprintf(e.stdout, format, args...) }

// exitCode maps an error's kind to gpuctl's exit status, so scripts can
// tell "not found" from "host down" without parsing text.
func exitCode(err error) int {
	switch errs.KindOf(err) {
	case errs.InvalidArgument:
		return 2
	case errs.NotFound:
		return 3
	case errs.Unavailable:
		return 4
	case errs.Unauthenticated, errs.PermissionDenied:
		return 5
	case errs.FailedPrecondition, errs.AlreadyExists:
		return 6
	case errs.DataLoss:
		return 7
	default:
		return 1
	}
}

// notYet is the action of a command whose implementation has not landed.
func notYet(name string) cli.ActionFunc {
	return func(*cli.Context) error {
		return errs.New(errs.FailedPrecondition, "", "%s is not available in this build", name)
	}
}
