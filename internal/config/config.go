// Package config reads postern's file of defaults,
// $XDG_CONFIG_HOME/postern/config.hcl (else ~/.config/postern/config.hcl):
//
//	policy          = "~/policies/agents.hcl" # run --policy when not given
//	machine         = "gpu1"                  # run --machine when not given
//	connect_timeout = "10s"                   # --connect-timeout when not given
//	ssh {
//	  config      = "~/.ssh/config.postern" # the ssh config read, not ~/.ssh/config
//	  known_hosts = "~/.ssh/known_hosts"    # where host keys are checked
//	}
//
// Every setting is optional, a flag given on the command line wins, and a
// file that is not there is no error. Errors carry file:line:col.
package config

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/gohcl"
	"github.com/hashicorp/hcl/v2/hclsyntax"
)

// Config is what the file sets; zero values are unset.
type Config struct {
	// File is where it was read from ("" when there was none).
	File           string
	Policy         string
	Machine        string
	ConnectTimeout time.Duration
	SSH            SSH
}

// SSH are the ssh settings.
type SSH struct {
	Config     string
	KnownHosts string
}

type file struct {
	Policy         string    `hcl:"policy,optional"`
	Machine        string    `hcl:"machine,optional"`
	ConnectTimeout string    `hcl:"connect_timeout,optional"`
	SSH            *sshBlock `hcl:"ssh,block"`
}

type sshBlock struct {
	Config     string `hcl:"config,optional"`
	KnownHosts string `hcl:"known_hosts,optional"`
}

// Error is a config file that cannot be used; its message has file:line:col
// for each problem.
type Error struct{ Diags hcl.Diagnostics }

func (e *Error) Error() string {
	var b strings.Builder
	for i, d := range e.Diags {
		if i > 0 {
			b.WriteString("; ")
		}
		if d.Subject != nil {
			fmt.Fprintf(&b, "%s:%d:%d: ", d.Subject.Filename, d.Subject.Start.Line, d.Subject.Start.Column)
		}
		b.WriteString(d.Summary)
		if d.Detail != "" {
			b.WriteString(": " + d.Detail)
		}
	}
	return b.String()
}

// Path is where the config file is: $XDG_CONFIG_HOME/postern/config.hcl,
// else ~/.config/postern/config.hcl.
func Path() (string, error) {
	if d := os.Getenv("XDG_CONFIG_HOME"); filepath.IsAbs(d) {
		return filepath.Join(d, "postern", "config.hcl"), nil
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return "", fmt.Errorf("find the config file: %w", err)
	}
	return filepath.Join(home, ".config", "postern", "config.hcl"), nil
}

// Load reads the config file at path; one that is not there is an empty Config.
func Load(path string) (Config, error) {
	src, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return Config{}, nil
	}
	if err != nil {
		return Config{}, fmt.Errorf("read config: %w", err)
	}
	return Parse(path, src)
}

// Parse parses config text; filename is used in errors. Paths starting with
// "~/" are under the home.
func Parse(filename string, src []byte) (Config, error) {
	f, diags := hclsyntax.ParseConfig(src, filename, hcl.InitialPos)
	if diags.HasErrors() {
		return Config{}, &Error{diags}
	}
	var raw file
	if diags := gohcl.DecodeBody(f.Body, nil, &raw); diags.HasErrors() {
		return Config{}, &Error{diags}
	}
	body := f.Body.(*hclsyntax.Body)
	var errs hcl.Diagnostics
	c := Config{File: filename, Policy: expandHome(raw.Policy), Machine: raw.Machine}
	if raw.ConnectTimeout != "" {
		d, err := time.ParseDuration(raw.ConnectTimeout)
		if err != nil || d <= 0 {
			a := body.Attributes["connect_timeout"]
			errs = append(errs, &hcl.Diagnostic{Severity: hcl.DiagError, Summary: fmt.Sprintf("connect_timeout %q is not a duration", raw.ConnectTimeout),
				Detail: `write it as Go does, e.g. "10s" or "1m30s"`, Subject: a.Expr.Range().Ptr()})
		}
		c.ConnectTimeout = d
	}
	if raw.SSH != nil {
		c.SSH = SSH{Config: expandHome(raw.SSH.Config), KnownHosts: expandHome(raw.SSH.KnownHosts)}
	}
	if errs.HasErrors() {
		return Config{}, &Error{errs}
	}
	return c, nil
}

func expandHome(p string) string {
	rest, ok := strings.CutPrefix(p, "~/")
	if !ok {
		return p
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return p
	}
	return filepath.Join(home, rest)
}
