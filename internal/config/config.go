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
	"github.com/hashicorp/hcl/v2/hclsyntax"
	"github.com/postern-dev/postern/internal/hcldecode"
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
	Policy         string
	Machine        string
	ConnectTimeout string
	SSH            *sshBlock
}

type sshBlock struct {
	Config     string
	KnownHosts string
}

// The file's schema, decoded by hand (hcldecode) rather than with gohcl:
// gohcl brings in hclwrite and go-cmp, whose package initialisation every
// start of postern would pay for, the wall's init included.
var (
	fileSchema = &hcl.BodySchema{
		// In name order, as gohcl lists them: a misspelt name is offered
		// the first of the nearest.
		Attributes: []hcl.AttributeSchema{{Name: "connect_timeout"}, {Name: "machine"}, {Name: "policy"}},
		Blocks:     []hcl.BlockHeaderSchema{{Type: "ssh"}},
	}
	sshSchema = &hcl.BodySchema{Attributes: []hcl.AttributeSchema{{Name: "config"}, {Name: "known_hosts"}}}
)

// decodeFile decodes body as gohcl.DecodeBody would into file: the same
// schema, conversions and diagnostics.
func decodeFile(body hcl.Body) (file, hcl.Diagnostics) {
	var raw file
	content, diags := body.Content(fileSchema)
	if content == nil {
		return raw, diags
	}
	diags = append(diags, hcldecode.Attr(content.Attributes["policy"], &raw.Policy)...)
	diags = append(diags, hcldecode.Attr(content.Attributes["machine"], &raw.Machine)...)
	diags = append(diags, hcldecode.Attr(content.Attributes["connect_timeout"], &raw.ConnectTimeout)...)
	var first *hcl.Block
	for _, b := range content.Blocks {
		if b.Type != "ssh" {
			continue
		}
		if first != nil {
			diags = append(diags, &hcl.Diagnostic{
				Severity: hcl.DiagError,
				Summary:  "Duplicate ssh block",
				Detail:   fmt.Sprintf("Only one ssh block is allowed. Another was defined at %s.", first.DefRange.String()),
				Subject:  &b.DefRange,
			})
			continue
		}
		first = b
		raw.SSH = &sshBlock{}
		sc, sdiags := b.Body.Content(sshSchema)
		diags = append(diags, sdiags...)
		if sc != nil {
			diags = append(diags, hcldecode.Attr(sc.Attributes["config"], &raw.SSH.Config)...)
			diags = append(diags, hcldecode.Attr(sc.Attributes["known_hosts"], &raw.SSH.KnownHosts)...)
		}
	}
	return raw, diags
}

// Error is a config file that cannot be used; its message has file:line:col
// for each problem.
type Error struct{ Diags hcl.Diagnostics }

func (e *Error) Error() string { return hcldecode.Message(e.Diags) }

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
	raw, diags := decodeFile(f.Body)
	if diags.HasErrors() {
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
